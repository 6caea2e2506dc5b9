#include "harness/threads.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>

#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

}  // namespace

absl::Status ConfigureThreads(const ThreadSettings& settings) {
  if (settings.intra_op < 0 || settings.inter_op < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("thread counts must be positive (got --threads=", settings.intra_op,
                     ", --interop_threads=", settings.inter_op, ")"));
  }
  const int intra = settings.intra_op > 0 ? settings.intra_op : at::get_num_threads();
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
  std::set<std::string> loaded;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    const std::string file = line.substr(slash + 1);
    for (const char* lib : {"libopenblas", "libblis", "libmkl_rt", "libblas",
                            "libmkl_core", "libflexiblas"}) {
      if (absl::StartsWith(file, lib)) loaded.insert(file);
    }
  }
  if (loaded.empty()) return absl::StrCat(built, " (linked into LibTorch)");
  return absl::StrCat(built, " (loaded: ", absl::StrJoin(loaded, ", "), ")");
}

int BlasThreads() {
  if (auto fn = FindGet("openblas_get_num_threads")) return fn();
  if (auto fn = FindGet("mkl_get_max_threads")) return fn();
  return ParallelInfoValue("mkl_get_max_threads()");
}

}  // namespace ltb
