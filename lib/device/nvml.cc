#include "device/nvml.h"

#include <dlfcn.h>

#include <chrono>

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
