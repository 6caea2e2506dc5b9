#include "measure/counters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace ltb {
namespace {

std::map<std::string, double> Spread(std::vector<double> seconds) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : StepSpread(std::move(seconds))) out[k] = v;
  return out;
}

TEST(StepSpread, NearestRankPercentilesAndTheCoefficientOfVariation) {
  // 1..10 ms in any order: the 50th percentile is the 5th step, the 90th the
  // 9th, the 99th the 10th; the sample standard deviation of 1..10 over its
  // mean 5.5.
  const auto s =
      Spread({0.004, 0.001, 0.010, 0.002, 0.009, 0.003, 0.008, 0.005, 0.007, 0.006});
  EXPECT_DOUBLE_EQ(s.at("step_p50_ms"), 5);
  EXPECT_DOUBLE_EQ(s.at("step_p90_ms"), 9);
  EXPECT_DOUBLE_EQ(s.at("step_p99_ms"), 10);
  EXPECT_NEAR(s.at("step_cv_%"), 100 * std::sqrt(82.5 / 9) / 5.5, 1e-9);
}

TEST(Measured, KeepsEverySampleUpToItsLimitThenAUniformShareOfThem) {
  Measured few;
  for (const double s : {3.0, 1.0, 2.0}) few.Add(s);
  EXPECT_EQ(few.steps, (std::vector<double>{3.0, 1.0, 2.0}));
  EXPECT_DOUBLE_EQ(few.fastest, 1.0);
  few.launches_per_sample = 10;
  EXPECT_DOUBLE_EQ(few.TotalSeconds(), 60.0);

  // Four times the limit, rising from 1 to n: what is kept stays at the
  // limit, and is spread over the whole run (its mean is the run's, n / 2),
  // while the sum and the fastest stay exact.
  Measured many;
  const int64_t n = 4 * static_cast<int64_t>(Measured::kKeptSamples);
  for (int64_t i = 1; i <= n; ++i) many.Add(static_cast<double>(i));
  EXPECT_EQ(many.steps.size(), Measured::kKeptSamples);
  EXPECT_EQ(many.samples, n);
  EXPECT_DOUBLE_EQ(many.sum, static_cast<double>(n) * (n + 1) / 2);
  EXPECT_DOUBLE_EQ(many.fastest, 1.0);
  double mean = 0;
  for (const double s : many.steps) mean += s / many.steps.size();
  EXPECT_NEAR(mean / (n / 2.0), 1.0, 0.01);
  const auto late = std::count_if(many.steps.begin(), many.steps.end(),
                                  [&](double s) { return s > 3.0 * n / 4; });
  EXPECT_NEAR(static_cast<double>(late) / many.steps.size(), 0.25, 0.01);
}

TEST(StepSpread, OneStepHasNoSpreadAndNoStepsNothing) {
  const auto s = Spread({0.25});
  EXPECT_DOUBLE_EQ(s.at("step_p50_ms"), 250);
  EXPECT_DOUBLE_EQ(s.at("step_p99_ms"), 250);
  EXPECT_EQ(s.count("step_cv_%"), 0u);
  EXPECT_TRUE(StepSpread({}).empty());
}

TEST(JoulesOverRanks, EachCounterCountsOnce) {
  // Four ranks on two machines: ranks 0 and 1 share machine A's RAPL
  // packages, 2 and 3 machine B's two GPUs.
  const double a = MachineKey("rapl");
  const std::vector<double> meters = {a, a, a + 1, a + 2};
  EXPECT_DOUBLE_EQ(JoulesOverRanks(meters, {10.0, 10.5, 3.0, 4.0}), 17.0);
  // Every rank its own counter: the plain sum.
  EXPECT_DOUBLE_EQ(JoulesOverRanks({1, 2, 3}, {1.0, 2.0, 4.0}), 7.0);
  // A rank without a reading leaves the sum unknown.
  EXPECT_LT(JoulesOverRanks({1, 1, 2}, {1.0, -1.0, 4.0}), 0);
}

TEST(SharedCores, RanksOfOneMachineWithMoreThreadsThanItsCores) {
  // Two ranks of two threads each on one machine's two cores share them.
  EXPECT_EQ(SharedCores({{1, 2, {0, 1}}, {1, 2, {0, 1}}}),
            "2 data-parallel ranks on one machine run 4 threads together on 2 physical "
            "cores: they share cores, and one rank's peak times the ranks would count a "
            "shared core once per rank; give each rank cores of its own "
            "(OMP_NUM_THREADS, as tools/launch sets it, or --threads)");
  // A thread each: a core each.
  EXPECT_EQ(SharedCores({{1, 1, {0, 1}}, {1, 1, {0, 1}}}), "");
  // Pinned to cores of their own, every rank's threads have cores.
  EXPECT_EQ(SharedCores({{1, 2, {0, 1}}, {1, 2, {2, 3}}}), "");
  // Pinned to the same core: shared, though each has one thread.
  EXPECT_NE(SharedCores({{1, 1, {3}}, {1, 1, {3}}}), "");
  // Threads beyond a rank's own cores share only its own: counted up to them.
  EXPECT_EQ(SharedCores({{1, 4, {0}}, {1, 4, {1}}}), "");
  // Two machines of two cores, a rank of two threads on each: nothing shared;
  // two ranks of one on machine A and one of two on B: A's share.
  EXPECT_EQ(SharedCores({{1, 2, {0, 1}}, {2, 2, {0, 1}}}), "");
  EXPECT_EQ(SharedCores({{2, 2, {0, 1}}, {1, 1, {0}}, {1, 1, {0}}}),
            SharedCores({{1, 1, {0}}, {1, 1, {0}}}));
  EXPECT_NE(SharedCores({{1, 1, {0}}, {1, 1, {0}}})
                .find("2 threads together on 1 "
                      "physical core:"),
            std::string::npos);
  // One rank alone has nothing to share.
  EXPECT_EQ(SharedCores({{1, 8, {0, 1}}}), "");
}

TEST(MachineKey, OneMachinesCountersByTheirSource) {
  EXPECT_EQ(MachineKey("rapl"), MachineKey("rapl"));
  EXPECT_NE(MachineKey("nvml 0000:01:00.0"), MachineKey("nvml 0000:02:00.0"));
  // Exact in a double, so a sum over ranks carries it whole.
  const double key = MachineKey("rapl");
  EXPECT_EQ(key, std::floor(key));
  EXPECT_LT(key, std::ldexp(1.0, 53));
}

}  // namespace
}  // namespace ltb
