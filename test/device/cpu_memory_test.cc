#include "device/cpu_memory.h"

#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

#include "device/device.h"
#include "units.h"

namespace ltb {
namespace {

at::Tensor Bytes(int64_t n) { return at::empty({n}, at::kByte); }

TEST(CpuTracking, IsInstalledAsLibTorchsCpuAllocator) {
  EXPECT_TRUE(CpuTrackingInstalled());
}

TEST(CpuTracking, ReportsAKnownAllocationPatternExactly) {
  const int64_t base = CpuAllocatedBytes();
  ResetCpuPeak();
  EXPECT_EQ(CpuPeakBytes(), base);
  {
    at::Tensor a = Bytes(1 * kMiB);
    at::Tensor b = Bytes(2 * kMiB);
    EXPECT_EQ(CpuAllocatedBytes() - base, 3 * kMiB);
    a.reset();
    at::Tensor c = Bytes(kMiB / 2);
    EXPECT_EQ(CpuAllocatedBytes() - base, 2 * kMiB + kMiB / 2);
  }
  EXPECT_EQ(CpuPeakBytes() - base, 3 * kMiB);
  EXPECT_EQ(CpuAllocatedBytes(), base);

  // A reset forgets the old peak: only what comes after counts.
  ResetCpuPeak();
  { at::Tensor d = Bytes(kMiB); }
  EXPECT_EQ(CpuPeakBytes() - base, kMiB);
}

TEST(CpuTracking, CountsViewsOnceAndFreesWithTheLastReference) {
  const int64_t base = CpuAllocatedBytes();
  at::Tensor a = Bytes(kMiB);
  at::Tensor view = a.narrow(0, 0, 16);
  a.reset();
  EXPECT_EQ(CpuAllocatedBytes() - base, kMiB);
  view.reset();
  EXPECT_EQ(CpuAllocatedBytes(), base);
}

TEST(CpuTracking, PeakOfTheDeviceMatchesTheCpuPeak) {
  const c10::Device cpu = HostDevice();
  BackendOf(cpu).ResetPeakMemory(cpu);
  const int64_t base = CpuAllocatedBytes();
  { at::Tensor a = Bytes(4 * kMiB); }
  EXPECT_EQ(BackendOf(cpu).PeakMemory(cpu) - base, 4 * kMiB);
}

}  // namespace
}  // namespace ltb
