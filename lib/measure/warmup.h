// A benchmark's workload before its timed steps: built, warmed up (by step
// count and by time, with a wall-clock cap), checked against fp32 and
// profiled once, then kept across the calls Google Benchmark makes to one
// benchmark while it settles on an iteration count.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "family/family.h"
#include "measure/run_options.h"

namespace ltb {

// Thrown when a stop is requested during the warm-up.
class Stopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The workload of the benchmark being run, and what was learnt preparing it.
struct Prepared {
  std::string name;
  c10::Device device = HostDevice();
  std::unique_ptr<Workload> workload;
  double gpu_busy = -1;  // from --profile, where the backend profiles kernels
  // Steps queued back to back per timed sample (LaunchesPerSample of the
  // warm-up's median step).
  int64_t launches_per_sample = 1;
  // rel_err or token_match_% against fp32, for reduced-precision inference;
  // or why there is none where one was due (the label says it).
  std::vector<std::pair<std::string, double>> accuracy;
  std::string accuracy_absent;
};

// The workload kept across Google Benchmark's calls to one benchmark: one
// a run, owned by the Runner (runner.h) that runs its benchmarks.
class WorkloadCache {
 public:
  WorkloadCache() = default;
  WorkloadCache(const WorkloadCache&) = delete;
  WorkloadCache& operator=(const WorkloadCache&) = delete;

  // The kept workload (its `workload` null when there is none).
  const Prepared& current() const { return prepared_; }

  // Drops the kept workload and gives its memory back.
  void Release();

  // `spec`'s workload, built and warmed up unless it is the one kept; may
  // throw (c10::Error, Stopped, ...).
  Workload& Prepare(const Family& family, const BenchSpec& spec,
                    const RunOptions& options);

 private:
  Prepared prepared_;
};

}  // namespace ltb
