#include "harness/device.h"

#include <torch/cuda.h>

#include "harness/torch_compat.h"
#if LTB_HAS_MPS_API
#include <torch/mps.h>
#endif

#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>

#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "harness/cuda_support.h"
#include "harness/spec.h"

namespace ltb {
namespace {

constexpr char kDeviceForms[] = "cpu, cuda, cuda:N (N = 0, 1, ...) or mps";

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      std::pair<std::string, std::string> kv =
          absl::StrSplit(line, absl::MaxSplits(':', 1));
      return std::string(absl::StripAsciiWhitespace(kv.second));
    }
  }
  return "unknown CPU";
}

}  // namespace

absl::StatusOr<c10::Device> ParseDevice(const std::string& text) {
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text == "mps") return c10::Device(c10::kMPS);
  if (text == "cuda") return c10::Device(c10::kCUDA, 0);
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "cuda:")) {
    int index = -1;
    if (absl::SimpleAtoi(rest, &index) && index >= 0 && index < 64 &&
        absl::StrCat(index) == rest) {
      return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", text, "'; valid: ", kDeviceForms));
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

std::string DeviceName(const c10::Device& device) {
  switch (device.type()) {
    case c10::kCPU:
      return "cpu";
    case c10::kMPS:
      return "mps";
    case c10::kCUDA:
      return device.index() <= 0 ? "cuda" : absl::StrCat("cuda:", device.index());
    default:
      return device.str();
  }
}

bool DeviceAvailable(const c10::Device& device, std::string* why_not) {
  switch (device.type()) {
    case c10::kCPU:
      return true;
    case c10::kCUDA: {
      if (!cuda::Compiled()) {
        *why_not = "no CUDA device: this LibTorch was built without CUDA";
        return false;
      }
      std::string why;
      const int count = cuda::DeviceCount(&why);
      if (count == 0 || !torch::cuda::is_available()) {
        *why_not =
            absl::StrCat("no CUDA device: LibTorch has CUDA ", cuda::RuntimeVersion(),
                         " but no GPU or driver was found (", why, ")");
        return false;
      }
      const int index = device.has_index() ? device.index() : 0;
      if (index >= count) {
        *why_not = absl::StrCat("no device ", DeviceName(device), ": ", count,
                                " GPU(s) visible, cuda:0 to cuda:", count - 1);
        return false;
      }
      return true;
    }
    case c10::kMPS:
#if !LTB_HAS_MPS_API
      *why_not = "no MPS device: LibTorch " TORCH_VERSION
                 " has no C++ API to synchronise MPS (torch/mps.h, LibTorch 2.1)";
      return false;
#else
      if (!torch::mps::is_available()) {
        *why_not =
            "no MPS device: LibTorch reports MPS unavailable (MPS needs an "
            "Apple-silicon Mac and a LibTorch built for macOS)";
        return false;
      }
      return true;
#endif
    default:
      *why_not = absl::StrCat("unsupported device type ", device.str());
      return false;
  }
}

std::vector<c10::Device> AvailableDevices() {
  std::vector<c10::Device> devices = {c10::Device(c10::kCPU)};
  std::string why;
  if (cuda::Compiled() && torch::cuda::is_available()) {
    const int count = cuda::DeviceCount(&why);
    for (int i = 0; i < count; ++i) {
      devices.emplace_back(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
    }
  }
#if LTB_HAS_MPS_API
  if (torch::mps::is_available()) devices.emplace_back(c10::kMPS);
#endif
  return devices;
}

std::string DeviceSummary() {
  std::string out = absl::StrCat("cpu: ", CpuModelName(), ", ",
                                 std::thread::hardware_concurrency(), " logical cores\n");
  std::string why;
  if (DeviceAvailable(c10::Device(c10::kCUDA, 0), &why)) {
    const int count = cuda::DeviceCount(nullptr);
    for (int i = 0; i < count; ++i) {
      absl::StrAppend(&out, "cuda:", i, ": ", cuda::DeviceName(i), "\n");
    }
  } else {
    absl::StrAppend(&out, "cuda: ", why, "; CUDA benchmarks are not run\n");
  }
  if (DeviceAvailable(c10::Device(c10::kMPS), &why)) {
    absl::StrAppend(&out, "mps: available\n");
  } else {
    absl::StrAppend(&out, "mps: ", why, "\n");
  }
  return out;
}

void Synchronize(const c10::Device& device) {
  switch (device.type()) {
    case c10::kCUDA:
      torch::cuda::synchronize(device.has_index() ? device.index() : 0);
      break;
#if LTB_HAS_MPS_API
    case c10::kMPS:
      torch::mps::synchronize();
      break;
#endif
    default:
      break;
  }
}

std::string DeviceDisplayName(const c10::Device& device) {
  switch (device.type()) {
    case c10::kCPU:
      return CpuModelName();
    case c10::kCUDA:
      return cuda::DeviceName(device.has_index() ? device.index() : 0);
    case c10::kMPS:
      return "Apple MPS";
    default:
      return device.str();
  }
}

int64_t DeviceAvailableBytes(const c10::Device& device) {
  switch (device.type()) {
    case c10::kCPU: {
      std::ifstream in("/proc/meminfo");
      std::string key, unit;
      int64_t kib = 0;
      while (in >> key >> kib >> unit) {
        if (key == "MemAvailable:") return kib * 1024;
      }
      return -1;
    }
    case c10::kCUDA:
      return cuda::AvailableBytes(device.has_index() ? device.index() : 0);
    default:
      return -1;
  }
}

}  // namespace ltb
