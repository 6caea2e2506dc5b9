#include "report/context.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

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

}  // namespace
}  // namespace ltb
