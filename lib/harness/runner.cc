#include "harness/runner.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "harness/device.h"
#include "harness/distributed.h"
#include "harness/epoch.h"
#include "harness/interrupt.h"
#include "harness/model_file.h"
#include "harness/phases.h"
#include "harness/profiling.h"
#include "harness/timer.h"

namespace ltb {
namespace {

// Thrown when a stop is requested before the timed steps.
class Stopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Google Benchmark calls a benchmark function several times while it
// settles on an iteration count; the built, warmed-up workload is kept
// across those calls and dropped when another benchmark starts.
struct Cached {
  std::string name;
  c10::Device device = c10::Device(c10::kCPU);
  std::unique_ptr<Workload> workload;
  double gpu_busy = -1;  // from --profile, on CUDA
  // rel_err or token_match_% against fp32, for reduced-precision inference.
  std::vector<std::pair<std::string, double>> accuracy;
};
Cached& Cache() {
  static Cached* cache = new Cached;
  return *cache;
}

// How far a reduced-precision result is from fp32's: for token ids, the
// share of tokens equal to the fp32 run's (token_match_%); for values, the
// largest absolute difference over the largest absolute fp32 value (rel_err).
std::pair<std::string, double> Drift(const at::Tensor& out, const at::Tensor& ref) {
  if (at::isFloatingType(ref.scalar_type())) return {"rel_err", RelativeError(out, ref)};
  const at::Tensor a = out.to(c10::kCPU), b = ref.to(c10::kCPU);
  TORCH_CHECK(a.sizes() == b.sizes(), "tokens of shape ", a.sizes(), " and ", b.sizes());
  return {"token_match_%", a.eq(b).to(c10::kDouble).mean().item<double>() * 100};
}

// Runs the benchmark's model once in fp32, with the same seed (so the same
// weights and inputs), and measures how far `workload` drifts from it.
// Empty for fp32, training, or workloads without a single output.
std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec,
                                                     const RunOptions& options,
                                                     Workload& workload) {
  // Compiled models report their own drift, against the eager outputs.
  if (spec.training() || spec.dtype == c10::kFloat || !spec.backend.empty()) return {};
  const at::Tensor out = workload.Evaluate();
  if (!out.defined()) return {};
  BenchSpec fp32 = spec;
  fp32.dtype = c10::kFloat;
  try {
    at::manual_seed(options.seed);
    const at::Tensor ref = family.build(fp32)->Evaluate();
    return {Drift(out, ref)};
  } catch (const std::exception& e) {
    std::cerr << spec.Name()
              << ": no accuracy check, the fp32 reference failed: " << e.what() << "\n";
    return {};
  }
}

Workload& Prepare(const Family& family, const BenchSpec& spec,
                  const RunOptions& options) {
  Cached& cache = Cache();
  const std::string name = spec.Name();
  if (cache.workload && cache.name == name) return *cache.workload;
  ReleaseCachedWorkload();

  at::manual_seed(options.seed);
  // A compiled suite model runs from its file; anything else is the family's.
  std::unique_ptr<Workload> workload =
      spec.model_file.empty() ? family.build(spec) : BuildCompiledBenchmark(spec);
  StepTimer timer(spec.device, /*sync=*/true);
  double warm = 0;
  const bool epochs = spec.iterations == Iterations::kEpochs;
  const int warmup_steps = epochs ? options.warmup_epochs : options.warmup_steps;
  // Data-parallel ranks must take the same number of steps: count, not time.
  const bool lockstep = CurrentProcessGroup() != nullptr && spec.data_parallel;
  const double warmup_seconds = epochs || lockstep ? 0 : options.warmup_seconds;
  for (int i = 0; i < warmup_steps || warm < warmup_seconds; ++i) {
    if (StopRequested()) throw Stopped("during warm-up");
    timer.Start();
    workload->Step();
    warm += timer.Stop();
  }
  cache.accuracy = Accuracy(family, spec, options, *workload);
  if (!options.profile_dir.empty()) {
    absl::StatusOr<ProfileResult> profile =
        ProfileSteps(*workload, spec, options.profile_steps, options.profile_dir);
    if (!profile.ok()) throw std::runtime_error(std::string(profile.status().message()));
    if (profile->trace_path.empty()) {
      std::cerr << "profile: " << profile->table_path
                << " (no trace: " << profile->no_trace << ")\n";
    } else {
      std::cerr << "profile: " << profile->trace_path << ", " << profile->table_path
                << "\n";
    }
    cache.gpu_busy = profile->gpu_busy;
  }
  cache.name = name;
  cache.device = spec.device;
  cache.workload = std::move(workload);
  return *cache.workload;
}

void Fail(benchmark::State& state, const std::string& message) {
  ReleaseCachedWorkload();
  state.SkipWithError(message.c_str());
}

// A failure inside a data-parallel benchmark leaves the other ranks waiting
// in a collective: nothing can continue. The failure is recorded, the rest
// of the run is skipped, the results so far are written, and bench exits 1.
void FailRun(benchmark::State& state, const BenchSpec& spec, const std::string& message) {
  if (CurrentProcessGroup() != nullptr && spec.data_parallel) {
    std::cerr << "bench: rank " << CurrentProcessGroup()->rank() << ": " << spec.Name()
              << ": " << message
              << "\nbench: stopping after writing the results so far, since the other "
                 "ranks cannot go on without this one\n";
    RequestStop(
        1, absl::StrCat("not run: data-parallel rank ", CurrentProcessGroup()->rank(),
                        " failed in ", spec.Name()));
  }
  Fail(state, message);
}

}  // namespace

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

