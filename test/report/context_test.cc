#include "report/context.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "scoped_env.h"

namespace ltb {
namespace {

// A wheel's build summary, as at::show_config() writes it.
constexpr char kConfig[] =
    "PyTorch built with:\n"
    "  - GCC 13.3\n"
    "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for "
    "Intel(R) 64 architecture applications\n"
    "  - Intel(R) MKL-DNN v3.13.3 (Git Hash b38f97eb6f2173513112f15a0481750b8a66e901)\n"
    "  - OpenMP 201511 (a.k.a. OpenMP 4.5)\n";

TEST(LibraryVersions, AreReadFromTheBuildSummary) {
  EXPECT_EQ(MklVersionIn(kConfig), "2024.2-Product Build 20240605");
  EXPECT_EQ(OneDnnVersionIn(kConfig), "3.13.3 (git b38f97eb6f21)");
  EXPECT_EQ(OneDnnVersionIn("  - oneDNN v3.7.1\n"), "3.7.1");
  // A LibTorch built without them names neither.
  EXPECT_EQ(MklVersionIn("  - OpenMP 201511 (a.k.a. OpenMP 4.5)\n"), "");
  EXPECT_EQ(OneDnnVersionIn("  - OpenMP 201511 (a.k.a. OpenMP 4.5)\n"), "");
}

// The context names the oneDNN and the MKL this LibTorch runs, found here by
// plain text search in its build summary.
TEST(CollectContext, NamesTheBlasAndOneDnnVersionsOfThisLibTorch) {
  std::map<std::string, std::string> ctx;
  for (const auto& [key, value] : CollectContext({})) ctx[key] = value;
  ASSERT_TRUE(ctx.count("blas_version"));
  ASSERT_TRUE(ctx.count("onednn_version"));
  const std::string config = at::show_config();
  const size_t onednn = config.find("MKL-DNN v");
  if (!at::hasMKLDNN()) {
    EXPECT_EQ(ctx["onednn_version"], "none (LibTorch built without oneDNN)");
  } else if (onednn != std::string::npos) {
    const size_t from = onednn + std::string("MKL-DNN v").size();
    const std::string version = config.substr(from, config.find(' ', from) - from);
    EXPECT_TRUE(absl::StartsWith(ctx["onednn_version"], version + " (git "))
        << ctx["onednn_version"] << " in " << config;
  }
  const size_t mkl = config.find("Math Kernel Library Version ");
  if (absl::StrContains(config, "BLAS_INFO=mkl") && mkl != std::string::npos) {
    const size_t from = mkl + std::string("Math Kernel Library Version ").size();
    EXPECT_EQ(ctx["blas_version"],
              "MKL " + config.substr(from, config.find(" for ", from) - from));
  }
  EXPECT_FALSE(ctx["blas_version"].empty());
}

// Settings of the environment that change what runs, with no flag of the
// suite's: each recorded under its name, in lower case, where set.
TEST(CollectContext, RecordsTheEnvironmentsLimitsOnTheLibraries) {
  std::map<std::string, std::string> ctx;
  {
    ScopedEnv env({{"DNNL_MAX_CPU_ISA", "AVX2"},
                   {"MKL_ENABLE_INSTRUCTIONS", "AVX2"},
                   {"ONEDNN_DEFAULT_FPMATH_MODE", "BF16"},
                   {"NVIDIA_TF32_OVERRIDE", "0"},
                   {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", nullptr}});
    for (const auto& [key, value] : CollectContext({})) ctx[key] = value;
  }
  EXPECT_EQ(ctx["dnnl_max_cpu_isa"], "AVX2");
  EXPECT_EQ(ctx["mkl_enable_instructions"], "AVX2");
  EXPECT_EQ(ctx["onednn_default_fpmath_mode"], "BF16");
  EXPECT_EQ(ctx["nvidia_tf32_override"], "0");
  EXPECT_EQ(ctx.count("torch_allow_tf32_cublas_override"), 0u);
}

// PyTorch's and NVIDIA's variables change what runs on a GPU (the
// allocator's segments, a launch waiting for the last, an attention kernel
// passed over): every one set is recorded, once.
TEST(CollectContext, RecordsPyTorchsAndNvidiasVariables) {
  std::map<std::string, std::string> ctx;
  std::vector<std::string> keys;
  {
    ScopedEnv env({{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
                   {"CUDA_LAUNCH_BLOCKING", "1"},
                   {"TORCH_CUDNN_SDPA_DEPRIORITIZED", "1"},
                   {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "0"},
                   {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
                   {"NCCL_P2P_DISABLE", "1"},
                   {"TORCHINDUCTOR_CACHE_DIR", "/tmp/x"},
                   {"TORCHELASTIC_RESTART_COUNT", "0"}});
    for (const auto& [key, value] : CollectContext({})) {
      ctx[key] = value;
      keys.push_back(key);
    }
  }
  EXPECT_EQ(ctx["pytorch_cuda_alloc_conf"], "expandable_segments:True");
  EXPECT_EQ(ctx["cuda_launch_blocking"], "1");
  EXPECT_EQ(ctx["torch_cudnn_sdpa_deprioritized"], "1");
  EXPECT_EQ(ctx["torch_allow_tf32_cublas_override"], "0");
  EXPECT_EQ(ctx["cublas_workspace_config"], ":4096:8");
  EXPECT_EQ(ctx["nccl_p2p_disable"], "1");
  // torch.compile's and Inductor's (freezing, say, changes the code an
  // AOTInductor package was built from) are theirs too; torchrun's are not.
  EXPECT_EQ(ctx["torchinductor_cache_dir"], "/tmp/x");
  EXPECT_EQ(ctx.count("torchelastic_restart_count"), 0u);
  EXPECT_EQ(std::count(keys.begin(), keys.end(), "torch_allow_tf32_cublas_override"), 1);
}

// Where OpenMP's threads run, huge pages asked for by LibTorch's allocator,
// oneDNN's primitive cache, a preloaded allocator: each changes how fast the
// same code runs on a CPU, and is recorded where set.
TEST(CollectContext, RecordsThreadPinningHugePagesCachesAndPreloads) {
  std::map<std::string, std::string> ctx;
  {
    ScopedEnv env({{"OMP_PROC_BIND", "close"},
                   {"OMP_PLACES", "cores"},
                   {"KMP_AFFINITY", "granularity=fine,compact"},
                   {"THP_MEM_ALLOC_ENABLE", "1"},
                   {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "4096"},
                   {"LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
                   {"MKL_CBWR", "AVX2"},
                   {"MKL_VERBOSE", "1"},
                   {"TORCHDYNAMO_DISABLE", "1"},
                   {"GOMP_CPU_AFFINITY", nullptr}});
    for (const auto& [key, value] : CollectContext({})) ctx[key] = value;
  }
  EXPECT_EQ(ctx["omp_proc_bind"], "close");
  EXPECT_EQ(ctx["omp_places"], "cores");
  EXPECT_EQ(ctx["kmp_affinity"], "granularity=fine,compact");
  EXPECT_EQ(ctx["thp_mem_alloc_enable"], "1");
  EXPECT_EQ(ctx["onednn_primitive_cache_capacity"], "4096");
  EXPECT_EQ(ctx["ld_preload"], "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2");
  // MKL's GEMMs on an older code path, a verbose mode that slows every
  // call, torch.compile turned off.
  EXPECT_EQ(ctx["mkl_cbwr"], "AVX2");
  EXPECT_EQ(ctx["mkl_verbose"], "1");
  EXPECT_EQ(ctx["torchdynamo_disable"], "1");
  EXPECT_EQ(ctx.count("gomp_cpu_affinity"), 0u);
}

}  // namespace
}  // namespace ltb
