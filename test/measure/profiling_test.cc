#include "measure/profiling.h"

#include <ATen/ops/ones.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <filesystem>
#include <stdexcept>

#include "absl/strings/str_format.h"
#include "spec_for.h"

namespace ltb {
namespace {

TEST(SelfTimes, SubtractsNestedOpsPerThread) {
  // Thread 1: linear [0, 100) holding matmul [10, 70) holding copy [20, 30);
  // then add [100, 120). Thread 2: matmul [5, 55), overlapping in time only.
  const std::vector<OpTime> t = SelfTimes({{"aten::linear", 1, 0, 100},
                                           {"aten::matmul", 1, 10, 70},
                                           {"aten::copy_", 1, 20, 30},
                                           {"aten::add", 1, 100, 120},
                                           {"aten::matmul", 2, 5, 55}});
  std::map<std::string, OpTime> by;
  for (const OpTime& o : t) by[o.name] = o;
  EXPECT_DOUBLE_EQ(by["aten::linear"].self_ns, 40);
  EXPECT_DOUBLE_EQ(by["aten::matmul"].self_ns, 50 + 50);
  EXPECT_EQ(by["aten::matmul"].calls, 2);
  EXPECT_DOUBLE_EQ(by["aten::copy_"].self_ns, 10);
  EXPECT_DOUBLE_EQ(by["aten::add"].self_ns, 20);
  EXPECT_EQ(t.front().name, "aten::matmul");  // most self time first
}

TEST(BusyFraction, CountsOverlapsOnceAndClipsToTheWindow) {
  EXPECT_DOUBLE_EQ(BusyFraction({{0, 10}, {5, 20}, {30, 40}}, {0, 100}), 0.3);
  EXPECT_DOUBLE_EQ(BusyFraction({{0, 50}}, {25, 75}), 0.5);
  EXPECT_DOUBLE_EQ(BusyFraction({}, {0, 10}), 0);
  EXPECT_DOUBLE_EQ(BusyFraction({{0, 10}}, {10, 10}), 0);
}

TEST(FormatTopOperators, ShowsSharesOfTheTotal) {
  const std::string table =
      FormatTopOperators({{"aten::mm", 3, 3e6}, {"aten::add", 1, 1e6}}, 10);
  EXPECT_NE(table.find("aten::mm"), std::string::npos);
  EXPECT_NE(table.find("75.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("25.0%"), std::string::npos) << table;
  // Beyond the rows asked for, the rest in one row: the rows add up.
  const std::string cut = FormatTopOperators({{"aten::mm", 3, 6e6},
                                              {"aten::add", 1, 2e6},
                                              {"aten::mul", 2, 1e6},
                                              {"aten::relu", 4, 1e6}},
                                             2);
  EXPECT_NE(cut.find("(2 others)"), std::string::npos) << cut;
  EXPECT_NE(
      cut.find(absl::StrFormat("%-48s %8d %14.3f %6.1f%%", "(2 others)", 6, 2.0, 20.0)),
      std::string::npos)
      << cut;
  EXPECT_EQ(cut.find("aten::relu"), std::string::npos) << cut;
}

TEST(FileStem, IsAPlainFileName) {
  EXPECT_EQ(FileStem("GPT2/small/cuda:1/generate/batch:1/prompt:32/new:100/fp32"),
            "GPT2_small_cuda-1_generate_batch-1_prompt-32_new-100_fp32");
}

// A few operators a step; the step numbered `throw_at` (from 1) throws.
class Steps final : public Workload {
 public:
  explicit Steps(int throw_at = 0) : throw_at_(throw_at) {}
  void Step() override {
    (at::ones({8, 8}) * 2).sum();
    if (++steps_ == throw_at_) throw std::runtime_error("step failed");
  }

 private:
  int throw_at_, steps_ = 0;
};

TEST(ProfileSteps, AStepThatThrowsLeavesTheProfilerOffForTheNextBenchmark) {
  const std::string dir =
      testing::TempDir() + "/ltb_profile_" + std::to_string(::getpid());
  BenchSpec spec = SpecFor("Transformer", "nano", "forward", 2, 16);
  spec.device = c10::Device(c10::kCPU);
  Steps failing(/*throw_at=*/2);
  EXPECT_THROW((void)ProfileSteps(failing, spec, 3, dir), std::runtime_error);
  EXPECT_FALSE(torch::autograd::profiler::isProfilerEnabledInMainThread());
  // The next benchmark profiles as usual (enabling a profiler that is still
  // on would throw).
  Steps fine;
  const absl::StatusOr<ProfileResult> result = ProfileSteps(fine, spec, 2, dir);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(torch::autograd::profiler::isProfilerEnabledInMainThread());
  bool ones = false;  // one a step (mul and sum call an overload of themselves)
  for (const OpTime& op : result->ops)
    ones = ones || (op.name == "aten::ones" && op.calls == 2);
  std::string seen;
  for (const OpTime& op : result->ops)
    seen += op.name + " x" + std::to_string(op.calls) + "\n";
  EXPECT_TRUE(ones) << "two profiled steps, one aten::ones each; seen:\n" << seen;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ltb
