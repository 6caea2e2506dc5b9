// The one benchmark body every registered benchmark runs, in four steps:
// plan (availability and cost), guard (memory), measure (build, warm-up and
// timed steps: warmup.h, timed_loop.h) and counters (counters.h), with every
// failure turned into a benchmark error instead of a crash.
#pragma once

#include <benchmark/benchmark.h>

#include "family/family.h"
#include "measure/run_options.h"
#include "measure/warmup.h"

namespace ltb {

void RunBenchmark(benchmark::State& state, const Family& family, const BenchSpec& spec,
                  const RunOptions& options);

}  // namespace ltb
