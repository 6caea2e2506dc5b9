#include "measure/warmup.h"

#include <gtest/gtest.h>

#include <memory>

namespace ltb {
namespace {

class CountingWorkload final : public Workload {
 public:
  explicit CountingWorkload(int* steps) : steps_(steps) {}
  void Step() override { ++*steps_; }

 private:
  int* steps_;
};

// A family whose workloads count how often they are built and stepped.
Family CountingFamily(int* builds, int* steps) {
  Family f;
  f.name = "Counting";
  f.build = [builds, steps](const BenchSpec&) -> std::unique_ptr<Workload> {
    ++*builds;
    return std::make_unique<CountingWorkload>(steps);
  };
  return f;
}

BenchSpec SpecOf(const std::string& size) {
  BenchSpec s;
  s.family = "Counting";
  s.size = size;
  s.phase = "step";
  return s;
}

TEST(WorkloadCache, KeepsItsOwnWorkloadUntilAnotherBenchmarkOrRelease) {
  int builds = 0, steps = 0;
  const Family family = CountingFamily(&builds, &steps);
  RunOptions options;
  options.warmup_seconds = 0;
  options.warmup_steps = 3;
  const BenchSpec a = SpecOf("a"), b = SpecOf("b");
  WorkloadCache one, two;
  Workload& first = one.Prepare(family, a, options);
  EXPECT_EQ(&one.Prepare(family, a, options), &first) << "kept across calls";
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(steps, 3);  // the warm-up, once
  EXPECT_EQ(one.current().name, a.Name());
  // Two runs share nothing.
  EXPECT_EQ(two.current().workload, nullptr);
  two.Prepare(family, a, options);
  EXPECT_EQ(builds, 2);
  one.Prepare(family, b, options);
  EXPECT_EQ(builds, 3);
  EXPECT_EQ(one.current().name, b.Name());
  EXPECT_EQ(two.current().name, a.Name());
  one.Release();
  EXPECT_EQ(one.current().workload, nullptr);
  EXPECT_TRUE(one.current().name.empty());
  EXPECT_NE(two.current().workload, nullptr);
}

}  // namespace
}  // namespace ltb
