// GPU utilisation from NVML, loaded at run time: when the library (part of
// the NVIDIA driver) is absent, there is no sampler and no counter.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "device/backend.h"

namespace ltb {

// Samples nvmlDeviceGetUtilizationRates every `period_ms` while running.
class GpuUtilSampler final : public UtilSampler {
 public:
  // The GPU with this PCI bus id (cuda::PciBusId): NVML numbers GPUs in its
  // own order, ignoring CUDA_VISIBLE_DEVICES, so a CUDA ordinal could name
  // another GPU. nullptr when NVML or the device is not there.
  static std::unique_ptr<GpuUtilSampler> Create(const std::string& pci_bus_id,
                                                int period_ms = 100);
  ~GpuUtilSampler() override;

  void Start() override;
  void Stop() override;
  // Mean utilisation in percent over every sample since Reset(), or -1.
  double Mean() const override;
  long Samples() const override { return samples_.load(); }
  void Reset() override;

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

// The GPU's total energy since the driver loaded
// (nvmlDeviceGetTotalEnergyConsumption, millijoules, Volta and later).
class GpuEnergyMeter final : public EnergyMeter {
 public:
  // The GPU with this PCI bus id, or why there is no counter.
  static absl::StatusOr<std::unique_ptr<EnergyMeter>> Create(
      const std::string& pci_bus_id);

  double Joules() override;
  // NVML refreshes the counter every few tens of milliseconds.
  double MinSeconds() const override { return 0.5; }
  double MaxSeconds() const override { return 1e12; }  // 64 bits of millijoules
  std::string Covers() const override { return "NVML total energy (the whole board)"; }

 private:
  GpuEnergyMeter(void* device, unsigned long long start_mj)
      : device_(device), start_mj_(start_mj) {}
  void* device_;
  unsigned long long start_mj_;
};

}  // namespace ltb
