#include "report/context.h"

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <loadgen/version.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/threads.h"
#include "base/torch_compat.h"
#include "device/cpu_isa.h"
#include "device/device.h"

namespace ltb {
namespace {

// The vector instruction set LibTorch's CPU kernels dispatch to: "AVX512",
// "AVX2", "DEFAULT", ...
std::string CpuCapability() {
#if LTB_TORCH_AT_LEAST(2, 0)
  return at::get_cpu_capability();
#else
  // Older LibTorch exports no getter; its build summary names it.
  const std::string key = "CPU capability usage: ";
  const std::string config = at::show_config();
  const size_t pos = config.find(key);
  if (pos == std::string::npos) return "unknown";
  const size_t begin = pos + key.size();
  return std::string(absl::StripAsciiWhitespace(
      absl::string_view(config).substr(begin, config.find('\n', begin) - begin)));
#endif
}

// The BLAS library's own version: MKL's from the build summary, OpenBLAS's
// and BLIS's from the library loaded.
std::string BlasVersion(const std::string& config) {
  if (absl::StrContains(config, "BLAS_INFO=mkl")) {
    const std::string mkl = MklVersionIn(config);
    return mkl.empty() ? "MKL, version unknown" : absl::StrCat("MKL ", mkl);
  }
  using Text = const char* (*)();
  for (const char* symbol : {"openblas_get_config", "bli_info_get_version_str"}) {
    if (auto fn = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, symbol)); fn != nullptr) {
      return std::string(absl::StripAsciiWhitespace(fn()));
    }
  }
  return "unknown";
}

std::string OneDnnVersion(const std::string& config) {
  if (!at::hasMKLDNN()) return "none (LibTorch built without oneDNN)";
  const std::string version = OneDnnVersionIn(config);
  return version.empty() ? "unknown" : version;
}

}  // namespace

std::string MklVersionIn(const std::string& config) {
  static const std::regex mkl(R"(Math Kernel Library Version ([^\s].*?) for )");
  std::smatch m;
  return std::regex_search(config, m, mkl) ? m[1].str() : "";
}

std::string OneDnnVersionIn(const std::string& config) {
  // LibTorch names oneDNN by its old name.
  static const std::regex onednn(
      R"((?:MKL-DNN|oneDNN) v(\S+)(?: \(Git Hash ([0-9a-f]{12}))?)");
  std::smatch m;
  if (!std::regex_search(config, m, onednn)) return "";
  return m[2].matched ? absl::StrCat(m[1].str(), " (git ", m[2].str(), ")") : m[1].str();
}

bool BuiltOptimized() {
#if defined(__OPTIMIZE__)
  return true;
#else
  return false;
#endif
}

