#include "base/threads.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ltb {
namespace {

// BLAS libraries LibTorch may be linked against dynamically (Debian's
// libtorch uses OpenBLAS or BLIS); the wheel links MKL statically.
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

SetThreadsFn FindSet(const char* name) {
  return reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, name));
}
GetThreadsFn FindGet(const char* name) {
  return reinterpret_cast<GetThreadsFn>(dlsym(RTLD_DEFAULT, name));
}

// Reads "name : value" from at::get_parallel_info(), which reports the
// thread counts of the libraries LibTorch links, MKL included.
int ParallelInfoValue(absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(at::get_parallel_info(), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!absl::StartsWith(line, name)) continue;
    const size_t colon = line.rfind(':');
    int value = -1;
    if (colon != absl::string_view::npos &&
        absl::SimpleAtoi(line.substr(colon + 1), &value)) {
      return value;
    }
  }
  return -1;
}

int ReadInt(const std::string& path, int fallback) {
  std::ifstream in(path);
  int value = 0;
  return in >> value ? value : fallback;
}

std::string CgroupFileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

// The quota of one cgroup directory, v2 (cpu.max: "max 100000" or "150000
// 100000") or v1 (cpu.cfs_quota_us, -1 for none, over cpu.cfs_period_us);
// cpus -1 where it sets none.
CpuQuota QuotaOf(const std::filesystem::path& dir, bool v2) {
  CpuQuota out;
  int64_t quota = 0, period = 0;
  if (v2) {
    const std::string max = CgroupFileText((dir / "cpu.max").string());
    std::vector<std::string> words = absl::StrSplit(max, ' ', absl::SkipEmpty());
    if (words.size() == 2 && absl::SimpleAtoi(words[0], &quota) &&
        absl::SimpleAtoi(words[1], &period) && quota > 0 && period > 0) {
      out.cpus = static_cast<double>(quota) / period;
      out.source = absl::StrCat("cgroup v2 cpu.max ", max);
    }
  } else if (absl::SimpleAtoi(CgroupFileText((dir / "cpu.cfs_quota_us").string()),
                              &quota) &&
             absl::SimpleAtoi(CgroupFileText((dir / "cpu.cfs_period_us").string()),
                              &period) &&
             quota > 0 && period > 0) {
    out.cpus = static_cast<double>(quota) / period;
    out.source = absl::StrCat("cgroup v1 cpu.cfs_quota_us ", quota,
                              " per cpu.cfs_period_us ", period);
  }
  return out;
}

// The tightest quota from `dir` up to `top` (a cgroup's quota bounds every
// cgroup below it).
void WalkQuota(std::filesystem::path dir, const std::filesystem::path& top, bool v2,
               CpuQuota* out) {
  std::error_code ec;
  // In another cgroup namespace the process's path is not under `top`, which
  // is then the namespace's root: the process's own cgroup.
  if (!std::filesystem::is_directory(dir, ec)) dir = top;
  while (true) {
    const CpuQuota here = QuotaOf(dir, v2);
    if (here.cpus > 0 && (out->cpus < 0 || here.cpus < out->cpus)) *out = here;
    if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
}

// Every loaded BLAS or LAPACK library as "<directory>/<file>".
std::set<std::string> LoadedBlas() {
  std::set<std::string> loaded;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    const std::string file = line.substr(slash + 1);
    for (const char* lib : {"libopenblas", "libblis", "libmkl_rt", "libblas",
                            "libmkl_core", "libflexiblas"}) {
      if (!absl::StartsWith(file, lib)) continue;
      const size_t dir = slash == 0 ? std::string::npos : line.rfind('/', slash - 1);
      loaded.insert(dir == std::string::npos ? file : line.substr(dir + 1));
    }
  }
  return loaded;
}

}  // namespace

int CountPhysicalCores(const std::string& sys_cpu_dir, const std::vector<int>& cpus) {
  std::set<std::pair<int, int>> cores;
  int unknown = 0;
  for (int cpu : cpus) {
    const std::string topo = absl::StrCat(sys_cpu_dir, "/cpu", cpu, "/topology/");
    const int package = ReadInt(topo + "physical_package_id", -1);
    const int core = ReadInt(topo + "core_id", -1);
    if (package < 0 || core < 0) {
      ++unknown;
    } else {
      cores.insert({package, core});
    }
  }
  return static_cast<int>(cores.size()) + unknown;
}

