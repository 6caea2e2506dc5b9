// Explicit thread settings: LibTorch's intra-op and inter-op pools and the
// BLAS library's own pool, so that two pools never fight over the cores.
#pragma once

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
// launchers such as torchrun set it), else one per physical core this process
// may run on. The suite decides it rather than LibTorch, whose default differs
// between versions (LibTorch 1.13 can fall back to 1), so that builds
// against different LibTorch versions compare like with like.
int DefaultIntraOpThreads();

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

// The logical CPUs this process may run on (its affinity), or every CPU the
// machine has when the affinity cannot be read.
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
