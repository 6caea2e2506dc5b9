#include "report/reporters.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ltb {
namespace {

using BenchRun = benchmark::BenchmarkReporter::Run;

BenchRun MakeRun(const std::string& name, double mfu) {
  BenchRun run;
  run.run_name.function_name = name;
  run.iterations = 3;
  run.real_accumulated_time = 0.3;
  run.cpu_accumulated_time = 0.3;
  run.counters["mfu"] = benchmark::Counter(mfu);
  return run;
}

// The reporter as bench uses it, writing into `out`; `peak` is read when
// the context is written.
struct Written {
  std::string text;
  std::string errors;
};

Written Report(benchmark::BenchmarkReporter* format, std::string* peak,
               const std::vector<BenchRun>& runs, const std::string& raised_to) {
  std::ostringstream out, err;
  LateContextReporter reporter(format, [peak] {
    return std::vector<std::pair<std::string, std::string>>{
        {"peak_flops_cpu_fp32", *peak}, {"quoted", "a \"b\"\n\\c"}};
  });
  reporter.SetOutputStream(&out);
  reporter.SetErrorStream(&err);
  benchmark::BenchmarkReporter::Context context;
  context.name_field_width = 40;  // what RunSpecifiedBenchmarks sets
  reporter.ReportContext(context);
  for (const BenchRun& run : runs) reporter.ReportRuns({run});
  *peak = raised_to;  // a benchmark raised it while the run went on
  reporter.Finalize();
  return {out.str(), err.str()};
}

TEST(LateContextReporter, JsonContextHoldsTheEntriesAsTheRunLeftThem) {
  benchmark::JSONReporter json;
  std::string peak = "4e11 FLOP/s (measured)";
  const Written w =
      Report(&json, &peak,
             {MakeRun("Ops/matmul/256x256/cpu/fp32", 0.5),
              MakeRun("Ops/matmul/512x512/cpu/fp32", 0.75)},
             "5e11 FLOP/s (measured; raised to 5e11 by Ops/matmul/512x512)");
  const nlohmann::json doc = nlohmann::json::parse(w.text);  // throws if not JSON
  ASSERT_EQ(doc["benchmarks"].size(), 2u);
  EXPECT_EQ(doc["benchmarks"][0]["name"], "Ops/matmul/256x256/cpu/fp32");
  EXPECT_EQ(doc["benchmarks"][1]["mfu"], 0.75);
  const nlohmann::json& ctx = doc["context"];
  // Google Benchmark's own entries are kept, and the late ones are as they
  // stood at the end, escaped.
  EXPECT_TRUE(ctx.contains("date"));
  EXPECT_TRUE(ctx.contains("library_build_type"));
  EXPECT_EQ(ctx["peak_flops_cpu_fp32"],
            "5e11 FLOP/s (measured; raised to 5e11 by Ops/matmul/512x512)");
  EXPECT_EQ(ctx["quoted"], "a \"b\"\n\\c");
  // The runs were written as they came, before the end.
  EXPECT_LT(w.text.find("\"benchmarks\""), w.text.find("\"context\""));
}

TEST(LateContextReporter, JsonOpensWithTheContextSoThatAKilledRunKeepsIt) {
  benchmark::JSONReporter json;
  std::ostringstream out;
  std::string peak = "4e11 FLOP/s (measured)";
  LateContextReporter reporter(&json, [&peak] {
    return std::vector<std::pair<std::string, std::string>>{
        {"peak_flops_cpu_fp32", peak}};
  });
  reporter.SetOutputStream(&out);
  reporter.SetErrorStream(&out);
  benchmark::BenchmarkReporter::Context context;
  context.name_field_width = 40;
  reporter.ReportContext(context);
  reporter.ReportRuns({MakeRun("Ops/matmul/256x256/cpu/fp32", 0.5)});
  reporter.ReportRuns({MakeRun("Ops/matmul/512x512/cpu/fp32", 0.75)});
  peak = "5e11 FLOP/s (measured; raised)";
  // What a run killed here leaves: each entry whole, and the context at the
  // start; closing the list and the object makes it JSON.
  const nlohmann::json cut = nlohmann::json::parse(out.str() + "\n  ]\n}\n");
  ASSERT_EQ(cut["benchmarks"].size(), 2u);
  EXPECT_EQ(cut["benchmarks"][1]["name"], "Ops/matmul/512x512/cpu/fp32");
  EXPECT_TRUE(cut["context_at_start"].contains("date"));
  EXPECT_EQ(cut["context_at_start"]["peak_flops_cpu_fp32"], "4e11 FLOP/s (measured)");
  EXPECT_FALSE(cut.contains("context"));
  reporter.Finalize();
  const nlohmann::json doc = nlohmann::json::parse(out.str());
  EXPECT_EQ(doc["context_at_start"]["peak_flops_cpu_fp32"], "4e11 FLOP/s (measured)");
  EXPECT_EQ(doc["context"]["peak_flops_cpu_fp32"], "5e11 FLOP/s (measured; raised)");
}

TEST(LateContextReporter, JsonWithNoBenchmarkIsStillJson) {
  benchmark::JSONReporter json;
  std::string peak = "1";
  const nlohmann::json doc = nlohmann::json::parse(Report(&json, &peak, {}, "2").text);
  EXPECT_TRUE(doc["benchmarks"].empty());
  EXPECT_EQ(doc["context"]["peak_flops_cpu_fp32"], "2");
}

TEST(LateContextReporter, TextFormatsPrintTheEntriesWithTheirContext) {
  benchmark::ConsoleReporter console(benchmark::ConsoleReporter::OO_None);
  std::string peak = "4e11 FLOP/s (measured)";
  const Written w =
      Report(&console, &peak, {MakeRun("Ops/matmul/256x256/cpu/fp32", 0.5)}, "5e11");
  EXPECT_NE(w.errors.find("peak_flops_cpu_fp32: 4e11 FLOP/s (measured)\n"),
            std::string::npos)
      << w.errors;
  EXPECT_NE(w.text.find("Ops/matmul/256x256/cpu/fp32"), std::string::npos) << w.text;
}

TEST(StoppedRunsFilter, AnAggregateCounterThatIsNoNumberIsLeftOut) {
  // --benchmark_repetitions=2 of a run whose token_match_% is 0 both times:
  // its mean and stddev are 0, and its coefficient of variation 0 / 0.
  benchmark::JSONReporter json;
  StoppedRunsFilter filter(&json, /*pass_streams=*/true);
  std::ostringstream out, err;
  filter.SetOutputStream(&out);
  filter.SetErrorStream(&err);
  benchmark::BenchmarkReporter::Context context;
  filter.ReportContext(context);
  std::vector<BenchRun> runs;
  for (const char* aggregate : {"", "mean", "cv"}) {
    BenchRun run = MakeRun("Llama/1B/cpu/generate", 0.5);
    run.counters["token_match_%"] = benchmark::Counter(0);
    if (*aggregate != '\0') {
      run.run_type = BenchRun::RT_Aggregate;
      run.aggregate_name = aggregate;
      run.aggregate_unit = benchmark::StatisticUnit::kPercentage;
      if (std::string(aggregate) == "cv") {
        run.counters["token_match_%"] = benchmark::Counter(std::nan(""));
        run.counters["mfu"] = benchmark::Counter(0.01);
      }
    }
    runs.push_back(run);
  }
  filter.ReportRuns(runs);
  filter.Finalize();
  const nlohmann::json doc = nlohmann::json::parse(out.str());  // NaN would throw
  ASSERT_EQ(doc["benchmarks"].size(), 3u);
  EXPECT_EQ(doc["benchmarks"][0]["token_match_%"], 0);
  EXPECT_EQ(doc["benchmarks"][1]["token_match_%"], 0);
  EXPECT_EQ(doc["benchmarks"][2]["aggregate_name"], "cv");
  EXPECT_FALSE(doc["benchmarks"][2].contains("token_match_%"));
  EXPECT_EQ(doc["benchmarks"][2]["mfu"], 0.01);
}

}  // namespace
}  // namespace ltb
