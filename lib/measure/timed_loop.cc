#include "measure/timed_loop.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/interrupt.h"
#include "device/device.h"
#include "device/timer.h"
#include "measure/memory.h"

namespace ltb {

std::optional<std::string> RunTimedSteps(benchmark::State& state, Workload& workload,
                                         const BenchSpec& spec, Measured* out) {
  StepTimer timer(spec.device, spec.sync);
  out->steps.reserve(static_cast<size_t>(std::max<int64_t>(state.max_iterations, 0)));
  BackendOf(spec.device).ResetPeakMemory(spec.device);
  out->rss_reset = ResetPeakRss();
  workload.ResetStats();
  workload.BeginMeasurement();
  for (auto _ : state) {
    timer.Start();
    workload.Step();
    const double seconds = timer.Stop();
    out->steps.push_back(seconds);
    state.SetIterationTime(seconds);
    if (StopRequested()) {
      workload.EndMeasurement();
      return absl::StrCat(StopReason(), " after ", out->steps.size(), " measured steps");
    }
  }
  if (!spec.sync) Synchronize(spec.device);
  workload.EndMeasurement();
  return std::nullopt;
}

}  // namespace ltb
