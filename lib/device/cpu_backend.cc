// The CPU: always there; measured by the host clock; tensor memory counted
// by a tracking allocator installed into LibTorch, and the memory left read
// from /proc/meminfo within the memory cgroup's limit (cpu_memory.h); Gloo
// collectives; peaks measured by the arithmetic loop and the GEMM paths.
#include <ATen/Context.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/cpu_host.h"
#include "base/format.h"
#include "base/threads.h"
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

// What the host can give a new benchmark: /proc/meminfo, bounded by the
// memory cgroup's limit, and what can grow the machine's memory meanwhile.
namespace {

namespace fs = std::filesystem;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A "key value" line's value of `text` (/proc/meminfo's "MemTotal: 8 kB",
// memory.stat's "inactive_file 8"), or -1.
int64_t Field(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t:"), absl::SkipEmpty());
    int64_t value = 0;
    if (words.size() >= 2 && words[0] == key && absl::SimpleAtoi(words[1], &value)) {
      return value;
    }
  }
  return -1;
}

// A byte count from a cgroup file: -1 for "max" (v2) and for v1's
// "unlimited", a page-rounded 2^63 - 1.
int64_t CgroupBytes(const std::string& path) {
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadText(path)), &bytes)) return -1;
  return bytes >= (int64_t{1} << 62) ? -1 : bytes;
}

// The tightest limit from `dir` up to `top`, each level's headroom being its
// limit less its usage, plus the file cache it can drop.
void Walk(fs::path dir, const fs::path& top, const char* limit_file,
          const char* usage_file, const char* cache_key, CgroupMemory* out) {
  std::error_code ec;
  // The process's own path may not be under `top` in another cgroup
  // namespace, where `top` is the namespace's root.
  if (!fs::is_directory(dir, ec)) dir = top;
  while (true) {
    const int64_t limit = CgroupBytes((dir / limit_file).string());
    const int64_t usage = CgroupBytes((dir / usage_file).string());
    if (limit >= 0 && usage >= 0) {
      const int64_t cache = std::max<int64_t>(
          0, Field(ReadText((dir / "memory.stat").string()), cache_key));
      const int64_t headroom = std::max<int64_t>(0, limit - usage + cache);
      if (out->headroom < 0 || headroom < out->headroom) {
        out->headroom = headroom;
        out->limit = limit;
      }
    }
    if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
}

// Whether driver `dir` (/sys/bus/<bus>/drivers/<name>) has a device bound:
// an entry besides the driver's own files.
bool Bound(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != "bind" && name != "unbind" && name != "uevent" && name != "module" &&
        name != "new_id" && name != "remove_id") {
      return true;
    }
  }
  return false;
}

}  // namespace

HostMemory HostMemoryFrom(absl::string_view meminfo, const CgroupMemory& cgroup,
                          const std::string& grows) {
  HostMemory out;
  const int64_t total_kib = Field(meminfo, "MemTotal");
  int64_t available_kib = Field(meminfo, "MemAvailable");
  if (available_kib < 0) available_kib = Field(meminfo, "MemFree");  // before Linux 3.14
  if (total_kib >= 0) out.total = total_kib * 1024;
  if (available_kib >= 0) out.available = available_kib * 1024;
  if (out.total >= 0 && out.available > out.total) out.available = out.total;
  if (cgroup.limit >= 0 && (out.total < 0 || cgroup.limit < out.total)) {
    out.total = cgroup.limit;
  }
  if (cgroup.headroom >= 0 && (out.available < 0 || cgroup.headroom < out.available)) {
    out.available = cgroup.headroom;
    out.cgroup_bound = true;
  }
  if (!out.cgroup_bound) out.grows = grows;
  return out;
}

CgroupMemory ReadCgroupMemory(const std::string& root) {
  CgroupMemory out;
  VisitCgroups(
      root, "memory",
      [](const std::string&) { return std::vector<std::string>{"memory"}; },
      [&](const fs::path& dir, const fs::path& top, bool v2) {
        if (v2) {
          Walk(dir, top, "memory.max", "memory.current", "inactive_file", &out);
        } else {
          Walk(dir, top, "memory.limit_in_bytes", "memory.usage_in_bytes",
               "total_inactive_file", &out);
        }
      });
  return out;
}

std::string MemoryGrowth(const std::string& root) {
  std::vector<std::string> what;
  for (const char* driver :
       {"/sys/bus/virtio/drivers/virtio_balloon", "/sys/bus/virtio/drivers/virtio_mem",
        "/sys/bus/vmbus/drivers/hv_balloon"}) {
    if (Bound(root + driver)) what.push_back(fs::path(driver).filename().string());
  }
  const std::string online = std::string(absl::StripAsciiWhitespace(
      ReadText(root + "/sys/devices/system/memory/auto_online_blocks")));
  if (absl::StartsWith(online, "online")) {
    what.push_back("hot-plugged memory brought online (auto_online_blocks=" + online +
                   ")");
  }
  return absl::StrJoin(what, ", ");
}

