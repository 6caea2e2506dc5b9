#include "harness/context.h"

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <torch/version.h>

#include <cstdlib>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "harness/cuda_support.h"
#include "harness/device.h"
#include "harness/memory.h"
#include "harness/threads.h"
#include "harness/torch_compat.h"

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

}  // namespace

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
  ctx.emplace_back("blas", BlasLibrary());
  ctx.emplace_back("cpu_capability", CpuCapability());
  // Settings that simulate an older CPU: each changes what runs.
  for (const char* var :
       {"ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "LTB_MAX_CPU_ISA"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      ctx.emplace_back(absl::AsciiStrToLower(var), v);
    }
  }
  ctx.emplace_back("intra_op_threads", absl::StrCat(IntraOpThreads()));
  ctx.emplace_back("inter_op_threads", absl::StrCat(InterOpThreads()));
  ctx.emplace_back("blas_threads", absl::StrCat(BlasThreads()));
  ctx.emplace_back("cpu_model", DeviceDisplayName(c10::Device(c10::kCPU)));
  ctx.emplace_back("cpu_logical_cores",
                   absl::StrCat(std::thread::hardware_concurrency()));
  ctx.emplace_back("cpu_tensor_allocator",
                   CpuTrackingInstalled()
                       ? "LibTorch default CPU allocator, wrapped to count bytes"
                       : "LibTorch default CPU allocator");
  if (cuda::Compiled()) {
    ctx.emplace_back("cuda_runtime", cuda::RuntimeVersion());
    ctx.emplace_back("cudnn", cuda::CudnnVersion());
    std::string why;
    const int count = cuda::DeviceCount(&why);
    std::vector<std::string> gpus;
    for (int i = 0; i < count; ++i) gpus.push_back(cuda::DeviceName(i));
    ctx.emplace_back(
        "gpus", count > 0 ? absl::StrJoin(gpus, "; ") : absl::StrCat("none (", why, ")"));
  } else {
    ctx.emplace_back("cuda_runtime", "none (LibTorch built without CUDA)");
  }
  ctx.emplace_back("build_type", BuiltOptimized()
                                     ? kBuildType
                                     : absl::StrCat(kBuildType, " (unoptimized)"));
  ctx.emplace_back("suite_commit", kGitCommit);
  for (const auto& kv : extra) ctx.push_back(kv);
  return ctx;
}

}  // namespace ltb
