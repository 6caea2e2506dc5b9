#include "measure/runner.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/format.h"
#include "base/interrupt.h"
#include "device/device.h"
#include "distributed/distributed.h"
#include "measure/counters.h"
#include "measure/guard.h"
#include "measure/health.h"
#include "measure/memory.h"
#include "measure/timed_loop.h"
#include "measure/warmup.h"
#include "serve/serve.h"
#include "serve/text_serve.h"
#include "workloads/loader.h"

namespace ltb {

void Runner::Fail(benchmark::State& state, const std::string& message) {
  cache_.Release();
  state.SkipWithError(ValidUtf8(message).c_str());
}

// A failure inside a data-parallel benchmark leaves the other ranks waiting
// in a collective: nothing can continue. The failure is recorded, the rest
// of the run is skipped, the results so far are written, and bench exits 1.
void Runner::FailRun(benchmark::State& state, const BenchSpec& spec,
                     std::string message) {
  if (std::optional<std::string> note =
          CheckDeviceAfterFailure(spec.device, spec.Name())) {
    message += *note;
  }
  if (CurrentProcessGroup() != nullptr && spec.data_parallel) {
    std::cerr << "bench: rank " << CurrentProcessGroup()->rank() << ": " << spec.Name()
              << ": " << message
              << "\nbench: stopping after writing the results so far, since the other "
                 "ranks cannot go on without this one\n";
    RequestStop(
        1, absl::StrCat("not run: data-parallel rank ", CurrentProcessGroup()->rank(),
                        " failed in ", spec.Name()));
    // Rank 0 writes the results: where its failure is a collective's that
    // another rank left, that rank's reason is on its own stderr.
    if (CurrentProcessGroup()->world_size() > 1) {
      absl::StrAppend(&message,
                      " (in a data-parallel run: where another rank failed first, its "
                      "reason is on its stderr, and tools/launch names that rank)");
    }
  }
  Fail(state, message);
}

namespace {

// TF32 on the benchmark's device for its lifetime when its spec asks, and
// off (fp32 is fp32) after it, whatever happens in between.
class Tf32Scope {
 public:
  explicit Tf32Scope(const BenchSpec& spec) : backend_(BackendOf(spec.device)) {
    backend_.SetTf32(spec.tf32);
  }
  ~Tf32Scope() { backend_.SetTf32(false); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  const DeviceBackend& backend_;
};

// Whether the benchmark can run here at all, and what it will cost: its
// device, its dtype there, and the family's plan.
absl::StatusOr<Plan> PlanRun(const Family& family, const BenchSpec& spec) {
  std::string why;
  if (!DeviceAvailable(spec.device, &why)) return absl::UnavailableError(why);
  if (!DtypeRuns(spec.device, spec.dtype, &why)) return absl::UnimplementedError(why);
  // An epoch of no whole batch on a rank: said before anything is built,
  // the benchmark's error alone (built, it failed every rank in a
  // collective and stopped the run).
  if (spec.iterations == Iterations::kEpochs &&
      RankShare(spec.epochs.dataset_samples, spec.batch).count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset_samples=", spec.epochs.dataset_samples, " gives no whole batch of ",
        spec.batch, " per rank (", CurrentWorldSize(),
        CurrentWorldSize() == 1 ? " rank" : " ranks", ")"));
  }
  absl::StatusOr<Plan> plan = family.PlanFor(spec);
  if (!plan.ok()) return plan.status();
  // Unless the family says otherwise, the model is built as fp32 on the host.
  if (plan->memory.host_build == 0) plan->memory.host_build = plan->params * 4;
  // Packed linears keep a second copy of the weights in oneDNN's layout.
  if (spec.pack_cpu_linears) plan->memory.weights *= 2;
  if (DataParallel* group = CurrentProcessGroup();
      group && spec.data_parallel && spec.iterations == Iterations::kTimed) {
    // Throughput of a data-parallel step is every rank's.
    plan->tokens_per_step *= group->world_size();
    plan->samples_per_step *= group->world_size();
    plan->flops_per_step *= group->world_size();
  }
  return plan;
}

// serve: the benchmark of the phase it serves, at the batcher's largest batch,
// whose workload the batcher runs.
BenchSpec ServedSpec(const BenchSpec& spec) {
  if (!spec.serving()) return spec;
  BenchSpec served = spec;
  served.phase = spec.serve.phase;
  served.serve = ServeSettings{};  // no scenario: the plain phase
  // Served generation replays graphs of its own decode steps (BucketedSlots),
  // not the plain phase's: that phase is built and warmed up eagerly.
  served.graph = false;
  return served;
}

// serve: tokens a sample holds where the phase counts tokens; else 0.
double TokensPerSample(const Plan& plan, const BenchSpec& served) {
  const int64_t samples =
      plan.samples_per_step > 0 ? plan.samples_per_step : served.batch;
  if (plan.tokens_per_step <= 0 || samples <= 0) return 0;
  return static_cast<double>(plan.tokens_per_step) / static_cast<double>(samples);
}

}  // namespace