std::string HostMemoryNote(const HostMemory& memory) {
  if (memory.cgroup_bound) {
    return absl::StrCat("under the memory limit of this process's cgroup, ",
                        FormatBytes(memory.total));
  }
  if (memory.grows.empty()) return "";
  return absl::StrCat("now, of ", FormatBytes(memory.total),
                      " in all; this machine's memory can grow as it is used, through ",
                      memory.grows,
                      ", which MemAvailable does not count: --memory_guard=false runs "
                      "it anyway");
}

namespace {

// sysfs's "32768K", "32M" or "1024".
int64_t ParseCacheSize(absl::string_view text) {
  absl::string_view v = absl::StripAsciiWhitespace(text);
  int64_t scale = 1;
  if (absl::ConsumeSuffix(&v, "K"))
    scale = 1024;
  else if (absl::ConsumeSuffix(&v, "M"))
    scale = 1024 * 1024;
  int64_t n = 0;
  return absl::SimpleAtoi(v, &n) ? n * scale : 0;
}

}  // namespace

int64_t LastLevelCacheBytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f(absl::StrCat("/sys/devices/system/cpu/cpu0/cache/index", i, "/size"));
    std::string size;
    if (f >> size) best = std::max(best, ParseCacheSize(size));
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) best = std::max<int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
  return best;
}

HostMemory ReadHostMemory() {
  return HostMemoryFrom(ReadText("/proc/meminfo"), ReadCgroupMemory(""),
                        MemoryGrowth(""));
}

namespace {

// FBGEMM (x86's quantised kernels) is built into this LibTorch.
bool HasFbgemm() {
  const auto engines = at::globalContext().supportedQEngines();
  return std::find(engines.begin(), engines.end(), at::QEngine::FBGEMM) != engines.end();
}

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
    const std::vector<int> cpus = AllowedCpus();
    std::vector<std::pair<std::string, std::string>> ctx = {
        {"cpu_model", CpuModelName()},
        {"cpu_energy", meter.ok()
                           ? (*meter)->Covers()
                           : absl::StrCat("none (", meter.status().message(), ")")},
        {"cpu_logical_cores", absl::StrCat(std::thread::hardware_concurrency())},
        // What this process may use of them: its affinity (taskset, a
        // cpuset) and its cgroup's CPU time.
        {"cpu_affinity", AffinityText(cpus, std::thread::hardware_concurrency())},
        {"cpu_quota", CpuQuotaText(ReadCpuQuota(""))}};
    // The machine around the cores, where /proc and /sys say: each changes
    // how fast the same code runs.
    for (auto [key, value] : std::vector<std::pair<const char*, std::string>>{
             {"cpu_threads_per_core", ThreadsPerCore("")},
             {"numa_nodes", NumaNodes("", cpus)},
             {"cpu_frequency_scaling", CpuFrequencyScaling("", cpus)},
             {"transparent_hugepages", TransparentHugePages("")},
             {"kernel", KernelRelease()},
             {"virtual_machine", VirtualMachine("")}}) {
      if (!value.empty()) ctx.emplace_back(key, std::move(value));
    }
    ctx.emplace_back("cpu_tensor_allocator",
                     CpuTrackingInstalled()
                         ? "LibTorch default CPU allocator, wrapped to count bytes"
                         : "LibTorch default CPU allocator");
    return ctx;
  }
  absl::StatusOr<std::unique_ptr<EnergyMeter>> MakeEnergyMeter(
      const c10::Device&) const override {
    return RaplMeter::Create();
  }
  Capabilities Caps() const override {
    Capabilities c;
    c.host = true;
    c.packed_linears = true;
    c.int8_weight_dtypes = {c10::kFloat, c10::kBFloat16, c10::kHalf};
    c.int4_weight_dtypes = {c10::kFloat, c10::kBFloat16, c10::kHalf};
    c.int4_cpu_packing = true;
    c.dynamic_int8_linear = HasFbgemm();
    return c;
  }
  void Synchronize(const c10::Device&) const override {}

  int64_t AvailableBytes(const c10::Device&) const override {
    return ReadHostMemory().available;
  }
  int64_t TotalBytes(const c10::Device&) const override { return ReadHostMemory().total; }
  int64_t CacheBytes(const c10::Device&) const override { return LastLevelCacheBytes(); }
  std::string AvailableNote(const c10::Device&) const override {
    return HostMemoryNote(ReadHostMemory());
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
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace ltb
