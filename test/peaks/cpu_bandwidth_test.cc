#include "peaks/cpu_bandwidth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

namespace ltb {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;

TEST(BandwidthBuffer, SixteenTimesTheLastLevelCacheAtLeastAGibInWholePages) {
  // A 300 MiB L3 (a big Xeon's) streams 4.7 GiB, rounded up; a small one 1 GiB.
  const int64_t unit = int64_t{4096} * 2 * 8192;
  EXPECT_EQ(BandwidthBufferBytes(32 * kMiB, 2), kGiB);
  EXPECT_EQ(BandwidthBufferBytes(64 * kMiB, 2), kGiB);
  EXPECT_EQ(BandwidthBufferBytes(0, 2), kGiB);
  const int64_t big = BandwidthBufferBytes(300 * kMiB, 2);
  EXPECT_GE(big, 4800 * kMiB);
  EXPECT_LT(big, 4800 * kMiB + unit);
  EXPECT_EQ(big % unit, 0);
  EXPECT_EQ(BandwidthBufferBytes(300 * kMiB, 16) % (int64_t{4096} * 16 * 8192), 0);
}

TEST(BandwidthBuffer, AQuarterOfTheFreeMemoryAtMostButAGibAtLeast) {
  const int64_t unit = int64_t{4096} * 2 * 8192;
  // 8 GiB free: 2 GiB of the 4.7 a 300 MiB cache would want.
  EXPECT_EQ(BandwidthBufferBytes(300 * kMiB, 2, 8 * kGiB), 2 * kGiB);
  // 2 GiB free: still 1 GiB (less would not be far past a large cache).
  EXPECT_EQ(BandwidthBufferBytes(300 * kMiB, 2, 2 * kGiB), kGiB);
  // Plenty free: the cache decides.
  const int64_t big = BandwidthBufferBytes(300 * kMiB, 2, 128 * kGiB);
  EXPECT_EQ(big, BandwidthBufferBytes(300 * kMiB, 2));
  EXPECT_EQ(big % unit, 0);
}

TEST(MeasureCpuBandwidth, TheFastestOfFourWaysSetsThePeakAndIsNamed) {
  // A small buffer keeps the test short: what is checked is the method, not
  // the machine's figure.
  const BandwidthPeak p = MeasureCpuBandwidth(2, 64 * kMiB);
  ASSERT_EQ(p.methods.size(), 4u);
  std::set<std::string> names;
  double fastest = 0;
  for (const BandwidthMethod& m : p.methods) {
    names.insert(m.name);
    EXPECT_GT(m.bytes_per_s, 0) << m.name;
    fastest = std::max(fastest, m.bytes_per_s);
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"streaming read", "sum", "copy", "matrix-vector"}));
  // torch.sum over the buffer is one of the ways: it cannot beat the peak.
  EXPECT_EQ(p.bytes_per_s, fastest);
  EXPECT_TRUE(names.count(p.method));
  for (const BandwidthMethod& m : p.methods) {
    if (m.name == p.method) EXPECT_EQ(m.bytes_per_s, p.bytes_per_s);
  }
  // At least 4 rounds (three, then two without a 1% rise), at most 12.
  EXPECT_GE(p.rounds, 4);
  EXPECT_LE(p.rounds, 12);
  EXPECT_EQ(p.buffer_bytes, 64 * kMiB);
  EXPECT_EQ(p.threads, 2);
  const std::string text = DescribeBandwidthPeak(p);
  EXPECT_EQ(text.rfind("measured: " + p.method + ", the fastest of 4 ways", 0), 0u)
      << text;
  for (const BandwidthMethod& m : p.methods)
    EXPECT_NE(text.find(m.name + " "), std::string::npos);
  EXPECT_NE(text.find("on 2 threads"), std::string::npos) << text;
}

}  // namespace
}  // namespace ltb