std::vector<int> PhysicalCoreIds(const std::string& sys_cpu_dir,
                                 const std::vector<int>& cpus) {
  // (package, core id) -> the lowest CPU of that core on the machine.
  std::map<std::pair<int, int>, int> lowest;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(sys_cpu_dir, error)) {
    int cpu = 0;
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "cpu") || !absl::SimpleAtoi(name.substr(3), &cpu))
      continue;
    const std::string topo = entry.path().string() + "/topology/";
    const int package = ReadInt(topo + "physical_package_id", -1);
    const int core = ReadInt(topo + "core_id", -1);
    if (package < 0 || core < 0) continue;
    auto [it, added] = lowest.emplace(std::make_pair(package, core), cpu);
    if (!added) it->second = std::min(it->second, cpu);
  }
  std::set<int> ids;
  for (int cpu : cpus) {
    const std::string topo = absl::StrCat(sys_cpu_dir, "/cpu", cpu, "/topology/");
    const auto it = lowest.find(
        {ReadInt(topo + "physical_package_id", -1), ReadInt(topo + "core_id", -1)});
    ids.insert(it == lowest.end() ? cpu : it->second);
  }
  return {ids.begin(), ids.end()};
}

namespace {

// The CPUs of the OpenMP runtime's places (none without OMP_PLACES,
// OMP_PROC_BIND or GOMP_CPU_AFFINITY), found at run time: this file is
// built without OpenMP, which LibTorch loads.
std::set<int> OpenMpPlaceCpus() {
  const auto num_places =
      reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_num_places"));
  const auto place_num_procs =
      reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "omp_get_place_num_procs"));
  const auto place_proc_ids = reinterpret_cast<void (*)(int, int*)>(
      dlsym(RTLD_DEFAULT, "omp_get_place_proc_ids"));
  std::set<int> cpus;
  if (num_places == nullptr || place_num_procs == nullptr || place_proc_ids == nullptr) {
    return cpus;
  }
  for (int place = 0; place < num_places(); ++place) {
    std::vector<int> ids(std::max(0, place_num_procs(place)));
    if (ids.empty()) continue;
    place_proc_ids(place, ids.data());
    cpus.insert(ids.begin(), ids.end());
  }
  return cpus;
}

}  // namespace

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    // Where OpenMP binds its threads (OMP_PROC_BIND, OMP_PLACES,
    // GOMP_CPU_AFFINITY), its runtime pins this thread to the first place
    // when it loads, before main(): the process may run on every place's
    // CPUs, which its places are made of.
    std::set<int> all = OpenMpPlaceCpus();
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) all.insert(cpu);
    }
    cpus.assign(all.begin(), all.end());
  }
  if (cpus.empty()) {
    for (unsigned cpu = 0; cpu < std::max(1u, std::thread::hardware_concurrency()); ++cpu)
      cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

void VisitCgroups(
    const std::string& root, const std::string& controller,
    const std::function<std::vector<std::string>(const std::string& controllers)>&
        v1_mounts,
    const std::function<void(const std::filesystem::path& dir,
                             const std::filesystem::path& top, bool v2)>& visit) {
  namespace fs = std::filesystem;
  const std::string cgroups = CgroupFileText(root + "/proc/self/cgroup");
  for (absl::string_view line : absl::StrSplit(cgroups, '\n', absl::SkipEmpty())) {
    // hierarchy:controllers:path
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[2].empty() || parts[2][0] != '/') continue;
    const std::string path = parts[2].substr(1);
    if (parts[0] == "0" && parts[1].empty()) {  // cgroup v2
      for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        const fs::path top = root + mount;
        visit(path.empty() ? top : top / path, top, /*v2=*/true);
      }
    } else if (absl::c_linear_search(
                   std::vector<absl::string_view>(absl::StrSplit(parts[1], ',')),
                   controller)) {
      for (const std::string& mount : v1_mounts(parts[1])) {
        const fs::path top = root + "/sys/fs/cgroup/" + mount;
        visit(path.empty() ? top : top / path, top, /*v2=*/false);
      }
    }
  }
}

CpuQuota ReadCpuQuota(const std::string& root) {
  CpuQuota out;
  // v1's cpu controller, mounted alone or with cpuacct ("cpu,cpuacct").
  VisitCgroups(
      root, "cpu",
      [](const std::string& controllers) {
        return std::vector<std::string>{"cpu", controllers};
      },
      [&](const std::filesystem::path& dir, const std::filesystem::path& top, bool v2) {
        WalkQuota(dir, top, v2, &out);
      });
  return out;
}

