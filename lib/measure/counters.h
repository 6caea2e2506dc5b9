// A benchmark's counters from its plan and its measured steps: throughput
// (tokens/s, samples/s, FLOP/s, bytes/s), utilisation against the run's
// peaks (mfu, mbu), the steps' spread, accuracy, and peak memory.
#pragma once

#include <benchmark/benchmark.h>

#include <string>
#include <utility>
#include <vector>

#include "family/family.h"
#include "measure/run_options.h"
#include "measure/timed_loop.h"
#include "measure/warmup.h"

namespace ltb {

// The spread of a benchmark's measured step times: step_p50_ms,
// step_p90_ms, step_p99_ms (nearest-rank percentiles) and, from two steps
// on, step_cv_% (sample standard deviation over the mean).
std::vector<std::pair<std::string, double>> StepSpread(std::vector<double> seconds);

// Energy of data-parallel ranks, each counter once: rank r read `joules[r]`
// (negative: no reading) from the counter `meters[r]` names (a number per
// machine and counter, MachineKey). Ranks that share a counter (a machine's
// RAPL packages, one GPU that two ranks use) each saw the same joules, which
// a plain sum would count once per rank; the lowest of them counts. -1 when
// a rank has no reading.
double JoulesOverRanks(const std::vector<double>& meters,
                       const std::vector<double>& joules);
// A number for `what` on this machine (an EnergyMeter::Source, its memory),
// the same in every process of the machine (its kernel's boot id, else its
// host name: containers on one kernel share both), exact in a double.
double MachineKey(const std::string& what);

// A data-parallel rank's threads and the physical cores it may run on
// (PhysicalCoreIds), on the machine `machine` names (MachineKey).
struct RankCores {
  double machine = 0;
  int threads = 0;
  std::vector<int> cores;
};
// Where the ranks of one machine run more threads together than the physical
// cores they may run on (each rank's threads counted up to its own cores):
// why their mfu is left out, for the first such machine; else empty. Such
// ranks share cores, and one rank's peak times the ranks would count a
// shared core once per rank.
std::string SharedCores(const std::vector<RankCores>& ranks);

// The counters SetCounters gives every benchmark of `plan` on the CPU,
// whatever its run: its rates, params and the step percentiles
// (`counters`), and the utilisations it reports where its device and dtype
// have a peak (`utilisation`: mfu, and mbu where a step works past the
// device's cache, which only the run knows). bench --list_families names them
// for each family's phases.
struct CounterNames {
  std::vector<std::string> counters;
  std::vector<std::string> utilisation;
};
CounterNames PlannedCounterNames(const Plan& plan);

// `prepared`: the benchmark's workload, as its warm-up left it.
void SetCounters(benchmark::State& state, const BenchSpec& spec, Plan plan,
                 const RunOptions& options, const Measured& measured,
                 const Prepared& prepared);

}  // namespace ltb
