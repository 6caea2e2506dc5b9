#include "measure/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "device/device.h"

namespace ltb {

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
  BackendOf(device).ReleaseCache(device);
  // The memory malloc keeps, so the next memory check sees it free: the
  // model was built on the host whatever the device.
  malloc_trim(0);
}

std::string MallocLibrary() {
  Dl_info info{};
  void* symbol = dlsym(RTLD_DEFAULT, "malloc");
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  return info.dli_fname;
}

namespace {

// What ConfigureMalloc set: the process's malloc, which is process-wide.
bool& TunedHeap() {
  static bool tuned = false;
  return tuned;
}

}  // namespace

std::string MallocDescription(const std::string& glibc, const std::string& library) {
  const std::string file = std::filesystem::path(library).filename().string();
  if (library.empty() || absl::StartsWith(file, "libc.so") ||
      absl::StartsWith(file, "libc-")) {
    return glibc;
  }
  return absl::StrCat(library,
                      "'s malloc (preloaded or linked before glibc's), so --malloc's ",
                      "glibc settings do not apply");
}

absl::Status ConfigureMalloc(const std::string& mode, std::string* description) {
  if (mode == "system") {
    *description = MallocDescription("glibc malloc, default settings", MallocLibrary());
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
  const std::string glibc =
      "glibc malloc, tuned: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB, M_TOP_PAD=64MiB";
  *description = MallocDescription(glibc, MallocLibrary());
  TunedHeap() = *description == glibc;  // not where another malloc serves it
  return absl::OkStatus();
}

bool HeapKeepsFreedMemory() { return TunedHeap(); }

}  // namespace ltb
