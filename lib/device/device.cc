#include "device/device.h"

#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"

namespace ltb {

// Defined by each built-in backend's file.
std::unique_ptr<DeviceBackend> MakeCpuBackend();
std::unique_ptr<DeviceBackend> MakeCudaBackend();
std::unique_ptr<DeviceBackend> MakeMpsBackend();

namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<DeviceBackend>> built_in;
  std::vector<std::unique_ptr<DeviceBackend>> registered;  // tests'
};

Registry& GetRegistry() {
  static Registry* r = [] {
    auto* r = new Registry;
    r->built_in.push_back(MakeCpuBackend());
    r->built_in.push_back(MakeCudaBackend());
    r->built_in.push_back(MakeMpsBackend());
    return r;
  }();
  return *r;
}

class HostStepClock final : public StepClock {
 public:
  HostStepClock(const DeviceBackend& backend, const c10::Device& device, bool sync)
      : backend_(backend), device_(device), sync_(sync) {}
  void Clear() override { marks_.clear(); }
  void Mark() override {
    if (sync_) backend_.Synchronize(device_);
    marks_.push_back(std::chrono::steady_clock::now());
  }
  std::vector<double> Intervals() override {
    std::vector<double> out;
    for (size_t i = 1; i < marks_.size(); ++i) {
      out.push_back(std::chrono::duration<double>(marks_[i] - marks_[i - 1]).count());
    }
    return out;
  }

 private:
  const DeviceBackend& backend_;
  c10::Device device_;
  bool sync_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<StepClock> HostClock(const DeviceBackend& backend,
                                     const c10::Device& device, bool sync) {
  return std::make_unique<HostStepClock>(backend, device, sync);
}

std::unique_ptr<StepClock> DeviceBackend::MakeClock(const c10::Device& device,
                                                    bool sync) const {
  return HostClock(*this, device, sync);
}

std::unique_ptr<StepGraphs> DeviceBackend::MakeGraphs(const c10::Device& device) const {
  throw std::runtime_error(
      absl::StrCat(Name(device), " has no step graphs (--cuda_graphs is for CUDA)"));
}

std::vector<const DeviceBackend*> Backends() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const DeviceBackend*> out;
  for (const auto& b : r.built_in) out.push_back(b.get());
  for (const auto& b : r.registered) out.push_back(b.get());
  return out;
}

const DeviceBackend& BackendOf(const c10::Device& device) {
  std::vector<const DeviceBackend*> all = Backends();
  // A test's backend is asked first: it may claim a device of a built-in type.
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if ((*it)->Owns(device)) return **it;
  }
  TORCH_CHECK(false, "no backend for device ", device.str());
}

BackendRegistration::BackendRegistration(std::unique_ptr<DeviceBackend> backend)
    : backend_(backend.get()) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.registered.push_back(std::move(backend));
}

BackendRegistration::~BackendRegistration() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.registered.erase(std::remove_if(r.registered.begin(), r.registered.end(),
                                    [&](const auto& b) { return b.get() == backend_; }),
                     r.registered.end());
}

absl::StatusOr<c10::Device> ParseDevice(const std::string& text) {
  const std::vector<const DeviceBackend*> all = Backends();
  std::string forms;
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::optional<absl::StatusOr<c10::Device>> d = all[i]->Parse(text)) {
      if (d->ok()) return **d;
      break;
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    absl::StrAppend(&forms,
                    i == 0                ? ""
                    : i + 1 == all.size() ? " or "
                                          : ", ",
                    all[i]->Forms());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", text, "'; valid: ", forms));
}

std::string DeviceName(const c10::Device& device) {
  return BackendOf(device).Name(device);
}

bool DeviceAvailable(const c10::Device& device, std::string* why_not) {
  return BackendOf(device).Available(device, why_not);
}

bool DtypeRuns(const c10::Device& device, c10::ScalarType dtype, std::string* why_not) {
  static auto* answers =
      new std::map<std::pair<std::string, c10::ScalarType>, std::string>;
  static auto* mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  const auto key = std::make_pair(DeviceName(device), dtype);
  auto it = answers->find(key);
  if (it == answers->end()) {
    std::string why;
    try {
      const at::Tensor a =
          at::ones({2, 2}, at::TensorOptions().dtype(dtype).device(device));
      at::mm(a, a);
    } catch (const c10::Error& e) {
      why = absl::StrCat("this LibTorch (" TORCH_VERSION ") has no ", DtypeName(dtype),
                         " matrix multiply on ", DeviceName(device), ": ",
                         e.what_without_backtrace());
    }
    it = answers->emplace(key, why).first;
  }
  if (why_not != nullptr) *why_not = it->second;
  return it->second.empty();
}

std::vector<c10::Device> AvailableDevices() {
  std::vector<c10::Device> devices;
  for (const DeviceBackend* b : Backends()) {
    for (const c10::Device& d : b->Enumerate()) devices.push_back(d);
  }
  return devices;
}

std::string DeviceSummary() {
  std::string out;
  for (const DeviceBackend* b : Backends()) absl::StrAppend(&out, b->Summary());
  return out;
}

void Synchronize(const c10::Device& device) { BackendOf(device).Synchronize(device); }

int64_t DeviceAvailableBytes(const c10::Device& device) {
  return BackendOf(device).AvailableBytes(device);
}

c10::Device HostDevice() { return c10::Device(c10::kCPU); }

absl::Status CheckTf32Environment(bool tf32_runs) {
  // As LibTorch's c10::utils::check_env reads a flag: "1" alone is on.
  const char* cublas = std::getenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE");
  if (cublas != nullptr && std::string(cublas) == "1") {
    return absl::InvalidArgumentError(
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes every fp32 matmul on CUDA TF32, "
        "which fp32 names do not say: unset it, and give --tf32=true (or both) for "
        "TF32 runs named /tf32");
  }
  const char* nvidia = std::getenv("NVIDIA_TF32_OVERRIDE");
  if (tf32_runs && nvidia != nullptr && std::string(nvidia) == "0") {
    return absl::InvalidArgumentError(
        "NVIDIA_TF32_OVERRIDE=0 keeps cuBLAS and cuDNN from TF32, so the /tf32 runs "
        "--tf32 asks for would be plain fp32: unset it, or give --tf32=false");
  }
  return absl::OkStatus();
}

absl::Status CheckFpmathEnvironment() {
  for (const char* name : {"ONEDNN_DEFAULT_FPMATH_MODE", "DNNL_DEFAULT_FPMATH_MODE"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || value[0] == '\0' || absl::EqualsIgnoreCase(value, "strict")) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        name, "=", value,
        " lets oneDNN compute fp32 in a narrower type, which fp32 "
        "names do not say: unset it, and run --dtype=bf16 (or fp16) for what a "
        "narrower type does"));
  }
  return absl::OkStatus();
}

}  // namespace ltb
