// The part of the harness that talks to the CUDA runtime directly. It is
// compiled from cuda_support.cc when LibTorch has CUDA, and from
// cuda_support_stub.cc otherwise, so the rest of the suite never needs CUDA
// headers.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/torch_compat.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace ltb::cuda {

// True when this build links LibTorch's CUDA backend.
bool Compiled();

// CUDA runtime version LibTorch was built with, as "13.2", or "".
std::string RuntimeVersion();

// cuDNN version as "9.26.0", or "" when absent.
std::string CudnnVersion();

// Number of visible GPUs; when zero, *why says why (driver, no device).
int DeviceCount(std::string* why);

std::string DeviceName(int index);

// The device's PCI bus id ("0000:3B:00.0"), which names the same GPU to the
// CUDA runtime and to NVML whatever CUDA_VISIBLE_DEVICES does; "" when
// unknown.
std::string PciBusId(int index);

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
class EventTimeline {
 public:
  virtual ~EventTimeline() = default;
  virtual void Clear() = 0;
  virtual void Mark() = 0;
  virtual std::vector<double> Intervals() = 0;
};
std::unique_ptr<EventTimeline> MakeEventTimeline(int index);

// NCCL process group for data-parallel CUDA ranks; null when unavailable.
c10::intrusive_ptr<CommBackend> MakeNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size);

}  // namespace ltb::cuda
