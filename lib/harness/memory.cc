#include "harness/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "harness/cuda_support.h"
#include "harness/device.h"

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

void ResetPeak(const c10::Device& device) {
  if (device.is_cpu()) {
    ResetCpuPeak();
  } else if (device.is_cuda()) {
    cuda::ResetPeakAllocated(device.has_index() ? device.index() : 0);
  }
}

int64_t PeakBytes(const c10::Device& device) {
  if (device.is_cpu()) return CpuPeakBytes();
  if (device.is_cuda()) {
    return cuda::PeakAllocated(device.has_index() ? device.index() : 0);
  }
  return -1;
}

bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // 5: reset the peak resident set size
  clear.flush();
  return static_cast<bool>(clear);
}

int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %" SCNd64 " kB", &kib) == 1) return kib * 1024;
  }
  return -1;
}

void ReleaseCachedMemory(const c10::Device& device) {
  if (device.is_cuda()) cuda::EmptyCache();
  malloc_trim(0);  // the model was built on the host whatever the device
}

absl::Status ConfigureMalloc(const std::string& mode, std::string* description) {
  if (mode == "system") {
    *description = "glibc malloc, default settings";
    return absl::OkStatus();
  }
  if (mode != "tuned") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --malloc '", mode, "'; valid: tuned, system"));
  }
  // Large blocks from mmap are unmapped on free and faulted in again on the
  // next step; keeping them on the heap and never trimming it avoids that.
  const bool ok = mallopt(M_MMAP_MAX, 0) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
                  mallopt(M_TOP_PAD, 64 << 20) == 1;
  if (!ok) return absl::InternalError("mallopt rejected the tuned settings");
  *description =
      "glibc malloc, tuned: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB, M_TOP_PAD=64MiB";
  return absl::OkStatus();
}

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= 1024.0 * 1024) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (b >= 1024.0) return absl::StrFormat("%.1f KiB", b / 1024);
  return absl::StrCat(bytes, " B");
}

absl::Status CheckFits(const MemoryEstimate& need, const c10::Device& device) {
  const c10::Device cpu(c10::kCPU);
  const int64_t host_available = DeviceAvailableBytes(cpu);
  const bool on_cpu = device.is_cpu();
  // Built on the host first; on the CPU the build and the run share memory.
  const int64_t host_need =
      on_cpu ? std::max(need.Total(), need.host_build) : need.host_build;
  if (host_available >= 0 && host_need > host_available) {
    std::string what =
        on_cpu && need.Total() >= need.host_build
            ? absl::StrCat(FormatBytes(need.Total()), " (weights ",
                           FormatBytes(need.weights), ", gradients ",
                           FormatBytes(need.gradients), ", optimizer state ",
                           FormatBytes(need.optimizer), ", activations ",
                           FormatBytes(need.activations), ")")
            : absl::StrCat(FormatBytes(need.host_build),
                           " to build the fp32 model on the host");
    return absl::ResourceExhaustedError(absl::StrCat(
        "does not fit: needs about ", what, " but cpu has ", FormatBytes(host_available),
        " available; try a smaller size, --batch or --seq"));
  }
  if (on_cpu) return absl::OkStatus();
  const int64_t available = DeviceAvailableBytes(device);
  if (available < 0 || need.Total() <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "does not fit: needs about ", FormatBytes(need.Total()), " (weights ",
      FormatBytes(need.weights), ", gradients ", FormatBytes(need.gradients),
      ", optimizer state ", FormatBytes(need.optimizer), ", activations ",
      FormatBytes(need.activations), ") but ", DeviceName(device), " has ",
      FormatBytes(available), " available; try a smaller size, --batch or --seq"));
}

}  // namespace ltb
