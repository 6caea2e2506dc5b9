#include "device/telemetry.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

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
  return std::unique_ptr<EnergyMeter>(new GpuEnergyMeter(device, mj, pci_bus_id));
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

namespace {

std::optional<std::string> ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(line));
}

std::optional<double> ReadNumber(const std::string& path) {
  const std::optional<std::string> line = ReadLine(path);
  double value = 0;
  if (!line || !absl::SimpleAtod(*line, &value) || value < 0) return std::nullopt;
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EnergyMeter>> RaplMeter::Create(const std::string& root) {
  std::error_code error;
  if (!std::filesystem::is_directory(root, error)) {
    return absl::UnavailableError(
        absl::StrCat(root,
                     " does not exist: this kernel or machine (a virtual one, "
                     "usually) exposes no RAPL energy counters"));
  }
  static const std::regex kPackage("intel-rapl:[0-9]+");
  std::vector<Domain> domains;
  std::vector<std::string> unreadable;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, kPackage)) continue;
    Domain d;
    d.dir = entry.path().string();
    d.name = ReadLine(d.dir + "/name").value_or(name);
    const std::optional<double> now = ReadNumber(d.dir + "/energy_uj");
    const std::optional<double> range = ReadNumber(d.dir + "/max_energy_range_uj");
    if (!now || !range || *range <= 0) {
      unreadable.push_back(d.dir + "/energy_uj");
      continue;
    }
    d.last_uj = *now;
    d.range_uj = *range;
    domains.push_back(d);
  }
  if (!unreadable.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("RAPL's ", absl::StrJoin(unreadable, ", "),
                     " cannot be read (root only since Linux 5.10)"));
  }
  if (domains.empty()) {
    return absl::UnavailableError(
        absl::StrCat(root, " has no RAPL package domains (intel-rapl:N)"));
  }
  std::sort(domains.begin(), domains.end(),
            [](const Domain& a, const Domain& b) { return a.dir < b.dir; });
  return std::unique_ptr<EnergyMeter>(new RaplMeter(std::move(domains)));
}

double RaplMeter::Joules() {
  double total = 0;
  for (Domain& d : domains_) {
    const std::optional<double> now = ReadNumber(d.dir + "/energy_uj");
    if (!now) return -1;
    // The counter wraps at its range; readings come often enough that it
    // wraps at most once between two.
    d.total_uj += *now >= d.last_uj ? *now - d.last_uj : *now + d.range_uj - d.last_uj;
    d.last_uj = *now;
    total += d.total_uj;
  }
  return total * 1e-6;
}

double RaplMeter::MaxSeconds() const {
  double range = domains_.front().range_uj;
  for (const Domain& d : domains_) range = std::min(range, d.range_uj);
  return range * 1e-6 / 500;
}

std::string RaplMeter::Covers() const {
  std::vector<std::string> names;
  for (const Domain& d : domains_) names.push_back(d.name);
  return absl::StrCat("RAPL ", absl::StrJoin(names, " + "),
                      " (whole sockets: every process on them)");
}

}  // namespace ltb
