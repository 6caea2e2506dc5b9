#include "report/summary.h"

#include <gtest/gtest.h>

namespace ltb {
namespace {

using BenchRun = benchmark::BenchmarkReporter::Run;

BenchRun MakeRun(const std::string& name, const std::string& counter, double value,
                 bool error = false) {
  BenchRun run;
  run.run_name.function_name = name;
  run.counters[counter] = benchmark::Counter(value);
  run.error_occurred = error;
  return run;
}

TEST(SpeedupSummary, ComparesEachDeviceWithTheCpu) {
  const std::vector<BenchRun> runs = {
      MakeRun("GPT2/small/cpu/generate/batch:1/prompt:32/new:100/fp32", "tokens/s", 10),
      MakeRun("GPT2/small/cuda/generate/batch:1/prompt:32/new:100/fp32", "tokens/s", 27),
      MakeRun("GPT2/small/mps/generate/batch:1/prompt:32/new:100/fp32", "tokens/s", 15),
  };
  const std::string s = SpeedupSummary(runs);
  EXPECT_NE(s.find("GPT2/small/generate/batch:1/prompt:32/new:100/fp32"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("Speedup: 2.70x (cuda vs cpu)"), std::string::npos) << s;
  EXPECT_NE(s.find("Speedup: 1.50x (mps vs cpu)"), std::string::npos) << s;
}

TEST(SpeedupSummary, AveragesRepetitionsAndSkipsErrorsAndSingleDevices) {
  const std::vector<BenchRun> runs = {
      MakeRun("Ops/matmul/2048x2048/cpu/fp32", "FLOP/s", 100),
      MakeRun("Ops/matmul/2048x2048/cpu/fp32", "FLOP/s", 300),
      MakeRun("Ops/matmul/2048x2048/cuda/fp32", "FLOP/s", 800),
      MakeRun("Transformer/nano/cpu/forward/batch:4/seq:512/fp32", "tokens/s", 5),
      MakeRun("Transformer/nano/cuda/forward/batch:4/seq:512/fp32", "tokens/s", 0, true),
  };
  const std::string s = SpeedupSummary(runs);
  EXPECT_NE(s.find("Ops/matmul/2048x2048/fp32"), std::string::npos) << s;
  EXPECT_NE(s.find("Speedup: 4.00x (cuda vs cpu)"), std::string::npos) << s;
  EXPECT_EQ(s.find("Transformer"), std::string::npos) << s;
}

TEST(SpeedupSummary, EmptyWhenOnlyOneDeviceRan) {
  EXPECT_EQ(SpeedupSummary({MakeRun("Transformer/nano/cpu/forward/batch:4/seq:512/fp32",
                                    "tokens/s", 5)}),
            "");
}

TEST(ThroughputCounter, PrefersTokensThenSamplesThenFlopsThenBytes) {
  benchmark::UserCounters c;
  EXPECT_EQ(ThroughputCounter(c), "");
  c["bytes/s"] = 1;
  EXPECT_EQ(ThroughputCounter(c), "bytes/s");
  c["FLOP/s"] = 1;
  EXPECT_EQ(ThroughputCounter(c), "FLOP/s");
  c["tokens/s"] = 1;
  EXPECT_EQ(ThroughputCounter(c), "tokens/s");
}

}  // namespace
}  // namespace ltb
