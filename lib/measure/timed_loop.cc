#include "measure/timed_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/interrupt.h"
#include "device/device.h"
#include "device/timer.h"
#include "measure/memory.h"

namespace ltb {

void Measured::Add(double seconds_per_step) {
  fastest = samples == 0 ? seconds_per_step : std::min(fastest, seconds_per_step);
  sum += seconds_per_step;
  ++samples;
  if (steps.size() < kKeptSamples) {
    steps.push_back(seconds_per_step);
    return;
  }
  // Algorithm R: the n-th sample replaces a kept one with probability k/n.
  rng ^= rng << 13;  // xorshift64
  rng ^= rng >> 7;
  rng ^= rng << 17;
  const uint64_t slot = rng % static_cast<uint64_t>(samples);
  if (slot < kKeptSamples) steps[slot] = seconds_per_step;
}

double Measured::TotalSeconds() const {
  return sum * static_cast<double>(launches_per_sample);
}

int64_t LaunchesPerSample(double step_seconds, bool asynchronous) {
  if (!asynchronous || !(step_seconds > 0) || step_seconds >= kMinSampleSeconds) return 1;
  return std::min<int64_t>(
      kMaxLaunchesPerSample,
      static_cast<int64_t>(std::ceil(kMinSampleSeconds / step_seconds)));
}

int64_t EvenLaunches(int64_t launches, int64_t iterations) {
  if (launches <= 1 || iterations <= 1) return 1;
  launches = std::min(launches, iterations);
  const int64_t samples = (iterations + launches - 1) / launches;
  return (iterations + samples - 1) / samples;
}

namespace {

void ReadPeaks(const BenchSpec& spec, Measured* out) {
  out->peak_mem = BackendOf(spec.device).PeakMemory(spec.device);
  out->peak_rss = out->rss_reset ? PeakRssBytes() : -1;
}

}  // namespace

std::optional<std::string> RunTimedSteps(benchmark::State& state, Workload& workload,
                                         const BenchSpec& spec, int64_t launches,
                                         Measured* out) {
  StepTimer timer(spec.device, spec.sync);
  launches = EvenLaunches(launches, state.max_iterations);
  out->launches_per_sample = launches;
  out->steps.reserve(std::min<size_t>(
      Measured::kKeptSamples,
      static_cast<size_t>(std::max<int64_t>(state.max_iterations / launches + 1, 0))));
  BackendOf(spec.device).ResetPeakMemory(spec.device);
  out->rss_reset = ResetPeakRss();
  workload.ResetStats();
  workload.BeginMeasurement();
  absl::StatusOr<std::unique_ptr<EnergyMeter>> meter =
      BackendOf(spec.device).MakeEnergyMeter(spec.device);
  if (!meter.ok()) out->energy_note = std::string(meter.status().message());
  if (meter.ok()) out->energy_source = (*meter)->Source();
  const auto start = std::chrono::steady_clock::now();
  const double joules_before = meter.ok() ? (*meter)->Joules() : -1;
  // Google Benchmark counts `launches` iterations a sample and adds each
  // sample's time once: its time per iteration is the time per step.
  while (state.KeepRunningBatch(launches)) {
    timer.Start();
    for (int64_t i = 0; i < launches; ++i) workload.Step();
    const double seconds = timer.Stop();
    out->Add(seconds / static_cast<double>(launches));
    state.SetIterationTime(seconds);
    if (StopRequested()) {
      ReadPeaks(spec, out);
      workload.EndMeasurement();
      return absl::StrCat(StopReason(), " after ", out->samples * launches,
                          " measured steps");
    }
  }
  if (!spec.sync) Synchronize(spec.device);
  if (meter.ok()) {
    const double joules = (*meter)->Joules();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (joules_before < 0 || joules < 0) {
      out->energy_note = "the energy counter could not be read";
    } else if (seconds < (*meter)->MinSeconds()) {
      out->energy_note = absl::StrCat("the measured steps took ", seconds,
                                      " s, under the energy counter's resolution of ",
                                      (*meter)->MinSeconds(), " s");
    } else if (seconds > (*meter)->MaxSeconds()) {
      out->energy_note = absl::StrCat("the measured steps took ", seconds,
                                      " s, long enough for the energy counter to wrap");
    } else {
      out->joules = joules - joules_before;
    }
  }
  ReadPeaks(spec, out);
  workload.EndMeasurement();
  return std::nullopt;
}

}  // namespace ltb
