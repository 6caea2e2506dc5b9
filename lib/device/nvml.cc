#include "device/nvml.h"

#include <dlfcn.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace ltb {
namespace {

// The few NVML entry points used, with their C signatures.
struct Utilization {
  unsigned int gpu, memory;
};
struct Nvml {
  int (*init)() = nullptr;
  int (*handle_by_bus_id)(const char*, void**) = nullptr;
  int (*utilization)(void*, Utilization*) = nullptr;
  int (*total_energy)(void*, unsigned long long*) = nullptr;  // optional
  bool ok = false;
};

const Nvml& Load() {
  static const Nvml nvml = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return n;
    n.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    n.handle_by_bus_id = reinterpret_cast<int (*)(const char*, void**)>(
        dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.utilization = reinterpret_cast<int (*)(void*, Utilization*)>(
        dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    n.total_energy = reinterpret_cast<int (*)(void*, unsigned long long*)>(
        dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
    n.ok = n.init && n.handle_by_bus_id && n.utilization && n.init() == 0;
    return n;
  }();
  return nvml;
}

}  // namespace

std::unique_ptr<GpuUtilSampler> GpuUtilSampler::Create(const std::string& pci_bus_id,
                                                       int period_ms) {
  if (pci_bus_id.empty()) return nullptr;
  const Nvml& nvml = Load();
  void* device = nullptr;
  if (!nvml.ok || nvml.handle_by_bus_id(pci_bus_id.c_str(), &device) != 0) {
    return nullptr;
  }
  return std::unique_ptr<GpuUtilSampler>(new GpuUtilSampler(device, period_ms));
}

absl::StatusOr<std::unique_ptr<EnergyMeter>> GpuEnergyMeter::Create(
    const std::string& pci_bus_id) {
  const Nvml& nvml = Load();
  if (!nvml.ok) {
    return absl::UnavailableError("NVML (libnvidia-ml.so.1, the driver's) is not there");
  }
  void* device = nullptr;
  if (pci_bus_id.empty() || nvml.handle_by_bus_id(pci_bus_id.c_str(), &device) != 0) {
    return absl::UnavailableError(
        absl::StrCat("NVML does not know the GPU at PCI bus id '", pci_bus_id, "'"));
  }
  unsigned long long mj = 0;
  if (nvml.total_energy == nullptr || nvml.total_energy(device, &mj) != 0) {
    return absl::UnimplementedError(
        "this GPU or driver has no total energy counter (Volta and later do)");
  }
  return std::unique_ptr<EnergyMeter>(new GpuEnergyMeter(device, mj));
}

double GpuEnergyMeter::Joules() {
  unsigned long long mj = 0;
  if (Load().total_energy(device_, &mj) != 0 || mj < start_mj_) return -1;
  return static_cast<double>(mj - start_mj_) * 1e-3;
}

GpuUtilSampler::~GpuUtilSampler() { Stop(); }

void GpuUtilSampler::Start() {
  if (running_.exchange(true)) return;
  thread_ = std::thread([this] { Run(); });
}

void GpuUtilSampler::Stop() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
}

void GpuUtilSampler::Run() {
  while (running_) {
    Utilization u{};
    if (Load().utilization(device_, &u) == 0) {
      sum_ = sum_ + u.gpu;
      ++samples_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
  }
}

double GpuUtilSampler::Mean() const { return samples_ > 0 ? sum_ / samples_ : -1; }

void GpuUtilSampler::Reset() {
  sum_ = 0;
  samples_ = 0;
}

}  // namespace ltb
