// The one benchmark body every registered benchmark runs, in four steps:
// plan (availability and cost), guard (memory), measure (build, warm-up and
// timed steps: warmup.h, timed_loop.h) and counters (counters.h), with every
// failure turned into a benchmark error instead of a crash.
#pragma once

#include <benchmark/benchmark.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "family/family.h"
#include "measure/run_options.h"
#include "measure/timed_loop.h"
#include "measure/warmup.h"

namespace ltb {

// Runs a run's benchmarks, one at a time, with its options, keeping the
// workload of the one being run across Google Benchmark's calls to it. One
// a run: the registered benchmarks point at it.
class Runner {
 public:
  explicit Runner(RunOptions options) : options_(std::move(options)) {}
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  void Run(benchmark::State& state, const Family& family, const BenchSpec& spec);

  // Drops the kept workload and gives its memory back (the run's end).
  void Release() { cache_.Release(); }

  const RunOptions& options() const { return options_; }

 private:
  void Fail(benchmark::State& state, const std::string& message);
  void FailRun(benchmark::State& state, const BenchSpec& spec, std::string message);
  absl::Status Guard(const BenchSpec& spec, const Plan& plan, bool on);
  bool Measure(benchmark::State& state, const Family& family, const BenchSpec& spec,
               const RunOptions& options, const Plan& plan, Measured* measured);

  RunOptions options_;
  WorkloadCache cache_;
};

}  // namespace ltb
