#include "measure/counters.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/format.h"
#include "base/threads.h"
#include "device/device.h"
#include "distributed/distributed.h"
#include "measure/memory.h"
#include "measure/warmup.h"

namespace ltb {

std::vector<std::pair<std::string, double>> StepSpread(std::vector<double> seconds) {
  if (seconds.empty()) return {};
  std::sort(seconds.begin(), seconds.end());
  // Nearest rank: the smallest step time at or above p% of the steps.
  const auto percentile = [&](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p / 100 * seconds.size()));
    return seconds[std::max<size_t>(rank, 1) - 1] * 1e3;
  };
  double mean = 0;
  for (const double s : seconds) mean += s;
  mean /= seconds.size();
  std::vector<std::pair<std::string, double>> out = {{"step_p50_ms", percentile(50)},
                                                     {"step_p90_ms", percentile(90)},
                                                     {"step_p99_ms", percentile(99)}};
  // One step has no spread to measure: a 0 would read as a perfectly steady run.
  if (seconds.size() > 1 && mean > 0) {
    double var = 0;
    for (const double s : seconds) var += (s - mean) * (s - mean);
    out.emplace_back("step_cv_%", 100 * std::sqrt(var / (seconds.size() - 1)) / mean);
  }
  return out;
}

double JoulesOverRanks(const std::vector<double>& meters,
                       const std::vector<double>& joules) {
  double total = 0;
  for (size_t r = 0; r < joules.size(); ++r) {
    if (joules[r] < 0) return -1;
    const auto first = std::find(meters.begin(), meters.end(), meters[r]);
    if (first - meters.begin() == static_cast<std::ptrdiff_t>(r)) total += joules[r];
  }
  return total;
}

double MachineKey(const std::string& what) {
  std::string machine;
  if (std::ifstream in("/proc/sys/kernel/random/boot_id"); in) std::getline(in, machine);
  if (machine.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) machine = host;
  }
  const uint64_t hash = std::hash<std::string>{}(machine + "\n" + what);
  return static_cast<double>(hash & ((uint64_t{1} << 52) - 1));
}

std::string SharedCores(const std::vector<RankCores>& ranks) {
  std::vector<bool> seen(ranks.size(), false);
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (seen[r]) continue;
    int on_machine = 0, threads = 0;
    std::set<int> cores;
    for (size_t o = r; o < ranks.size(); ++o) {
      if (ranks[o].machine != ranks[r].machine) continue;
      seen[o] = true;
      ++on_machine;
      threads += std::min<int>(ranks[o].threads, ranks[o].cores.size());
      cores.insert(ranks[o].cores.begin(), ranks[o].cores.end());
    }
    if (on_machine > 1 && threads > static_cast<int>(cores.size())) {
      return absl::StrCat(
          on_machine, " data-parallel ranks on one machine run ", threads,
          " threads together on ", cores.size(),
          cores.size() == 1 ? " physical core" : " physical cores",
          ": they share cores, and one rank's peak times the ranks would count a shared "
          "core once per rank; give each rank cores of its own (OMP_NUM_THREADS, as "
          "tools/launch sets it, or --threads)");
    }
  }
  return "";
}

