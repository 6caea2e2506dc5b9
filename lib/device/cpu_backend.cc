// The CPU: always there; measured by the host clock; tensor memory counted
// by a tracking allocator installed into LibTorch (cpu_memory.h); Gloo
// collectives; peaks measured by the arithmetic loop and the GEMM paths.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "device/backend.h"
#include "device/cpu_memory.h"
#include "device/telemetry.h"

namespace ltb {

namespace {

// Wraps LibTorch's default CPU allocator and counts the bytes of every live
// allocation. Each block carries its size in a header in front of the data,
// so the DataPtr stays "simple" (data == context, one raw deleter): parts of
// LibTorch (oneDNN's bf16 paths among them) use raw_allocate and need that.
class TrackingCpuAllocator final : public c10::Allocator {
 public:
  // Keeps the 64-byte alignment of the underlying allocator.
  static constexpr size_t kHeader = 64;

  explicit TrackingCpuAllocator(c10::Allocator* base) : base_(base) { instance_ = this; }

  // LibTorch 2.x declares allocate() non-const, 1.13 const. Both are
  // declared here, so whichever the base class has is overridden.
  c10::DataPtr allocate(size_t n) const {
    char* block = static_cast<char*>(base_->raw_allocate(n + kHeader));
    *reinterpret_cast<size_t*>(block) = n;
    Add(static_cast<int64_t>(n));
    void* data = block + kHeader;
    return {data, data, &Delete, c10::Device(c10::kCPU)};
  }
  c10::DataPtr allocate(size_t n) {
    return static_cast<const TrackingCpuAllocator*>(this)->allocate(n);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  // Pure virtual in LibTorch 2.x, absent from 1.13.
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count != 0) std::memcpy(dest, src, count);
  }

  int64_t current() const { return current_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  void ResetPeak() { peak_.store(current(), std::memory_order_relaxed); }

 private:
  static void Delete(void* data) {
    if (data == nullptr) return;
    char* block = static_cast<char*>(data) - kHeader;
    instance_->Add(-static_cast<int64_t>(*reinterpret_cast<size_t*>(block)));
    instance_->base_->raw_deallocate(block);
  }

  void Add(int64_t delta) const {
    const int64_t now = current_.fetch_add(delta, std::memory_order_relaxed) + delta;
    int64_t old = peak_.load(std::memory_order_relaxed);
    while (now > old &&
           !peak_.compare_exchange_weak(old, now, std::memory_order_relaxed)) {
    }
  }

  static TrackingCpuAllocator* instance_;
  c10::Allocator* base_;
  mutable std::atomic<int64_t> current_{0};
  mutable std::atomic<int64_t> peak_{0};
};

TrackingCpuAllocator* TrackingCpuAllocator::instance_ = nullptr;

TrackingCpuAllocator* g_tracker = nullptr;

}  // namespace

void InstallCpuTracking() {
  if (g_tracker != nullptr) return;
  // Never freed: tensors may outlive main() and still call its deleter.
  g_tracker = new TrackingCpuAllocator(c10::GetDefaultCPUAllocator());
  c10::SetAllocator(c10::kCPU, g_tracker, /*priority=*/100);
}

bool CpuTrackingInstalled() {
  return g_tracker != nullptr && c10::GetAllocator(c10::kCPU) == g_tracker;
}

int64_t CpuAllocatedBytes() { return g_tracker ? g_tracker->current() : -1; }
int64_t CpuPeakBytes() { return g_tracker ? g_tracker->peak() : -1; }
void ResetCpuPeak() {
  if (g_tracker) g_tracker->ResetPeak();
}

namespace {

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

class CpuBackend final : public DeviceBackend {
 public:
  bool Owns(const c10::Device& device) const override {
    return device.type() == c10::kCPU;
  }
  std::optional<absl::StatusOr<c10::Device>> Parse(
      const std::string& text) const override {
    if (text == "cpu") return absl::StatusOr<c10::Device>(c10::Device(c10::kCPU));
    return std::nullopt;
  }
  std::string Forms() const override { return "cpu"; }
  std::string Name(const c10::Device&) const override { return "cpu"; }
  std::string DisplayName(const c10::Device&) const override { return CpuModelName(); }
  bool Available(const c10::Device&, std::string*) const override { return true; }
  std::vector<c10::Device> Enumerate() const override { return {c10::Device(c10::kCPU)}; }
  std::string Summary() const override {
    return absl::StrCat("cpu: ", CpuModelName(), ", ",
                        std::thread::hardware_concurrency(), " logical cores\n");
  }
  std::vector<std::pair<std::string, std::string>> Context() const override {
    absl::StatusOr<std::unique_ptr<EnergyMeter>> meter = RaplMeter::Create();
    return {
        {"cpu_model", CpuModelName()},
        {"cpu_energy", meter.ok()
                           ? (*meter)->Covers()
                           : absl::StrCat("none (", meter.status().message(), ")")},
        {"cpu_logical_cores", absl::StrCat(std::thread::hardware_concurrency())},
        {"cpu_tensor_allocator",
         CpuTrackingInstalled() ? "LibTorch default CPU allocator, wrapped to count bytes"
                                : "LibTorch default CPU allocator"}};
  }
  absl::StatusOr<std::unique_ptr<EnergyMeter>> MakeEnergyMeter(
      const c10::Device&) const override {
    return RaplMeter::Create();
  }
  Capabilities Caps() const override {
    Capabilities c;
    c.host = true;
    c.packed_linears = true;
    return c;
  }
  void Synchronize(const c10::Device&) const override {}

  int64_t AvailableBytes(const c10::Device&) const override {
    return MeminfoBytes("MemAvailable:");
  }
  int64_t TotalBytes(const c10::Device&) const override {
    return MeminfoBytes("MemTotal:");
  }
  void ResetPeakMemory(const c10::Device&) const override { ResetCpuPeak(); }
  int64_t PeakMemory(const c10::Device&) const override { return CpuPeakBytes(); }

  PeakMethod FlopsPeakMethod() const override { return PeakMethod::kCpuLimit; }

  absl::StatusOr<c10::Device> BindRank(int) const override {
    return c10::Device(c10::kCPU);
  }
  absl::StatusOr<c10::intrusive_ptr<CommBackend>> MakeCollectives(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
      const std::string& host, std::chrono::milliseconds timeout) const override {
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
    return c10::intrusive_ptr<CommBackend>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, gloo));
  }
  std::string CollectivesName() const override { return "gloo"; }

 private:
  static int64_t MeminfoBytes(const std::string& want) {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    int64_t kib = 0;
    while (in >> key >> kib >> unit) {
      if (key == want) return kib * 1024;
    }
    return -1;
  }
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace ltb
