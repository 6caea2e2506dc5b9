// Tensor-memory accounting: a tracking CPU allocator installed into LibTorch,
// peak readings per device, the malloc settings the suite runs with, and the
// memory guard that refuses a benchmark which cannot fit.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ltb {

// Installs the tracking allocator as LibTorch's CPU allocator (idempotent).
// Must run before the tensors to be tracked are allocated.
void InstallCpuTracking();
bool CpuTrackingInstalled();

// Bytes of CPU tensor memory currently allocated through LibTorch, and the
// peak since the last ResetCpuPeak().
int64_t CpuAllocatedBytes();
int64_t CpuPeakBytes();
void ResetCpuPeak();

// Peak tensor memory of `device` since ResetPeak(device), or -1 if unknown.
void ResetPeak(const c10::Device& device);
int64_t PeakBytes(const c10::Device& device);

// The process's peak resident set (Linux's VmHWM), which ResetPeakRss()
// brings down to the current resident set (through /proc/self/clear_refs).
// Both say false / -1 where the system cannot.
bool ResetPeakRss();
int64_t PeakRssBytes();

// Returns cached device memory to the driver between benchmarks (on the
// CPU, the memory malloc keeps, so the next memory check sees it free).
void ReleaseCachedMemory(const c10::Device& device);

// glibc malloc: "tuned" keeps freed memory in the process (no mmap for large
// blocks, no trimming) so a step does not pay page faults for memory the
// previous step returned; "system" leaves glibc's defaults. Returns a
// description for the run context.
absl::Status ConfigureMalloc(const std::string& mode, std::string* description);

// What a benchmark needs, by kind, in bytes.
struct MemoryEstimate {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  // Host memory to build the model before it is converted or moved: every
  // LibTorch module starts as fp32 tensors on the CPU.
  int64_t host_build = 0;
  int64_t Total() const { return weights + gradients + optimizer + activations; }
};

// OK when `need` fits in what `device` has available; otherwise an error
// that names both numbers and what the estimate is made of.
absl::Status CheckFits(const MemoryEstimate& need, const c10::Device& device);

// "1.23 GiB"-style rendering.
std::string FormatBytes(int64_t bytes);

}  // namespace ltb