Context CollectContext(const Context& extra) {
  Context ctx;
  ctx.emplace_back("libtorch_version", TORCH_VERSION);
  // The load generator linked in, as LoadGen names itself (its source
  // package's VERSION.txt).
  ctx.emplace_back("loadgen_version", mlperf::LoadgenVersion());
  ctx.emplace_back("blas", BlasLibrary());
  const std::string config = at::show_config();
  ctx.emplace_back("blas_version", BlasVersion(config));
  ctx.emplace_back("onednn_version", OneDnnVersion(config));
  ctx.emplace_back("cpu_capability", CpuCapability());
  // Settings that simulate an older CPU, round fp32 in oneDNN (DNNL_ is
  // oneDNN's older prefix, MKL_ENABLE_INSTRUCTIONS MKL's limit) or turn
  // TF32 on or off behind LibTorch's back on CUDA: each changes what runs.
  std::vector<std::string> vars = {
      "ATEN_CPU_CAPABILITY",      "ONEDNN_MAX_CPU_ISA",      "LTB_MAX_CPU_ISA",
      "DNNL_MAX_CPU_ISA",         "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_DEFAULT_FPMATH_MODE",
      "DNNL_DEFAULT_FPMATH_MODE", "NVIDIA_TF32_OVERRIDE",    "CUDA_LAUNCH_BLOCKING"};
  // And every variable of PyTorch's and NVIDIA's libraries, in name order:
  // the CUDA allocator's configuration (PYTORCH_CUDA_ALLOC_CONF), caching
  // turned off, an attention kernel passed over (TORCH_CUDNN_SDPA_...),
  // cuBLAS's workspace, NCCL's transport, ... (CUDA_LAUNCH_BLOCKING above:
  // every launch waits for the one before).
  std::vector<std::string> prefixed;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    for (const char* prefix : {"PYTORCH_", "TORCH_", "TORCHDYNAMO_", "TORCHINDUCTOR_",
                               "CUBLAS", "CUDNN_", "NCCL_"}) {
      if (absl::StartsWith(name, prefix)) prefixed.emplace_back(name);
    }
  }
  std::sort(prefixed.begin(), prefixed.end());
  vars.insert(vars.end(), prefixed.begin(), prefixed.end());
  for (const std::string& var : vars) {
    if (const char* v = std::getenv(var.c_str()); v != nullptr && *v != '\0') {
      ctx.emplace_back(absl::AsciiStrToLower(var), v);
    }
  }
  if (const std::string note = CpuSimulationNote(); !note.empty()) {
    ctx.emplace_back("cpu_simulation", note);
  }
  // How OpenMP threads wait between parallel regions: spinning (the
  // default) or sleeping changes how fast a step runs, most of all when
  // other processes share the cores; and where they run (pinned to a core
  // each, or moved by the scheduler).
  // Whether LibTorch's CPU allocator asks for huge pages
  // (THP_MEM_ALLOC_ENABLE=1: madvise on blocks of 2 MiB and more, which
  // transparent_hugepages "madvise" then backs with huge pages), how many
  // oneDNN primitives stay cached, and a library preloaded in front of the
  // process's own (jemalloc, tcmalloc, Intel's OpenMP: glibc's malloc
  // settings, the context's malloc, then do nothing).
  // OpenMP's thread limit and dynamic teams (refused where they would cut
  // the threads: base/threads.cc), MKL's code path (MKL_CBWR=AVX2 runs its
  // GEMMs as on an AVX2 CPU) and the libraries' verbose modes, which slow
  // every call they log.
  for (const char* var : {"OMP_WAIT_POLICY",
                          "GOMP_SPINCOUNT",
                          "KMP_BLOCKTIME",
                          "OMP_PROC_BIND",
                          "OMP_PLACES",
                          "GOMP_CPU_AFFINITY",
                          "KMP_AFFINITY",
                          "OMP_THREAD_LIMIT",
                          "OMP_DYNAMIC",
                          "MKL_DYNAMIC",
                          "MKL_CBWR",
                          "MKL_DEBUG_CPU_TYPE",
                          "MKL_VERBOSE",
                          "ONEDNN_VERBOSE",
                          "DNNL_VERBOSE",
                          "THP_MEM_ALLOC_ENABLE",
                          "LRU_CACHE_CAPACITY",
                          "ONEDNN_PRIMITIVE_CACHE_CAPACITY",
                          "DNNL_PRIMITIVE_CACHE_CAPACITY",
                          "LD_PRELOAD"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      ctx.emplace_back(absl::AsciiStrToLower(var), v);
    }
  }
  ctx.emplace_back("intra_op_threads", absl::StrCat(IntraOpThreads()));
  ctx.emplace_back("inter_op_threads", absl::StrCat(InterOpThreads()));
  ctx.emplace_back("blas_threads", absl::StrCat(BlasThreads()));
  // Each device kind's own entries: the CPU's model and allocator, the
  // CUDA runtime and GPUs, ...
  for (const DeviceBackend* backend : Backends()) {
    for (auto& entry : backend->Context()) ctx.push_back(std::move(entry));
  }
  ctx.emplace_back("build_type", BuiltOptimized()
                                     ? kBuildType
                                     : absl::StrCat(kBuildType, " (unoptimized)"));
  ctx.emplace_back("suite_commit", kGitCommit);
  for (const auto& kv : extra) ctx.push_back(kv);
  return ctx;
}

}  // namespace ltb
