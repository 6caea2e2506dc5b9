#include "measure/warmup.h"

#include <ATen/Context.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/interrupt.h"
#include "device/device.h"
#include "device/timer.h"
#include "distributed/distributed.h"
#include "measure/accuracy.h"
#include "measure/health.h"
#include "measure/memory.h"
#include "measure/profiling.h"
#include "measure/timed_loop.h"
#include "workloads/model_file.h"
#include "workloads/phases.h"

namespace ltb {

void WorkloadCache::Release() {
  Prepared& p = prepared_;
  if (!p.workload) return;
  const std::string name = p.name;
  p.workload.reset();
  p.name.clear();
  p.gpu_busy = -1;
  p.launches_per_sample = 1;
  p.accuracy.clear();
  p.accuracy_absent.clear();
  // After a fault the device's synchronisation throws: the device is
  // marked unusable, and the run goes on with the others.
  try {
    Synchronize(p.device);
    ReleaseCachedMemory(p.device);
  } catch (const std::exception& e) {
    MarkDeviceUnusable(p.device,
                       absl::StrCat("releasing ", name, " failed (", ErrorText(e),
                                    "), so it is left unusable for the rest "
                                    "of this run"));
  }
}

Workload& WorkloadCache::Prepare(const Family& family, const BenchSpec& spec,
                                 const RunOptions& options) {
  Prepared& p = prepared_;
  const std::string name = spec.Name();
  if (p.workload && p.name == name) return *p.workload;
  Release();

  at::manual_seed(options.seed);
  // A compiled suite model runs from its file; anything else is the family's.
  std::unique_ptr<Workload> workload =
      spec.model_file.empty() ? family.build(spec) : BuildCompiledBenchmark(spec);
  if (spec.graph) workload = GraphedSteps(std::move(workload), spec.device);
  StepTimer timer(spec.device, /*sync=*/true);
  double warm = 0;
  const bool epochs = spec.iterations == Iterations::kEpochs;
  const int warmup_steps = epochs ? options.warmup_epochs : options.warmup_steps;
  // Data-parallel ranks must take the same number of steps: count, not time.
  const bool lockstep = CurrentProcessGroup() != nullptr && spec.data_parallel;
  const double warmup_seconds = epochs || lockstep ? 0 : options.warmup_seconds;
  // Warm-up by time counts the steps' measured time, and stops as well when
  // twice as much wall time has passed: steps measured in microseconds on a
  // GPU spend most of their wall time launching.
  const auto start = std::chrono::steady_clock::now();
  const auto wall = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  std::vector<double> steps;
  for (int i = 0;
       i < warmup_steps || (warm < warmup_seconds && wall() < 2 * warmup_seconds); ++i) {
    if (StopRequested()) throw Stopped("during warm-up");
    timer.Start();
    workload->Step();
    steps.push_back(timer.Stop());
    warm += steps.back();
  }
  // Sub-millisecond steps on an asynchronous device are timed several to a
  // sample; the first warm-up step (lazy initialisation) does not count.
  // Data-parallel ranks keep one step a sample, all in lockstep.
  double median = 0;
  if (!steps.empty()) {
    if (steps.size() > 1) steps.erase(steps.begin());
    std::nth_element(steps.begin(), steps.begin() + steps.size() / 2, steps.end());
    median = steps[steps.size() / 2];
  }
  const int64_t launches = LaunchesPerSample(
      median, !BackendOf(spec.device).Caps().host && spec.sync && !epochs && !lockstep);
  at::Tensor text;
  if (!options.eval_tokens.empty() && !spec.training()) {
    // Checked when the flags were read; read again for each benchmark, as
    // cheap as a small file is, so that nothing of a run is global.
    absl::StatusOr<at::Tensor> tokens = ReadEvalTokens(options.eval_tokens);
    if (!tokens.ok()) throw std::runtime_error(std::string(tokens.status().message()));
    text = *std::move(tokens);
  }
  p.accuracy = Accuracy(family, spec, options.seed, *workload, text, &p.accuracy_absent);
  if (options.print_tokens && spec.phase == kGenerate) {
    const auto print = [&](const char* what, const at::Tensor& ids) {
      const at::Tensor all = ids.to(HostDevice()).to(at::kLong);
      for (int64_t row = 0; row < all.size(0); ++row) {
        const at::Tensor r = all[row].contiguous();
        const int64_t* p = r.data_ptr<int64_t>();
        std::cerr << name << " " << what << "[" << row
                  << "]: " << absl::StrJoin(p, p + r.numel(), " ") << "\n";
      }
    };
    if (const at::Tensor prompt = workload->Prompt(); prompt.defined()) {
      print("prompt", prompt);
    }
    print("tokens", workload->Evaluate());
  }
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
    p.gpu_busy = profile->gpu_busy;
  }
  p.name = name;
  p.device = spec.device;
  p.launches_per_sample = launches;
  p.workload = std::move(workload);
  return *p.workload;
}

}  // namespace ltb
