// Google Benchmark reporters of the suite's own: one that leaves out the
// benchmarks a stopped run never ran, the file formats of --benchmark_out,
// and the silent one of ranks other than 0.
#pragma once

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

namespace ltb {

// Forwards to another reporter, leaving out the benchmarks that never ran
// because the run stopped. As the file reporter it hands the output file
// Google Benchmark opened on to the reporter it wraps.
class StoppedRunsFilter : public benchmark::BenchmarkReporter {
 public:
  StoppedRunsFilter(benchmark::BenchmarkReporter* inner, bool pass_streams)
      : inner_(inner), pass_streams_(pass_streams) {}
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override { inner_->Finalize(); }

 private:
  benchmark::BenchmarkReporter* inner_;
  bool pass_streams_;
};

// The reporter of --benchmark_out_format: json (default), csv or console.
std::unique_ptr<benchmark::BenchmarkReporter> FileReporter(const std::string& format);

// What ranks other than 0 report: nothing.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace ltb
