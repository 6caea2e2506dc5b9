#include "harness/nvml.h"

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
  int (*handle_by_index)(unsigned int, void**) = nullptr;
  int (*utilization)(void*, Utilization*) = nullptr;
  bool ok = false;
};

const Nvml& Load() {
  static const Nvml nvml = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return n;
    n.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    n.handle_by_index = reinterpret_cast<int (*)(unsigned int, void**)>(
        dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    n.utilization = reinterpret_cast<int (*)(void*, Utilization*)>(
        dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    n.ok = n.init && n.handle_by_index && n.utilization && n.init() == 0;
    return n;
  }();
  return nvml;
}

}  // namespace

std::unique_ptr<GpuUtilSampler> GpuUtilSampler::Create(int device_index, int period_ms) {
  const Nvml& nvml = Load();
  void* device = nullptr;
  if (!nvml.ok ||
      nvml.handle_by_index(static_cast<unsigned>(device_index), &device) != 0) {
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
