#include "harness/memory.h"

#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

namespace ltb {
namespace {

constexpr int64_t kMiB = 1 << 20;

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
  const c10::Device cpu(c10::kCPU);
  ResetPeak(cpu);
  const int64_t base = CpuAllocatedBytes();
  { at::Tensor a = Bytes(4 * kMiB); }
  EXPECT_EQ(PeakBytes(cpu) - base, 4 * kMiB);
}

TEST(CheckFits, AcceptsWhatFitsAndNamesBothNumbersOtherwise) {
  const c10::Device cpu(c10::kCPU);
  MemoryEstimate small;
  small.weights = kMiB;
  EXPECT_TRUE(CheckFits(small, cpu).ok());

  MemoryEstimate huge;
  huge.weights = int64_t{1} << 50;  // 1 PiB
  huge.optimizer = int64_t{1} << 40;
  const absl::Status s = CheckFits(huge, cpu);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(s.message());
  EXPECT_NE(msg.find(FormatBytes(huge.Total())), std::string::npos) << msg;
  EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer state 1024.00 GiB"), std::string::npos) << msg;
}

TEST(CheckFits, CountsTheFp32HostBuildOfAModelForAnyDevice) {
  // Small on the device, but too big to build on the host first.
  MemoryEstimate need;
  need.weights = kMiB;
  need.host_build = int64_t{1} << 50;
  for (const c10::Device& d : {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)}) {
    const absl::Status s = CheckFits(need, d);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("to build the fp32 model on the host"), std::string::npos)
        << s.message();
  }
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3 * kMiB), "3.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 30), "5.00 GiB");
}

TEST(ConfigureMalloc, KnowsItsModesAndRejectsOthers) {
  std::string description;
  EXPECT_TRUE(ConfigureMalloc("system", &description).ok());
  EXPECT_NE(description.find("default"), std::string::npos);
  EXPECT_TRUE(ConfigureMalloc("tuned", &description).ok());
  EXPECT_NE(description.find("M_MMAP_MAX=0"), std::string::npos);
  const absl::Status bad = ConfigureMalloc("jemalloc", &description);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("valid: tuned, system"), std::string::npos);
}

}  // namespace
}  // namespace ltb
