// Times one benchmark step. With sync on, the device finishes its queued
// work before the clock is read (CUDA events on a GPU); with sync off, the
// clock is read as soon as the host has queued the work, which is the
// mistake --sync=false exists to demonstrate.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <memory>

#include "harness/cuda_support.h"

namespace ltb {

class StepTimer {
 public:
  StepTimer(const c10::Device& device, bool sync);
  ~StepTimer();

  void Start();
  // Seconds since Start().
  double Stop();

 private:
  c10::Device device_;
  bool sync_;
  std::unique_ptr<cuda::EventTimer> events_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ltb
