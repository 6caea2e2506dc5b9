// The timed steps of one benchmark: each step timed by its device's clock
// and handed to Google Benchmark as manual time, with the peaks of memory
// reset just before them.
#pragma once

#include <benchmark/benchmark.h>

#include <optional>
#include <string>
#include <vector>

#include "family/family.h"

namespace ltb {

struct Measured {
  std::vector<double> steps;  // each timed step's seconds
  bool rss_reset = false;     // whether the peak resident set was reset
};

// Runs the steps Google Benchmark asks for. Returns why it stopped early
// (a signal, a time limit) or nullopt; exceptions from the workload pass.
std::optional<std::string> RunTimedSteps(benchmark::State& state, Workload& workload,
                                         const BenchSpec& spec, Measured* out);

}  // namespace ltb