namespace {

// Every data-parallel rank's RankCores: a row each of its machine, threads
// and a flag for each physical core it may run on, summed over the ranks.
std::vector<RankCores> GatherRankCores(DataParallel& group) {
  constexpr int kCores = CPU_SETSIZE;  // ids are CPU numbers, below it
  const int ranks = group.world_size();
  at::Tensor t = at::zeros({ranks, 2 + kCores}, at::TensorOptions(at::kDouble));
  double* row = t.data_ptr<double>() + group.rank() * (2 + kCores);
  row[0] = MachineKey("cores");
  row[1] = IntraOpThreads();
  for (int core : PhysicalCoreIds("/sys/devices/system/cpu", AllowedCpus())) {
    if (core >= 0 && core < kCores) row[2 + core] = 1;
  }
  t = t.to(group.device());
  group.SumInPlace(t);
  t = t.cpu().contiguous();
  std::vector<RankCores> out(ranks);
  for (int r = 0; r < ranks; ++r) {
    const double* p = t.data_ptr<double>() + r * (2 + kCores);
    out[r].machine = p[0];
    out[r].threads = static_cast<int>(p[1]);
    for (int core = 0; core < kCores; ++core) {
      if (p[2 + core] > 0) out[r].cores.push_back(core);
    }
  }
  return out;
}

// The rates a plan reports, each with its amount per step (Google
// Benchmark divides by the time per step): the one rule SetCounters sets
// them by and PlannedCounterNames names them by.
std::vector<std::pair<std::string, double>> PlannedRates(const Plan& plan) {
  std::vector<std::pair<std::string, double>> out;
  if (plan.tokens_per_step > 0)
    out.emplace_back("tokens/s", static_cast<double>(plan.tokens_per_step));
  if (plan.samples_per_step > 0)
    out.emplace_back("samples/s", static_cast<double>(plan.samples_per_step));
  if (plan.flops_per_step > 0) out.emplace_back("FLOP/s", plan.flops_per_step);
  if (plan.bytes_per_step > 0) out.emplace_back("bytes/s", plan.bytes_per_step);
  if (plan.audio_seconds_per_step > 0)
    out.emplace_back("audio_s/s", plan.audio_seconds_per_step);
  return out;
}

// The label of a generation of one new token, which has no decode step to
// time or to bound by bandwidth.
constexpr char kNoDecodeStep[] =
    "tpot_ms, tg_tok/s, weight_GB/s, read_GB/s and mbu left out: --new_tokens=1 takes "
    "its one token from the prefill, and no decode step runs";

// Whether a plan's mbu is reported: decoding's reads (the weights, which
// its workload counts as read_GB/s or weight_GB/s), or a memory-bound op's
// bytes from the device's own memory.
bool ReportsMbu(const Plan& plan) {
  return plan.reports_weight_bandwidth ||
         (plan.MemoryBound() && !plan.bytes_cross_host_link);
}

}  // namespace

CounterNames PlannedCounterNames(const Plan& plan) {
  CounterNames n;
  Plan counted = plan;
  // A model file's FLOPs are counted once it is built: it will have some.
  if (counted.flops_per_step <= 0 && counted.counts_flops_when_built)
    counted.flops_per_step = 1;
  for (const auto& [name, per_step] : PlannedRates(counted)) {
    n.counters.push_back(name);
    if (name == "audio_s/s") n.counters.push_back("rtf");
  }
  if (plan.params > 0) n.counters.push_back("params");
  if (plan.weight_bytes > 0) n.counters.push_back("weight_bytes");
  for (const char* name : {"step_p50_ms", "step_p90_ms", "step_p99_ms"})
    n.counters.push_back(name);
  if (counted.flops_per_step > 0 && plan.mfu_left_out.empty())
    n.utilisation.push_back("mfu");
  if (ReportsMbu(plan)) n.utilisation.push_back("mbu");
  return n;
}

