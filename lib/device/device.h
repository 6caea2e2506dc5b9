// Device strings, availability and synchronisation for the benchmarks, each
// answered by the device's backend (backend.h). A device the machine lacks
// is still a valid name: it gets a reason why it is unavailable, so a
// benchmark asked for on it reports that reason.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/backend.h"

namespace ltb {

// Parses "cpu", "cuda", "cuda:N" or "mps". "cuda" means the first GPU.
// Errors name the accepted forms.
absl::StatusOr<c10::Device> ParseDevice(const std::string& text);

// The canonical name used in benchmark names: "cpu", "cuda", "cuda:1", "mps".
// "cuda" is the first GPU; other GPUs carry their index.
std::string DeviceName(const c10::Device& device);

// Whether LibTorch can run on `device` now; when not, *why_not says why in a
// sentence a user can act on.
bool DeviceAvailable(const c10::Device& device, std::string* why_not);

// Whether this LibTorch multiplies matrices of `dtype` on `device` (LibTorch
// 1.13 has no fp16 matmul on the CPU, for one); `why_not` says what it
// answered when it does not. Asked once per device and dtype.
bool DtypeRuns(const c10::Device& device, c10::ScalarType dtype, std::string* why_not);

// Every device LibTorch can run on here: cpu, then each GPU, then mps.
std::vector<c10::Device> AvailableDevices();

// One line per device family for the console: what is there and what is not.
std::string DeviceSummary();

// Blocks until all work queued on `device` has finished.
void Synchronize(const c10::Device& device);

// Bytes the device can still give to a new benchmark, or -1 if unknown.
int64_t DeviceAvailableBytes(const c10::Device& device);

// The machine's CPU, where models are built and results are compared.
c10::Device HostDevice();

// An error when the environment overrides the TF32 setting that a CUDA
// run's names state: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes LibTorch run
// every fp32 matmul as TF32 (under names without /tf32), and
// NVIDIA_TF32_OVERRIDE=0 keeps cuBLAS and cuDNN from TF32 (so /tf32 runs,
// when `tf32_runs`, would be plain fp32).
absl::Status CheckTf32Environment(bool tf32_runs);

// An error when the environment lets oneDNN compute fp32 in a narrower
// type (ONEDNN_DEFAULT_FPMATH_MODE or DNNL_DEFAULT_FPMATH_MODE other than
// STRICT: BF16, F16, TF32, ANY), which the host's fp32 names do not say.
absl::Status CheckFpmathEnvironment();

}  // namespace ltb