// The memory guard, once a benchmark (not at each of Google Benchmark's
// calls), on the device as the previous benchmark left it. The device is
// initialised first, guard or not: its memory cannot be read before (CUDA's
// caching allocator refuses), and nothing may have run on it yet, as on a
// data-parallel rank other than 0, which measures no peaks.
absl::Status Runner::Guard(const BenchSpec& spec, const Plan& plan, bool on) {
  if (cache_.current().name == spec.Name()) return absl::OkStatus();
  BackendOf(spec.device).Initialize(spec.device);
  cache_.Release();
  // What ran before without a workload to release (the peaks' measurement,
  // before the first benchmark) leaves its memory in malloc too: the guard's
  // figure and the peak resident set would count it.
  ReleaseCachedMemory(spec.device);
  if (!on) return absl::OkStatus();
  DataParallel* group = spec.data_parallel ? CurrentProcessGroup() : nullptr;
  return AgreeOnFit(CheckFits(plan.memory, spec.device, RanksOnThisHost(group)), group);
}

// Builds and warms up the workload, then runs the timed steps; every failure
// becomes the benchmark's error.
bool Runner::Measure(benchmark::State& state, const Family& family, const BenchSpec& spec,
                     const RunOptions& options, const Plan& plan, Measured* measured) {
  const std::string estimate = FormatBytes(plan.memory.Total());
  try {
    if (spec.serving()) {
      // One LoadGen test: its counters, or its error, are set on `state`.
      const BenchSpec served = ServedSpec(spec);
      // A family that builds its served workload apart: not the plain
      // phase's of the same name, before or after.
      Family serving = family;
      if (family.build_served) {
        serving.build = family.build_served;
        cache_.Release();
      }
      Workload& workload = cache_.Prepare(serving, served, options);
      if (SlotDecoder* slots = workload.Slots()) {  // generation: continuous batching
        if (absl::Status status = RunTextServe(state, *slots, spec); !status.ok()) {
          state.SkipWithError(ValidUtf8(std::string(status.message())).c_str());
          cache_.Release();
        }
        return false;
      }
      if (!RunServe(state, workload, spec, TokensPerSample(plan, served)).ok() ||
          family.build_served) {
        cache_.Release();
      }
      return false;
    }
    Workload& workload = cache_.Prepare(family, spec, options);
    if (std::optional<std::string> stopped = RunTimedSteps(
            state, workload, spec, cache_.current().launches_per_sample, measured)) {
      Fail(state, *stopped);
      return false;
    }
    return true;
  } catch (const Stopped& e) {
    Fail(state, absl::StrCat(StopReason(), " ", e.what()));
  } catch (const c10::OutOfMemoryError& e) {
    FailRun(state, spec,
            absl::StrCat("out of memory on ", DeviceName(spec.device), " (estimate was ",
                         estimate, "): ", e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    FailRun(state, spec,
            absl::StrCat("out of host memory (estimate was ", estimate, ")"));
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    if (absl::StrContains(what, "can't allocate memory")) {  // the CPU allocator's
      FailRun(state, spec,
              absl::StrCat("out of host memory (estimate was ", estimate, "): ", what));
    } else {
      FailRun(state, spec, absl::StrCat("LibTorch error: ", what));
    }
  } catch (const std::exception& e) {
    FailRun(state, spec, absl::StrCat("error: ", e.what()));
  }
  return false;
}

std::string Runner::LeftKey(const std::string& name) {
  return absl::StrCat("ltb/rank0_left/", name);
}

bool Runner::TakeTurn(benchmark::State& state, const BenchSpec& spec) {
  DataParallel* group = CurrentProcessGroup();
  if (group == nullptr || group->world_size() == 1) return true;
  const std::string name = spec.Name();
  if (group->rank() == 0) {
    // Google Benchmark calls a benchmark several times (growing iterations,
    // repetitions) before the next: a new name is the last one left.
    if (name != entered_) {
      if (!entered_.empty()) group->Post(LeftKey(entered_));
      entered_ = name;
    }
    return true;
  }
  if (spec.data_parallel) return true;
  // What the last benchmark left in memory is not kept beside rank 0's run.
  cache_.Release();
  try {
    while (!group->Posted(LeftKey(name))) {
      if (StopRequested()) {
        state.SkipWithError(kNotRunMessage);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception& e) {  // rank 0, which serves the store, is gone
    RequestStop(1, absl::StrCat("not run: rank 0 stopped answering (", e.what(), ")"));
    state.SkipWithError(kNotRunMessage);
    return false;
  }
  // Only rank 0 reports: this line is never shown.
  state.SkipWithError("not run here: rank 0 runs what is not data-parallel alone");
  return false;
}

void Runner::Finish() {
  DataParallel* group = CurrentProcessGroup();
  if (group == nullptr || group->world_size() == 1) return;
  if (group->rank() == 0 && !entered_.empty()) group->Post(LeftKey(entered_));
  group->Barrier();
}

void Runner::Run(benchmark::State& state, const Family& family, const BenchSpec& spec) {
  const RunOptions& options = options_;
  if (StopRequested()) return state.SkipWithError(kNotRunMessage);
  if (!TakeTurn(state, spec)) return;
  if (std::optional<std::string> why = WhyDeviceUnusable(spec.device)) {
    return Fail(state, absl::StrCat("not run: ", DeviceName(spec.device),
                                    " is unusable: ", *why));
  }
  if (spec.tf32) {
    if (const std::string gap =
            BackendOf(spec.device).ArithmeticGap(spec.device, c10::kFloat, true);
        !gap.empty()) {
      return Fail(state, absl::StrCat("not run: ", gap,
                                      ": a run named /tf32 would be plain fp32"));
    }
  }
  // serve plans and guards the phase it serves.
  const BenchSpec served = ServedSpec(spec);
  absl::StatusOr<Plan> plan = PlanRun(family, served);
  if (!plan.ok()) return Fail(state, std::string(plan.status().message()));
  try {
    if (absl::Status fits = Guard(served, *plan, options.memory_guard); !fits.ok()) {
      return Fail(state, std::string(fits.message()));
    }
  } catch (const std::exception& e) {  // a collective of the vote failed
    return FailRun(state, spec, absl::StrCat("memory guard: ", e.what()));
  }
  Measured measured;
  Tf32Scope tf32(spec);
  if (!Measure(state, family, spec, options, *plan, &measured)) return;
  try {  // data-parallel counters are all-reduced over the ranks
    SetCounters(state, spec, *std::move(plan), options, measured, cache_.current());
  } catch (const std::exception& e) {
    FailRun(state, spec, absl::StrCat("counters: ", e.what()));
  }
}

}  // namespace ltb
