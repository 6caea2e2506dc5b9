// What devices report about themselves while they run: a GPU's utilisation
// and energy from NVML (loaded at run time: when the library, part of the
// NVIDIA driver, is absent, there is no sampler and no counter), and a
// CPU's energy from RAPL through Linux's powercap interface.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  std::string Source() const override { return "nvml " + pci_bus_id_; }

 private:
  GpuEnergyMeter(void* device, unsigned long long start_mj, std::string pci_bus_id)
      : device_(device), start_mj_(start_mj), pci_bus_id_(std::move(pci_bus_id)) {}
  void* device_;
  unsigned long long start_mj_;
  std::string pci_bus_id_;
};

// CPU energy from RAPL: the package domains' cumulative energy_uj counters
// (a whole socket, cores and uncore, whatever runs on it), where the kernel
// exposes them and they are readable.
class RaplMeter final : public EnergyMeter {
 public:
  // The package domains under `root` (/sys/class/powercap: intel-rapl:N,
  // which AMD's CPUs use too; not their sub-domains intel-rapl:N:M), or why
  // there are none or they cannot be read.
  static absl::StatusOr<std::unique_ptr<EnergyMeter>> Create(
      const std::string& root = "/sys/class/powercap");

  double Joules() override;
  double MinSeconds() const override { return 0.05; }  // updated each millisecond
  // The smallest domain's range at 500 W (AMD's 32-bit counters wrap at
  // 4.3 kJ, Intel's at 262 kJ).
  double MaxSeconds() const override;
  std::string Covers() const override;
  std::string Source() const override { return "rapl"; }  // every package

 private:
  struct Domain {
    std::string dir, name;
    double range_uj = 0;  // the counter wraps at max_energy_range_uj
    double last_uj = 0;
    double total_uj = 0;
  };
  explicit RaplMeter(std::vector<Domain> domains) : domains_(std::move(domains)) {}

  std::vector<Domain> domains_;
};

}  // namespace ltb
