#include "harness/context.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "harness/cuda_support.h"
#include "harness/device.h"
#include "harness/memory.h"
#include "harness/threads.h"

namespace ltb {

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
  ctx.emplace_back("cpu_capability", at::get_cpu_capability());
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