void ReleaseCachedWorkload() {
  Cached& cache = Cache();
  if (!cache.workload) return;
  cache.workload.reset();
  cache.name.clear();
  cache.gpu_busy = -1;
  cache.accuracy.clear();
  Synchronize(cache.device);
  ReleaseCachedMemory(cache.device);
}

void RunBenchmark(benchmark::State& state, const Family& family, const BenchSpec& spec,
                  const RunOptions& options) {
  if (StopRequested()) return state.SkipWithError(kNotRunMessage);
  std::string why;
  if (!DeviceAvailable(spec.device, &why)) return Fail(state, why);
  if (!DtypeRuns(spec.device, spec.dtype, &why)) return Fail(state, why);
  absl::StatusOr<Plan> plan = family.PlanFor(spec);
  if (!plan.ok()) return Fail(state, std::string(plan.status().message()));
  plan->memory.host_build = plan->params * 4;
  // Packed linears keep a second copy of the weights in oneDNN's layout.
  if (spec.pack_cpu_linears) plan->memory.weights *= 2;
  if (DataParallel* group = CurrentProcessGroup();
      group && spec.data_parallel && spec.iterations == Iterations::kTimed) {
    // Throughput of a data-parallel step is every rank's.
    plan->tokens_per_step *= group->world_size();
    plan->samples_per_step *= group->world_size();
    plan->flops_per_step *= group->world_size();
  }
  if (Cache().name != spec.Name()) {
    // The memory guard looks at the device as the previous benchmark left it.
    ReleaseCachedWorkload();
    absl::Status fits = CheckFits(plan->memory, spec.device);
    if (DataParallel* group = CurrentProcessGroup(); group && spec.data_parallel) {
      // Every rank runs the benchmark or none does, or the others would wait
      // for collectives that never come.
      at::Tensor refused = at::full({1}, fits.ok() ? 0.0 : 1.0, at::kDouble);
      group->MaxInPlace(refused);
      if (fits.ok() && refused.item<double>() > 0) {
        fits = absl::ResourceExhaustedError(
            "does not fit on another rank (see its message)");
      }
    }
    if (!fits.ok()) return Fail(state, std::string(fits.message()));
  }

  std::vector<double> steps;  // each timed step's seconds
  bool rss = false;           // whether the peak resident set was reset
  try {
    Workload& workload = Prepare(family, spec, options);
    StepTimer timer(spec.device, spec.sync);
    steps.reserve(static_cast<size_t>(std::max<int64_t>(state.max_iterations, 0)));
    ResetPeak(spec.device);
    rss = ResetPeakRss();
    workload.ResetStats();
    workload.BeginMeasurement();
    for (auto _ : state) {
      timer.Start();
      workload.Step();
      const double seconds = timer.Stop();
      steps.push_back(seconds);
      state.SetIterationTime(seconds);
      if (StopRequested()) {
        workload.EndMeasurement();
        return Fail(state, absl::StrCat(StopReason(), " after ", steps.size(),
                                        " measured steps"));
      }
    }
    if (!spec.sync) Synchronize(spec.device);
    workload.EndMeasurement();
  } catch (const Stopped& e) {
    return Fail(state, absl::StrCat(StopReason(), " ", e.what()));
  } catch (const c10::OutOfMemoryError& e) {
    return FailRun(state, spec,
                   absl::StrCat("out of memory on ", DeviceName(spec.device),
                                " (estimate was ", FormatBytes(plan->memory.Total()),
                                "): ", e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    return FailRun(state, spec,
                   absl::StrCat("out of host memory (estimate was ",
                                FormatBytes(plan->memory.Total()), ")"));
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    if (absl::StrContains(what, "can't allocate memory")) {  // the CPU allocator's
      return FailRun(state, spec,
                     absl::StrCat("out of host memory (estimate was ",
                                  FormatBytes(plan->memory.Total()), "): ", what));
    }
    return FailRun(state, spec, absl::StrCat("LibTorch error: ", what));
  } catch (const std::exception& e) {
    return FailRun(state, spec, absl::StrCat("error: ", e.what()));
  }

  const double measured = std::accumulate(steps.begin(), steps.end(), 0.0);
  // A model file's FLOPs are known once it is built (LibTorch's profiler).
  if (plan->flops_per_step <= 0 && Cache().workload) {
    plan->flops_per_step = Cache().workload->FlopsPerStep();
  }
  using benchmark::Counter;
  auto& c = state.counters;
  if (plan->tokens_per_step > 0) {
    c["tokens/s"] = Counter(static_cast<double>(plan->tokens_per_step),
                            Counter::kIsIterationInvariantRate);
  }
  if (plan->samples_per_step > 0) {
    c["samples/s"] = Counter(static_cast<double>(plan->samples_per_step),
                             Counter::kIsIterationInvariantRate);
  }
  if (plan->flops_per_step > 0) {
    c["FLOP/s"] = Counter(plan->flops_per_step, Counter::kIsIterationInvariantRate);
  }
  if (plan->bytes_per_step > 0) {
    c["bytes/s"] = Counter(plan->bytes_per_step, Counter::kIsIterationInvariantRate);
  }
  if (plan->audio_seconds_per_step > 0) {
    c["audio_s/s"] =
        Counter(plan->audio_seconds_per_step, Counter::kIsIterationInvariantRate);
    if (state.iterations() > 0) {
      // Real-time factor: wall time per second of audio.
      c["rtf"] = measured / static_cast<double>(state.iterations()) /
                 plan->audio_seconds_per_step;
    }
  }
  if (Cache().workload) {
    for (const auto& [name, value] : Cache().workload->Counters()) c[name] = value;
  }
  for (const auto& [name, value] : Cache().accuracy) c[name] = value;
  for (const auto& [name, value] : StepSpread(steps)) c[name] = value;
  // Utilisation against the run's peaks: achieved FLOP/s over the matmul
  // peak of the dtype; bandwidth (decode's weight reads, an op's bytes)
  // over the device's peak bandwidth.
  const double steps_per_s =
      measured > 0 ? static_cast<double>(state.iterations()) / measured : 0;
  if (options.peaks != nullptr && steps_per_s > 0) {
    const Peak* flops = options.peaks->Flops(spec.device, spec.dtype);
    if (flops != nullptr && plan->flops_per_step > 0) {
      // Throughput counts every rank; the peak is one device's.
      const int devices = CurrentProcessGroup() && spec.data_parallel
                              ? CurrentProcessGroup()->world_size()
                              : 1;
      c["mfu"] = plan->flops_per_step * steps_per_s / flops->value / devices;
    }
    const Peak* bandwidth = options.peaks->Bandwidth(spec.device);
    if (bandwidth != nullptr && c.find("weight_GB/s") != c.end()) {
      c["mbu"] = c["weight_GB/s"].value * 1e9 / bandwidth->value;
    } else if (bandwidth != nullptr && plan->bytes_per_step > 0) {
      c["mbu"] = plan->bytes_per_step * steps_per_s / bandwidth->value;
    }
  }
  if (Cache().gpu_busy >= 0) c["gpu_busy_%"] = 100 * Cache().gpu_busy;
  if (plan->params > 0) c["params"] = Counter(static_cast<double>(plan->params));
  int64_t peak = PeakBytes(spec.device);
  if (peak >= 0 && Cache().workload) peak += Cache().workload->UntrackedBytes();
  if (DataParallel* group = CurrentProcessGroup();
      group != nullptr && spec.data_parallel) {
    at::Tensor t = at::full({1}, static_cast<double>(peak), at::kDouble);
    group->MaxInPlace(t);  // the largest rank's
    peak = static_cast<int64_t>(t.item<double>());
  }
  if (peak >= 0) {
    c["peak_mem"] =
        Counter(static_cast<double>(peak), Counter::kDefaults, Counter::kIs1024);
  }
  if (const int64_t peak_rss = rss ? PeakRssBytes() : -1; peak_rss >= 0) {
    c["peak_rss"] =
        Counter(static_cast<double>(peak_rss), Counter::kDefaults, Counter::kIs1024);
  }
}

}  // namespace ltb
