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

  // The run's end under a process group of several ranks: rank 0 says it
  // has left its last benchmark, and every rank waits for the others, so
  // that no rank leaves while another still reads the group's store.
  void Finish();

  // Store keys: rank 0 has left the benchmark `name`.
  static std::string LeftKey(const std::string& name);

  const RunOptions& options() const { return options_; }

 private:
  // Under a process group of several ranks, a benchmark that is not
  // data-parallel runs on rank 0 alone: the other ranks wait, polling the
  // store (however long it takes), until rank 0 has left it, and skip it;
  // it never shares the machine, its cores or its memory bandwidth with
  // another rank's copy of it. Whether this rank runs `spec`.
  bool TakeTurn(benchmark::State& state, const BenchSpec& spec);
  void Fail(benchmark::State& state, const std::string& message);
  void FailRun(benchmark::State& state, const BenchSpec& spec, std::string message);
  absl::Status Guard(const BenchSpec& spec, const Plan& plan, bool on);
  bool Measure(benchmark::State& state, const Family& family, const BenchSpec& spec,
               const RunOptions& options, const Plan& plan, Measured* measured);

  RunOptions options_;
  WorkloadCache cache_;
  std::string entered_;  // rank 0 of several: the benchmark it is in
};

}  // namespace ltb