void SetCounters(benchmark::State& state, const BenchSpec& spec, Plan plan,
                 const RunOptions& options, const Measured& m, const Prepared& prepared) {
  const double measured = m.TotalSeconds();
  // A model file's FLOPs are known once it is built (LibTorch's profiler).
  if (plan.flops_per_step <= 0 && prepared.workload) {
    plan.flops_per_step = prepared.workload->FlopsPerStep();
  }
  using benchmark::Counter;
  auto& c = state.counters;
  for (const auto& [name, per_step] : PlannedRates(plan)) {
    c[name] = Counter(per_step, Counter::kIsIterationInvariantRate);
  }
  if (plan.audio_seconds_per_step > 0) {
    if (state.iterations() > 0) {
      // Real-time factor: wall time per second of audio.
      c["rtf"] = measured / static_cast<double>(state.iterations()) /
                 plan.audio_seconds_per_step;
    }
  }
  if (prepared.workload) {
    for (const auto& [name, value] : prepared.workload->Counters()) c[name] = value;
  }
  for (const auto& [name, value] : prepared.accuracy) c[name] = value;
  for (const auto& [name, value] : StepSpread(m.steps)) c[name] = value;
  // Utilisation against the run's peaks: achieved FLOP/s over the matmul
  // peak of the dtype; bandwidth (decode's weight reads, an op's bytes)
  // over the device's peak bandwidth.
  const double steps_per_s =
      measured > 0 ? static_cast<double>(state.iterations()) / measured : 0;
  // What is left out is said in the result's label: a utilisation, or the
  // accuracy check where one was due.
  std::vector<std::string> omitted;
  // Data-parallel ranks on the host's cores: whether they share them (a
  // collective, so every rank asks whatever its peaks).
  std::string shared_cores;
  if (DataParallel* group = CurrentProcessGroup();
      group != nullptr && spec.data_parallel && BackendOf(spec.device).Caps().host) {
    shared_cores = SharedCores(GatherRankCores(*group));
  }
  if (plan.counts_flops_when_built && plan.flops_per_step <= 0 && prepared.workload &&
      !prepared.workload->FlopsLeftOut().empty()) {
    omitted.push_back(prepared.workload->FlopsLeftOut());
  } else if (plan.counts_flops_when_built && plan.flops_per_step <= 0) {
    omitted.push_back(
        "FLOP/s and mfu left out: no matrix multiplication, convolution or attention "
        "was counted in a step (an AOTInductor package's FLOPs are not counted: it runs "
        "its own kernels); --flops_per_step gives them");
  }
  if (options.peaks != nullptr && steps_per_s > 0) {
    const double fastest = m.fastest;
    // Each utilisation comes with the peak it divides by (mfu_peak,
    // mbu_peak): a measured peak may have been raised by an earlier
    // benchmark, or by this one.
    const auto report = [&](const std::string& name, const Utilisation& u) {
      // Once a benchmark, not once each of Google Benchmark's rounds of
      // growing iterations (the label keeps the final round's words).
      static std::set<std::string>* const said = new std::set<std::string>;
      if (!u.note.empty() && said->insert(absl::StrCat(spec.Name(), " ", name)).second) {
        std::cerr << "bench: " << name << ": " << u.note << "\n";
      }
      if (u.value >= 0) {
        c[name] = u.value;
        c[name + "_peak"] = u.peak;
      } else if (!u.omitted.empty()) {
        std::string why = absl::StrCat(name, " left out: ", u.omitted);
        if (name == "mfu" && !plan.count_beyond_arithmetic.empty() &&
            options.peaks->Flops(spec.device, spec.dtype, spec.tf32) != nullptr) {
          absl::StrAppend(&why, "; ", plan.count_beyond_arithmetic);
        }
        omitted.push_back(std::move(why));
      }
    };
    if (plan.flops_per_step > 0 && !plan.mfu_left_out.empty()) {
      omitted.push_back(absl::StrCat("mfu left out: ", plan.mfu_left_out));
    } else if (plan.flops_per_step > 0 && !shared_cores.empty() &&
               options.peaks->Flops(spec.device, spec.dtype, spec.tf32) != nullptr) {
      omitted.push_back(absl::StrCat("mfu left out: ", shared_cores));
    } else if (plan.flops_per_step > 0) {
      // Throughput counts every rank; the peak is one device's.
      const int devices = CurrentProcessGroup() && spec.data_parallel
                              ? CurrentProcessGroup()->world_size()
                              : 1;
      const double per_device = plan.flops_per_step / devices;
      // A count that may exceed the arithmetic done (convolutions, causal
      // attention) never raises a measured peak.
      report("mfu", options.peaks->FlopsUtilisation(
                        spec.device, spec.dtype, spec.tf32, per_device * steps_per_s,
                        per_device / fastest, spec.Name(),
                        /*exact=*/plan.count_beyond_arithmetic.empty()));
      // The peak mfu divides the ranks' FLOP/s by: the ranks' devices',
      // so that FLOP/s / mfu_peak is mfu, as for one device.
      if (const auto it = c.find("mfu_peak"); it != c.end() && devices > 1) {
        it->second = it->second.value * devices;
      }
    }
    const bool reads = c.find("read_GB/s") != c.end() || c.find("weight_GB/s") != c.end();
    if (ReportsMbu(plan) && reads) {
      // Decoding's reads (the weights, and the cache up to each step's
      // position where the workload counts it), averaged over its decode steps.
      const double rate =
          (c.find("read_GB/s") != c.end() ? c["read_GB/s"] : c["weight_GB/s"]).value *
          1e9;
      // What a decode step reads, on average: the weights and its share of the cache.
      const double step_bytes =
          c.find("tpot_ms") != c.end() ? rate * c["tpot_ms"].value / 1e3 : 0;
      report("mbu", options.peaks->BandwidthUtilisation(spec.device, rate, rate,
                                                        step_bytes, spec.Name()));
    } else if (ReportsMbu(plan) && !plan.reports_weight_bandwidth) {
      report("mbu", options.peaks->BandwidthUtilisation(
                        spec.device, plan.bytes_per_step * steps_per_s,
                        plan.bytes_per_step / fastest, plan.bytes_per_step, spec.Name()));
    }
  }
  // Silence would read as a counter lost; a 0 or an infinity as a measurement.
  if (plan.reports_weight_bandwidth && spec.new_tokens == 1) {
    omitted.push_back(kNoDecodeStep);
  }
  if (!prepared.accuracy_absent.empty()) {
    omitted.push_back(prepared.accuracy_absent);
  }
  if (prepared.workload) {
    if (std::string caveat = prepared.workload->Caveat(); !caveat.empty()) {
      omitted.push_back(std::move(caveat));
    }
  }
  if (!omitted.empty()) state.SetLabel(ValidUtf8(absl::StrJoin(omitted, "; ")));
  // Energy per step, token and sample, summed over data-parallel ranks'
  // counters, each once.
  double joules = m.joules;
  if (DataParallel* group = CurrentProcessGroup();
      group != nullptr && spec.data_parallel) {
    const int ranks = group->world_size(), rank = group->rank();
    at::Tensor t = at::zeros({2, ranks}, at::TensorOptions(at::kDouble));
    t[0][rank] = m.energy_source.empty() ? 0.0 : MachineKey(m.energy_source);
    t[1][rank] = joules;
    t = t.to(group->device());
    group->SumInPlace(t);
    t = t.cpu().contiguous();
    const double* p = t.data_ptr<double>();
    joules = JoulesOverRanks(std::vector<double>(p, p + ranks),
                             std::vector<double>(p + ranks, p + 2 * ranks));
  }
  if (joules >= 0 && state.iterations() > 0) {
    const double per_step = joules / static_cast<double>(state.iterations());
    c["energy_J"] = per_step;
    if (plan.tokens_per_step > 0) c["J/token"] = per_step / plan.tokens_per_step;
    if (plan.samples_per_step > 0) c["J/sample"] = per_step / plan.samples_per_step;
  }
  // Where steps are launched asynchronously: how many were timed a sample.
  if (!BackendOf(spec.device).Caps().host) {
    c["launches_per_sample"] = static_cast<double>(m.launches_per_sample);
  }
  if (prepared.gpu_busy >= 0) c["gpu_busy_%"] = 100 * prepared.gpu_busy;
  if (plan.params > 0) c["params"] = Counter(static_cast<double>(plan.params));
  // Peaks of the measured steps: the largest rank's in data-parallel runs.
  int64_t peak = m.peak_mem, peak_rss = m.peak_rss;
  if (peak >= 0 && prepared.workload) peak += prepared.workload->UntrackedBytes();
  if (DataParallel* group = CurrentProcessGroup();
      group != nullptr && spec.data_parallel) {
    at::Tensor t = at::zeros({2}, at::TensorOptions(at::kDouble));
    t[0] = static_cast<double>(peak);
    t[1] = static_cast<double>(peak_rss);
    t = t.to(group->device());
    group->MaxInPlace(t);
    t = t.cpu();
    peak = static_cast<int64_t>(t[0].item<double>());
    peak_rss = static_cast<int64_t>(t[1].item<double>());
  }
  if (peak >= 0) {
    c["peak_mem"] =
        Counter(static_cast<double>(peak), Counter::kDefaults, Counter::kIs1024);
  }
  if (peak_rss >= 0) {
    c["peak_rss"] =
        Counter(static_cast<double>(peak_rss), Counter::kDefaults, Counter::kIs1024);
  }
}

}  // namespace ltb