std::string CpuQuotaText(const CpuQuota& quota) {
  if (quota.cpus < 0) return "none (no cgroup CPU quota)";
  return absl::StrFormat("%g CPU%s (%s)", quota.cpus, quota.cpus == 1 ? "" : "s",
                         quota.source);
}

std::string CpuListText(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<std::string> ranges;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    ranges.push_back(j == i ? absl::StrCat(sorted[i])
                            : absl::StrCat(sorted[i], "-", sorted[j]));
    i = j + 1;
  }
  return absl::StrJoin(ranges, ",");
}

std::string AffinityText(const std::vector<int>& cpus, int online) {
  return absl::StrCat(CpuListText(cpus), " (", cpus.size(), " of ", online,
                      " logical CPUs)");
}

int DefaultIntraOpThreadsOn(const std::string& root, const std::vector<int>& cpus) {
  int threads = std::max(1, CountPhysicalCores(root + "/sys/devices/system/cpu", cpus));
  const CpuQuota quota = ReadCpuQuota(root);
  if (quota.cpus > 0) {
    threads = std::min(threads, std::max(1, static_cast<int>(std::ceil(quota.cpus))));
  }
  return threads;
}

int DefaultIntraOpThreads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    int n = 0;
    if (absl::SimpleAtoi(env, &n) && n > 0) return n;
  }
  return DefaultIntraOpThreadsOn("", AllowedCpus());
}

absl::Status ConfigureThreads(const ThreadSettings& settings) {
  if (settings.intra_op < 0 || settings.inter_op < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("thread counts must be positive (got --threads=", settings.intra_op,
                     ", --interop_threads=", settings.inter_op, ")"));
  }
  const int intra = settings.intra_op > 0 ? settings.intra_op : DefaultIntraOpThreads();
  // OpenMP's own limits, where they would run LibTorch's parallel regions on
  // fewer threads than this run reports (and measures its peaks with).
  if (auto limit = FindGet("omp_get_thread_limit"); limit != nullptr && limit() < intra) {
    const char* env = std::getenv("OMP_THREAD_LIMIT");
    return absl::InvalidArgumentError(absl::StrCat(
        "OMP_THREAD_LIMIT=", env != nullptr ? env : "?", " holds OpenMP to ", limit(),
        limit() == 1 ? " thread" : " threads", ", fewer than the ", intra,
        " intra-op threads this run would report (--threads, OMP_NUM_THREADS or the "
        "cores): unset it, or run --threads=",
        limit()));
  }
  if (auto dynamic = FindGet("omp_get_dynamic"); dynamic != nullptr && dynamic() != 0) {
    return absl::InvalidArgumentError(
        "OMP_DYNAMIC=true lets OpenMP run fewer threads than asked as the machine's load "
        "goes, so no step's thread count is known: unset it");
  }
  // set_num_threads also sets MKL's count and OpenMP's.
  at::set_num_threads(intra);
  if (auto fn = FindSet("openblas_set_num_threads")) fn(intra);
  if (auto fn = FindSet("bli_thread_set_num_threads")) fn(intra);
  try {
    at::set_num_interop_threads(settings.inter_op);
  } catch (const std::exception&) {
    // Already started (a test that configured twice): the count is fixed.
  }
  return absl::OkStatus();
}

int IntraOpThreads() { return at::get_num_threads(); }
int InterOpThreads() { return at::get_num_interop_threads(); }

std::string BlasLibrary() {
  std::string built = "unknown";
  for (absl::string_view item :
       absl::StrSplit(at::show_config(), absl::ByAnyChar(",\n"))) {
    const size_t at = item.find("BLAS_INFO=");
    if (at != absl::string_view::npos) {
      built = std::string(absl::StripAsciiWhitespace(item.substr(at + 10)));
    }
  }
  const std::set<std::string> loaded = LoadedBlas();
  if (loaded.empty()) return absl::StrCat(built, " (linked into LibTorch)");
  return absl::StrCat(built, " (loaded: ", absl::StrJoin(loaded, ", "), ")");
}

bool ReferenceBlasLoaded() {
  for (const std::string& lib : LoadedBlas()) {
    if (absl::StartsWith(lib, "blas/libblas")) return true;
  }
  return false;
}

int BlasThreads() {
  if (auto fn = FindGet("openblas_get_num_threads")) return fn();
  if (ReferenceBlasLoaded()) return 1;
  if (auto fn = FindGet("mkl_get_max_threads")) return fn();
  return ParallelInfoValue("mkl_get_max_threads()");
}

}  // namespace ltb
