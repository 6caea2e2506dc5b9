// The timed steps of one benchmark: each step timed by its device's clock
// and handed to Google Benchmark as manual time, with the peaks of memory
// reset just before them.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "family/family.h"

namespace ltb {

struct Measured {
  // Timed samples' seconds per step (a sample is `launches_per_sample` steps
  // queued back to back between two clock marks): every sample up to
  // kKeptSamples, then a uniform random sample of them (reservoir
  // sampling), so that nanosecond steps measured for seconds keep 8 MB, not
  // gigabytes. The sum, count and fastest are exact.
  static constexpr size_t kKeptSamples = size_t{1} << 20;
  void Add(double seconds_per_step);
  std::vector<double> steps;
  int64_t samples = 0;
  double sum = 0;  // over every sample
  double fastest = 0;
  uint64_t rng = 0x9E3779B97F4A7C15ull;  // the reservoir's (fixed: runs repeat)
  int64_t launches_per_sample = 1;
  bool rss_reset = false;  // whether the peak resident set was reset
  // Peaks of tensor memory and of the resident set over the measured steps
  // (-1: unknown), read as they end: what the workload does after them (a
  // data-parallel train_step's steps without averaging, for
  // comm_exposed_ms, which hold a second copy of the gradients) is not theirs.
  int64_t peak_mem = -1;
  int64_t peak_rss = -1;
  // Energy the device's counter saw over the measured steps, or -1: no
  // counter (energy_note says why), or a measurement too short or too long
  // for it.
  double joules = -1;
  std::string energy_note;
  std::string energy_source;  // the counter's EnergyMeter::Source()

  double TotalSeconds() const;
};

// A sample lasts at least this long on a device whose steps are launched
// asynchronously: shorter, and the clock's own marks and the host's launch
// latency are what gets timed.
constexpr double kMinSampleSeconds = 1e-3;
constexpr int64_t kMaxLaunchesPerSample = 1000;

// Steps per sample for a step of `step_seconds` (its warm-up median): 1
// where the device runs steps synchronously (the host) or when they are
// not to be batched, else enough for kMinSampleSeconds.
int64_t LaunchesPerSample(double step_seconds, bool asynchronous);

// `launches` per sample, evened out so that `iterations` steps (Google
// Benchmark's count) take as few extra steps as possible.
int64_t EvenLaunches(int64_t launches, int64_t iterations);

// Runs the steps Google Benchmark asks for, `launches` of them per sample
// (Google Benchmark counts each step as an iteration). Returns why it
// stopped early (a signal, a time limit) or nullopt; exceptions from the
// workload pass.
std::optional<std::string> RunTimedSteps(benchmark::State& state, Workload& workload,
                                         const BenchSpec& spec, int64_t launches,
                                         Measured* out);

}  // namespace ltb
