// GPU utilisation from NVML, loaded at run time: when the library (part of
// the NVIDIA driver) is absent, there is no sampler and no counter.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

namespace ltb {

// Samples nvmlDeviceGetUtilizationRates every `period_ms` while running.
class GpuUtilSampler {
 public:
  // nullptr when NVML or the device is not there.
  static std::unique_ptr<GpuUtilSampler> Create(int device_index, int period_ms = 100);
  ~GpuUtilSampler();

  void Start();
  void Stop();
  // Mean utilisation in percent over every sample since Reset(), or -1.
  double Mean() const;
  void Reset();

 private:
  GpuUtilSampler(void* device, int period_ms) : device_(device), period_ms_(period_ms) {}
  void Run();

  void* device_;
  int period_ms_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<double> sum_{0};
  std::atomic<long> samples_{0};
};

}  // namespace ltb
