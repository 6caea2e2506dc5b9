// Counting the CPU's tensor memory: a tracking allocator installed into
// LibTorch as its CPU allocator, whose peak the CPU backend reports.
#pragma once

#include <cstdint>

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

}  // namespace ltb
