// Explicit thread settings: LibTorch's intra-op and inter-op pools and the
// BLAS library's own pool, so that two pools never fight over the cores.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ltb {

struct ThreadSettings {
  int intra_op = 0;  // 0: DefaultIntraOpThreads()
  int inter_op = 1;
};

// Applies the settings once, before any parallel work has started. Sets the
// BLAS library's thread count to the intra-op count as well.
absl::Status ConfigureThreads(const ThreadSettings& settings);

// The intra-op count when none is given: OMP_NUM_THREADS when set (as
// launchers such as torchrun set it), else DefaultIntraOpThreadsOn this
// machine's tree and this process's CPUs. The suite decides it rather than
// LibTorch, whose default differs between versions (LibTorch 1.13 can fall
// back to 1) and ignores a cgroup's CPU quota, so that builds against
// different LibTorch versions compare like with like.
int DefaultIntraOpThreads();

// One thread per physical core among `cpus` (CountPhysicalCores over
// `root`/sys/devices/system/cpu), but no more than the cgroup's CPU quota
// rounded up (ReadCpuQuota(root)): a container given 1 CPU of a 2-core host
// that ran 2 threads would have them throttled in turn, each parallel
// region waiting on the one descheduled. At least 1.
int DefaultIntraOpThreadsOn(const std::string& root, const std::vector<int>& cpus);

// The CPU time the process's cgroup may use, the tightest over every level
// from its own up to the root: cgroup v2's cpu.max ("150000 100000": 1.5
// CPUs) or v1's cpu.cfs_quota_us over cpu.cfs_period_us, read under `root`
// ("" for this machine; a test's copy of /proc and /sys otherwise).
struct CpuQuota {
  double cpus = -1;    // quota / period; -1 where no level sets a quota
  std::string source;  // where it was read: "cgroup v2 cpu.max 150000 100000"
};
CpuQuota ReadCpuQuota(const std::string& root);

// Calls visit(dir, top, v2) for the cgroup directory of this process (read
// from `root`/proc/self/cgroup) in each hierarchy that holds `controller`:
// v2's unified one (at /sys/fs/cgroup or /sys/fs/cgroup/unified), and v1's
// mounts `v1_mounts(controllers)` names for a line whose controllers include
// it ("cpu" alone, or "cpu,cpuacct"). `top` is the hierarchy's root, up to
// which a limit may be set at any level.
void VisitCgroups(
    const std::string& root, const std::string& controller,
    const std::function<std::vector<std::string>(const std::string& controllers)>&
        v1_mounts,
    const std::function<void(const std::filesystem::path& dir,
                             const std::filesystem::path& top, bool v2)>& visit);

// The context's words for a quota: "1.5 CPUs (cgroup v2 cpu.max 150000
// 100000)", or "none (no cgroup CPU quota)".
std::string CpuQuotaText(const CpuQuota& quota);

// CPU numbers as the kernel lists them: {0, 1, 2, 3, 8} is "0-3,8".
std::string CpuListText(const std::vector<int>& cpus);

// The context's words for the CPUs this process may run on, of the `online`
// ones: "0-1 (2 of 2 logical CPUs)".
std::string AffinityText(const std::vector<int>& cpus, int online);

// Physical cores among `cpus` (logical CPU numbers), from the topology files
// under `sys_cpu_dir` (/sys/devices/system/cpu): one per distinct package and
// core id. A CPU without topology files counts as a core of its own.
int CountPhysicalCores(const std::string& sys_cpu_dir, const std::vector<int>& cpus);

// The physical cores among `cpus`, each named by the lowest-numbered CPU
// under `sys_cpu_dir` with its package and core id (so that every process of
// the machine names a core alike), sorted; a CPU without topology files
// names a core of its own.
std::vector<int> PhysicalCoreIds(const std::string& sys_cpu_dir,
                                 const std::vector<int>& cpus);

// The logical CPUs this process may run on (its affinity, and where OpenMP
// binds its threads, the CPUs of its places, to which its runtime narrowed
// this thread's affinity), or every CPU the machine has when the affinity
// cannot be read.
std::vector<int> AllowedCpus();

int IntraOpThreads();
int InterOpThreads();

// The BLAS library in use ("mkl", "openblas", ...) as LibTorch was built,
// plus any BLAS shared library actually loaded into the process, named with
// its directory (Debian's libblas.so.3 is OpenBLAS, BLIS or the reference
// BLAS, told apart by where it lives).
std::string BlasLibrary();

// True when the loaded BLAS is the unoptimised reference (netlib) BLAS:
// Debian's blas/libblas.so.3.
bool ReferenceBlasLoaded();

// BLAS threads as the BLAS library reports them, or -1 if it cannot say.
int BlasThreads();

}  // namespace ltb
