// The CUDA backend's boundary with the CUDA runtime. It is compiled from
// cuda_runtime.cc when LibTorch has CUDA, and from cuda_runtime_stub.cc
// otherwise, so nothing else needs CUDA headers.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/torch_compat.h"
#include "device/backend.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace ltb::cuda {

// True when this build links LibTorch's CUDA backend.
bool Compiled();

// CUDA runtime version LibTorch was built with, as "13.2", or "".
std::string RuntimeVersion();

// Which CUDA this file was compiled against and why, as the configuration
// chose it: "the CUDA toolkit 13.0 (/usr/local/cuda/bin/nvcc)", "the torch
// wheel's CUDA 13.2 runtime and headers (no CUDA toolkit (nvcc))", ...
std::string BuildNote();

// cuDNN version as "9.26.0", or "" when absent.
std::string CudnnVersion();

// Number of visible GPUs; when zero, *why says why (driver, no device).
int DeviceCount(std::string* why);

std::string DeviceName(int index);

// The device's compute capability as (major, minor), (8, 0) for an A100;
// (0, 0) when unknown.
std::pair<int, int> ComputeCapability(int index);

// The device's PCI bus id ("0000:3B:00.0"), which names the same GPU to the
// CUDA runtime and to NVML whatever CUDA_VISIBLE_DEVICES does; "" when
// unknown.
std::string PciBusId(int index);

// LibTorch's lazy CUDA initialisation (the runtime and the caching
// allocator of every visible device), which its first CUDA tensor would do:
// before it, the caching allocator refuses to report any device's memory.
// Idempotent and cheap once done; the memory queries below call it first.
void Initialize();

// Free and total bytes on the device (cudaMemGetInfo) plus what LibTorch's
// caching allocator holds but does not use, which it can hand out again.
int64_t AvailableBytes(int index);

// Peak bytes allocated by LibTorch's caching allocator since the last reset.
void ResetPeakAllocated(int index);
int64_t PeakAllocated(int index);
void EmptyCache();

// Times GPU work on the current stream with CUDA events: Mark() records an
// event without waiting; Intervals() waits for the last one and returns the
// seconds between consecutive marks.
std::unique_ptr<StepClock> MakeEventClock(int index);

// CUDA graphs on device `index` (at::cuda::CUDAGraph), captured on a side
// stream after two eager warm-up runs of the first step there, sharing one
// memory pool, replayed on the current stream.
std::unique_ptr<StepGraphs> MakeGraphs(int index);

// The sticky error that leaves device `index` unusable for the rest of the
// process (a device-side fault), or "" when it still works.
std::string StickyError(int index);
// Makes `index` the calling thread's current device.
void SetDevice(int index);
int64_t TotalBytes(int index);
// The L2 cache's bytes (cudaDeviceProp::l2CacheSize); 0 when unknown.
int64_t L2CacheBytes(int index);

// NCCL process group for data-parallel CUDA ranks; null when unavailable.
c10::intrusive_ptr<CommBackend> MakeNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    std::chrono::milliseconds timeout);

}  // namespace ltb::cuda
