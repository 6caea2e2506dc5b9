// The one benchmark body every registered benchmark runs: availability and
// memory checks, build, warm-up, timed steps and counters, with every
// failure turned into a benchmark error instead of a crash.
#pragma once

#include <benchmark/benchmark.h>

#include "harness/family.h"
#include "harness/peaks.h"

namespace ltb {

struct RunOptions {
  double warmup_seconds = 0.5;  // warm up at least this long ...
  int warmup_steps = 1;         // ... and at least this many steps
  int warmup_epochs = 1;        // train_epoch: whole epochs instead
  uint64_t seed = 0;
  // Peaks for the mfu and mbu counters; prepared before the run.
  const Peaks* peaks = nullptr;
  // --profile: profile this many steps apart from the timed ones, into dir.
  std::string profile_dir;
  int profile_steps = 5;
};

void RunBenchmark(benchmark::State& state, const Family& family, const BenchSpec& spec,
                  const RunOptions& options);

// The spread of a benchmark's measured step times: step_p50_ms,
// step_p90_ms, step_p99_ms (nearest-rank percentiles) and, from two steps
// on, step_cv_% (sample standard deviation over the mean).
std::vector<std::pair<std::string, double>> StepSpread(std::vector<double> seconds);

// Drops the model kept between invocations of one benchmark.
void ReleaseCachedWorkload();

}  // namespace ltb
