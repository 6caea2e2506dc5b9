#include "models/ops.h"

#include <gtest/gtest.h>

#include <set>

#include "measure/counters.h"
#include "spec_for.h"

namespace ltb {
namespace {

OpCost Cost(const std::string& op, const std::string& shape,
            c10::ScalarType dtype = c10::kFloat) {
  absl::StatusOr<OpCost> c = OpCostFor(op, shape, dtype);
  EXPECT_TRUE(c.ok()) << op << "/" << shape << ": " << c.status();
  return c.value_or(OpCost{});
}

TEST(OpCost, MatmulsCountTwoFlopsPerMultiplyAdd) {
  EXPECT_DOUBLE_EQ(Cost("matmul", "2048x2048").flops, 2.0 * 2048 * 2048 * 2048);
  EXPECT_DOUBLE_EQ(Cost("matmul", "2048x768x3072").flops, 2.0 * 2048 * 768 * 3072);
  EXPECT_DOUBLE_EQ(Cost("bmm", "48x512x64x512").flops, 2.0 * 48 * 512 * 64 * 512);
  // Each operand once: A and B read, C written.
  EXPECT_DOUBLE_EQ(Cost("matmul", "256x256").bytes, 3.0 * 256 * 256 * 4);
  EXPECT_DOUBLE_EQ(Cost("matmul", "2048x768x3072", c10::kBFloat16).bytes,
                   (2048.0 * 768 + 768 * 3072 + 2048 * 3072) * 2);
  EXPECT_DOUBLE_EQ(Cost("bmm", "48x512x64x512").bytes,
                   48.0 * (512 * 64 + 64 * 512 + 512 * 512) * 4);
}

TEST(OpCost, ConvolutionCountsEveryOutputPixel) {
  // ResNet's stem: 224 -> 112 with a 7x7 stride-2 pad-3 kernel.
  EXPECT_DOUBLE_EQ(Cost("conv2d", "32x3x224x224_64x3x7x7_s2p3").flops,
                   2.0 * 32 * 64 * 3 * 7 * 7 * 112 * 112);
  EXPECT_DOUBLE_EQ(Cost("conv2d", "32x64x56x56_256x64x1x1_s1p0").flops,
                   2.0 * 32 * 256 * 64 * 56 * 56);
  EXPECT_DOUBLE_EQ(Cost("conv2d", "32x3x224x224_64x3x7x7_s2p3").bytes,
                   (32.0 * 3 * 224 * 224 + 64 * 3 * 7 * 7 + 32 * 64 * 112 * 112) * 4);
}

TEST(OpCost, MemoryBoundOpsCountBytesReadAndWritten) {
  EXPECT_DOUBLE_EQ(Cost("softmax", "48x512x512").bytes, 2.0 * 48 * 512 * 512 * 4);
  EXPECT_DOUBLE_EQ(Cost("add", "2048x3072").bytes, 3.0 * 2048 * 3072 * 4);
  EXPECT_DOUBLE_EQ(Cost("add", "2048x3072", c10::kBFloat16).bytes, 3.0 * 2048 * 3072 * 2);
  EXPECT_DOUBLE_EQ(Cost("gelu", "2048x3072").bytes, 2.0 * 2048 * 3072 * 4);
  EXPECT_DOUBLE_EQ(Cost("copy", "256MiB").bytes, 2.0 * 256 * (1 << 20));
  EXPECT_DOUBLE_EQ(Cost("embedding", "10000x768_2048").bytes,
                   2.0 * 2048 * 768 * 4 + 2048 * 8);
  EXPECT_EQ(Cost("copy", "256MiB").flops, 0);
}

TEST(OpCost, CausalAttentionCountsThePairsOnAndBelowTheDiagonal) {
  double pairs = 0;  // query i attends to keys 0..i
  for (int i = 0; i < 512; ++i) pairs += i + 1;
  // QK^T and AV: 2 FLOPs per multiply-add, hs of them per pair, per head.
  EXPECT_DOUBLE_EQ(Cost("sdpa", "4x12x512x64_causal").flops,
                   2 * 2.0 * 4 * 12 * 64 * pairs);
  // Q, K, V read and the output written; no T x T scores.
  EXPECT_DOUBLE_EQ(Cost("sdpa", "4x12x512x64_causal").bytes, 4.0 * 4 * 12 * 512 * 64 * 4);
}

TEST(OpCost, UnknownOpsNameTheValidOnes) {
  const auto bad = OpCostFor("matmul", "3x3", c10::kFloat);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("matmul/2048x2048"), std::string::npos);
}

TEST(OpsFamily, RegistersEveryOpAndTransfersOnCudaOnly) {
  std::set<std::string> ops;
  for (const OpShape& s : OpShapes()) ops.insert(s.op);
  for (const char* op : {"matmul", "bmm", "conv2d", "softmax", "layer_norm", "gelu",
                         "add", "copy", "sdpa", "embedding", "h2d_pinned", "h2d_pageable",
                         "d2h_pinned", "d2h_pageable", "d2d", "noop"}) {
    EXPECT_TRUE(ops.count(op)) << op;
  }
  for (const Case& c : OpsFamily().Cases()) {
    const bool transfer =
        c.size.rfind("h2d", 0) == 0 || c.size.rfind("d2h", 0) == 0 || c.size == "d2d";
    EXPECT_EQ(c.needs_host_transfers, transfer) << c.size;
  }
}

TEST(OpsFamily, TransfersCountTheirBytesOnceAcrossTheHostLink) {
  constexpr double kMiB = 1 << 20;
  const Family f = OpsFamily();
  for (const char* op : {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable"}) {
    EXPECT_DOUBLE_EQ(OpCostFor(op, "256MiB", c10::kFloat)->bytes, 256 * kMiB) << op;
    const absl::StatusOr<Plan> plan = f.plan(SpecFor("Ops", op, "256MiB"));
    EXPECT_TRUE(plan->bytes_cross_host_link) << op;
    // One copy on the device, one on the host.
    EXPECT_EQ(plan->memory.Total(), 256 * (1 << 20)) << op;
    EXPECT_EQ(plan->memory.host_build, 256 * (1 << 20)) << op;
  }
  // A copy within one device's memory reads and writes every byte.
  for (const char* op : {"copy", "d2d"}) {
    EXPECT_DOUBLE_EQ(OpCostFor(op, "256MiB", c10::kFloat)->bytes, 512 * kMiB) << op;
    const absl::StatusOr<Plan> plan = f.plan(SpecFor("Ops", op, "256MiB"));
    EXPECT_FALSE(plan->bytes_cross_host_link) << op;
    EXPECT_EQ(plan->memory.Total(), 512 * (1 << 20)) << op;
    EXPECT_EQ(plan->memory.host_build, 0) << op;
  }
}

TEST(OpsFamily, ComputeBoundOpsReportMfuAndMemoryBoundOnesMbu) {
  const Family f = OpsFamily();
  using Names = std::vector<std::string>;
  const auto names = [&](const char* op, const char* shape) {
    return PlannedCounterNames(f.plan(SpecFor("Ops", op, shape)).value());
  };
  const Names spread = {"step_p50_ms", "step_p90_ms", "step_p99_ms"};
  // FLOPs: mfu, and bytes/s for the arithmetic intensity only, no mbu.
  for (const auto& [op, shape] : std::vector<std::pair<const char*, const char*>>{
           {"matmul", "256x256"}, {"sdpa", "4x12x512x64_causal"}}) {
    const CounterNames n = names(op, shape);
    Names want = {"FLOP/s", "bytes/s"};
    want.insert(want.end(), spread.begin(), spread.end());
    EXPECT_EQ(n.counters, want) << op;
    EXPECT_EQ(n.utilisation, Names{"mfu"}) << op;
  }
  // Bytes alone: mbu against the device's memory, except across the host link.
  for (const char* op : {"copy", "d2d", "h2d_pinned", "d2h_pageable"}) {
    const CounterNames n = names(op, "256MiB");
    Names want = {"bytes/s"};
    want.insert(want.end(), spread.begin(), spread.end());
    EXPECT_EQ(n.counters, want) << op;
    const bool link =
        std::string(op).rfind("h2d", 0) == 0 || std::string(op).rfind("d2h", 0) == 0;
    EXPECT_EQ(n.utilisation, link ? Names{} : Names{"mbu"}) << op;
  }
  // noop: nothing but the step times.
  EXPECT_EQ(names("noop", "empty").counters, spread);
  EXPECT_TRUE(names("noop", "empty").utilisation.empty());
}

TEST(OpsFamily, EveryCpuOpRuns) {
  const Family f = OpsFamily();
  for (const Case& c : f.Cases()) {
    if (c.needs_host_transfers) continue;
    const BenchSpec s = SpecFor("Ops", c.size, c.phase.name);
    if (c.size == "matmul" || c.size == "conv2d" || c.size == "bmm")
      continue;  // slow; run in e2e
    ASSERT_TRUE(f.plan(s).ok()) << s.Name();
    f.build(s)->Step();
  }
}

TEST(OpsMatmulShapes, CoverEveryRegisteredMatmul) {
  int matmuls = 0;
  for (const OpShape& s : OpShapes()) matmuls += s.op == "matmul";
  EXPECT_EQ(static_cast<int>(OpsMatmulShapes().size()), matmuls);
}

}  // namespace
}  // namespace ltb
