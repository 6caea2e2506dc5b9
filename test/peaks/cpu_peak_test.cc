#include "peaks/cpu_peak.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "device/cpu_isa.h"

namespace ltb {
namespace {

// The CPU's flags less those LTB_MAX_CPU_ISA hides (cpu_isa_test checks
// that view against /proc/cpuinfo).
bool CpuHasFlag(const std::string& flag) { return CpuHas(flag); }

TEST(NativeArithmetic, FollowsTheCpuFlags) {
  // fp32 on every x86-64 CPU (SSE2), with FMA where the CPU has it.
  const std::vector<std::string> fp32 = NativeArithmetic(c10::kFloat);
  EXPECT_EQ(fp32.back(), "sse2 multiply and add");
  EXPECT_EQ(fp32.size(),
            1u + (CpuHasFlag("avx2") && CpuHasFlag("fma")) + CpuHasFlag("avx512f"));
  EXPECT_EQ(!NativeArithmetic(c10::kHalf).empty(), CpuHasFlag("avx512_fp16"));
  EXPECT_EQ(!NativeArithmetic(c10::kBFloat16).empty(),
            CpuHasFlag("avx512_bf16") || CpuHasFlag("amx_bf16"));
  EXPECT_TRUE(NativeArithmetic(c10::kDouble).empty());
}

TEST(MeasureLoopPeak, MeasuresTheFastestNativeArithmeticAndNothingWithoutIt) {
  const std::vector<std::string> native = NativeArithmetic(c10::kFloat);
  ASSERT_FALSE(native.empty());
  const LoopPeak one = MeasureLoopPeak(c10::kFloat, 1);
  EXPECT_GT(one.flops, 1e9);
  // Whichever of the CPU's kernels ran fastest: the widest is not always
  // (AMD's Zen 4 runs an AVX-512 FMA as two 256-bit halves).
  EXPECT_NE(std::find(native.begin(), native.end(), one.isa), native.end()) << one.isa;
  EXPECT_EQ(MeasureLoopPeak(c10::kDouble).flops, 0);
  EXPECT_TRUE(MeasureLoopPeak(c10::kDouble).isa.empty());
  // That the peak bounds every GEMM is checked where it matters, by bench
  // measuring itself (test/e2e: PeaksTest), not by timing here.
}

TEST(LoopThreadsAlone, OneThreadsRateCountsOncePerCoreWithinTheQuota) {
  EXPECT_DOUBLE_EQ(LoopThreadsAlone(2, 2, -1), 2);
  EXPECT_DOUBLE_EQ(LoopThreadsAlone(4, 2, -1), 2);     // OMP_NUM_THREADS=4 on two cores
  EXPECT_DOUBLE_EQ(LoopThreadsAlone(2, 8, -1), 2);     // fewer threads than cores
  EXPECT_DOUBLE_EQ(LoopThreadsAlone(4, 8, 1.5), 1.5);  // a cgroup's 1.5 CPUs
  EXPECT_DOUBLE_EQ(LoopThreadsAlone(1, 2, 0.5), 1);    // one thread: its own rate
}

}  // namespace
}  // namespace ltb
