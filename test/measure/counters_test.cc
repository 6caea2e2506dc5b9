#include "measure/counters.h"

#include <gtest/gtest.h>

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

TEST(StepSpread, OneStepHasNoSpreadAndNoStepsNothing) {
  const auto s = Spread({0.25});
  EXPECT_DOUBLE_EQ(s.at("step_p50_ms"), 250);
  EXPECT_DOUBLE_EQ(s.at("step_p99_ms"), 250);
  EXPECT_EQ(s.count("step_cv_%"), 0u);
  EXPECT_TRUE(StepSpread({}).empty());
}

}  // namespace
}  // namespace ltb
