// Times benchmark steps with the clock of the device's backend. With sync
// on, the device finishes its queued work before a time is read (CUDA
// events on a GPU); with sync off, the clock is read as soon as the host has
// queued the work, which is the mistake --sync=false exists to demonstrate.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <vector>

#include "device/backend.h"

namespace ltb {

// A sequence of time marks on one device; Intervals() gives the seconds
// between consecutive marks. On a GPU the marks are CUDA events, so marking
// inside a loop of kernels does not stall the host.
class Timeline {
 public:
  Timeline(const c10::Device& device, bool sync)
      : clock_(BackendOf(device).MakeClock(device, sync)) {}

  void Clear() { clock_->Clear(); }
  void Mark() { clock_->Mark(); }
  std::vector<double> Intervals() { return clock_->Intervals(); }

 private:
  std::unique_ptr<StepClock> clock_;
};

// Times one step: Start(), the work, Stop() returns its seconds.
class StepTimer {
 public:
  StepTimer(const c10::Device& device, bool sync) : timeline_(device, sync) {}
  void Start() {
    timeline_.Clear();
    timeline_.Mark();
  }
  double Stop() {
    timeline_.Mark();
    return timeline_.Intervals().front();
  }

 private:
  Timeline timeline_;
};

}  // namespace ltb
