// The CPU's memory: the size of its last-level cache; what LibTorch's
// tensors hold, counted by a tracking allocator installed into LibTorch as
// its CPU allocator, whose peak the CPU backend reports; and what the host
// can still give a new benchmark, from the kernel's accounts, for the
// memory guard.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ltb {

// The last-level cache's bytes, as cpu0 sees it (sysfs, else sysconf; 0 when
// neither says): on a CPU of several core complexes, one complex's.
int64_t LastLevelCacheBytes();

// Installs the tracking allocator as LibTorch's CPU allocator (idempotent).
// Must run before the tensors to be tracked are allocated.
void InstallCpuTracking();
bool CpuTrackingInstalled();

// Bytes of CPU tensor memory currently allocated through LibTorch, and the
// peak since the last ResetCpuPeak().
int64_t CpuAllocatedBytes();
int64_t CpuPeakBytes();
void ResetCpuPeak();

// The memory cgroup this process is in, over every level up to the root:
// the room left under the tightest limit, counting the file cache the
// cgroup would drop before failing (its inactive_file); -1 where no level
// sets a limit.
struct CgroupMemory {
  int64_t limit = -1;     // the tightest level's limit, in bytes
  int64_t headroom = -1;  // what that level can still give, in bytes
};

// What the host can give a new benchmark, in bytes (-1: unknown).
struct HostMemory {
  // MemAvailable (MemFree on kernels without it), no more than MemTotal nor
  // than the cgroup's headroom.
  int64_t available = -1;
  // MemTotal, or the cgroup's limit where lower.
  int64_t total = -1;
  // Whether the cgroup's headroom, not MemAvailable, set `available`.
  bool cgroup_bound = false;
  // What lets this machine's memory grow as it is used ("virtio_balloon",
  // ...), "" where nothing does; set only when the cgroup does not bound
  // `available`, since growing the machine does not raise that limit.
  std::string grows;
};

// `meminfo`: the text of /proc/meminfo; `grows`: what MemoryGrowth says.
HostMemory HostMemoryFrom(absl::string_view meminfo, const CgroupMemory& cgroup,
                          const std::string& grows);

// The process's memory cgroup (cgroup v2, or v1's memory controller), read
// under `root` ("" for this machine; a test's copy of /proc and /sys
// otherwise).
CgroupMemory ReadCgroupMemory(const std::string& root);

// What can grow this machine's memory while it runs, read under `root`: a
// memory balloon that gives memory back when the guest needs it (a bound
// virtio_balloon or Hyper-V hv_balloon device), virtio-mem, or memory
// hot-plug that the kernel brings online by itself
// (/sys/devices/system/memory/auto_online_blocks). The names, joined by
// ", "; "" when there is none.
std::string MemoryGrowth(const std::string& root);

// All of the above for this machine.
HostMemory ReadHostMemory();

// What the memory guard says beside `memory.available` when it refuses: what
// bounded it, and when the machine's memory can grow, that it may give more
// than it has now and how to run anyway; "" when there is nothing to add.
std::string HostMemoryNote(const HostMemory& memory);

}  // namespace ltb
