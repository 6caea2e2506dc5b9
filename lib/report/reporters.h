// Google Benchmark reporters of the suite's own: one that leaves out the
// benchmarks a stopped run never ran, one that adds the context entries the
// run itself changes, the file formats of --benchmark_out, and the silent
// one of ranks other than 0.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ltb {

// Forwards to another reporter, leaving out the benchmarks that never ran
// because the run stopped, and an aggregate's counters that are no number
// (with --benchmark_repetitions, the coefficient of variation of a counter
// whose mean is 0: Google Benchmark writes NaN, which JSON readers that keep
// to the standard refuse). As the file reporter it hands the output file
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

// Context entries that can change while benchmarks run (a measured peak
// that a benchmark raised), asked for when they are written.
using LateContext = std::function<std::vector<std::pair<std::string, std::string>>()>;

// Forwards to another reporter, adding the `late` entries to its context.
// Google Benchmark's JSON gets its context after the benchmarks, written when
// the run has ended, so that it holds each entry as the run left it (and
// JSON readers do not care where it stands); it also opens with the context
// as it stood at the start ("context_at_start"), which is what a run killed
// before its end leaves (the tools read such a file). Text formats print the
// entries as they are when the run starts, after their own context. Either
// way the runs themselves are written as they are measured.
// The reporter it wraps writes to this one's streams.
class LateContextReporter : public benchmark::BenchmarkReporter {
 public:
  LateContextReporter(benchmark::BenchmarkReporter* inner, LateContext late)
      : inner_(inner), late_(std::move(late)) {}
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override { inner_->ReportRuns(runs); }
  void Finalize() override;

 private:
  // The JSON context's entries, the late ones as they are now.
  void WriteJsonContext(std::ostream& out) const;

  benchmark::BenchmarkReporter* inner_;
  LateContext late_;
  // JSON: the entries of Google Benchmark's own context, kept for the end
  // ("" when its JSON is not of the form this reporter knows).
  std::string json_context_;
  bool json_ = false;
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
