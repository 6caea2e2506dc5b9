#include "layers/packed_linear.h"

#include <ATen/ops/mkldnn_linear.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/torch.h>

#include <string>

#include "device/cpu_isa.h"
#include "operators_called.h"

namespace ltb {
namespace {

const c10::Device kCpu(c10::kCPU);

TEST(PackableLinear, IsALinearUntilPackedThenRunsOneDnnWithTheSameResult) {
  if (!CanPackLinear(kCpu, c10::kFloat)) GTEST_SKIP() << "no oneDNN";
  torch::manual_seed(0);
  PackableLinear layer(64, 32);
  std::vector<std::string> names;
  for (const auto& p : layer->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({3, 5, 64});
  const at::Tensor plain = layer(x);
  EXPECT_TRUE(torch::allclose(
      plain, torch::nn::functional::linear(x, layer->weight, layer->bias)));
  layer->PackForCpuInference();
  const at::Tensor packed = layer(x);
  EXPECT_EQ(packed.sizes(), plain.sizes());
  EXPECT_TRUE(torch::allclose(packed, plain, 1e-4, 1e-5));
}

// With a bias, a batch of sequences is one addmm over its rows, as Python's
// nn.Linear runs it (and Hugging Face's GPT-2 Conv1D), not a matmul and then
// the bias added in a second pass, as LibTorch's C++ Linear runs it: the
// profiler sees one addmm and no add.
TEST(PackableLinear, WithABiasIsOneAddmmAsInPython) {
  torch::manual_seed(0);
  PackableLinear layer(96, 80);
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({4, 33, 96});
  const at::Tensor python =
      at::addmm(layer->bias, x.view({-1, 96}), layer->weight.t()).view({4, 33, 80});
  at::Tensor y;
  const std::map<std::string, int> ops = OperatorsCalled([&] { y = layer(x); });
  EXPECT_EQ(ops.count("aten::addmm"), 1u) << ::testing::PrintToString(ops);
  EXPECT_EQ(ops.count("aten::add"), 0u) << ::testing::PrintToString(ops);
  EXPECT_EQ(ops.count("aten::add_"), 0u) << ::testing::PrintToString(ops);
  EXPECT_TRUE(torch::allclose(y, python));
}

TEST(PackLinears, PacksEveryLayerOfAModel) {
  std::string why;
  if (!CanPackLinear(kCpu, c10::kBFloat16, &why)) GTEST_SKIP() << why;
  torch::nn::Sequential model(PackableLinear(8, 16), torch::nn::ReLU(),
                              PackableLinear(16, 4));
  model->to(c10::kBFloat16);
  EXPECT_EQ(PackLinears(*model, kCpu, c10::kBFloat16).value(), 2);
}

TEST(PackLinears, SaysWhyItCannot) {
  torch::nn::Sequential plain(torch::nn::Linear(8, 4));
  const auto none = PackLinears(*plain, kCpu, c10::kFloat);
  if (CanPackLinear(kCpu, c10::kFloat)) {
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find("no linear layers that can be packed"),
              std::string::npos);
  }
  torch::nn::Sequential packable(PackableLinear(8, 4));
  const auto fp16 = PackLinears(*packable, kCpu, c10::kHalf);
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.status().message().find("runs fp32 and bf16, not fp16"),
            std::string::npos);
  std::string why;
  EXPECT_FALSE(CanPackLinear(c10::Device(c10::kCUDA, 0), c10::kFloat, &why));
  EXPECT_NE(why.find("on the CPU, not cuda"), std::string::npos);
}

TEST(PackLinears, Bf16FollowsTheCheckATenMakes) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "this LibTorch is built without oneDNN";
  // oneDNN reads ONEDNN_MAX_CPU_ISA once: the environment is left as it is.
  std::string why;
  const bool can = CanPackLinear(kCpu, c10::kBFloat16, &why);
  EXPECT_EQ(can, OneDnnRunsBf16());
  // LibTorch itself agrees: its bf16 oneDNN linear runs exactly where the
  // suite says it can, and fails where the suite refuses it.
  const at::Tensor w = torch::randn({4, 8}).to(c10::kBFloat16);
  const at::Tensor x = torch::randn({2, 8}).to(c10::kBFloat16);
  bool ran = true;
  try {
    at::mkldnn_linear(x.to_mkldnn(), w.to_mkldnn()).to_dense();
  } catch (const std::exception&) {
    ran = false;
  }
  EXPECT_EQ(ran, can) << why;
  if (!can) {
    // Why, from the hardware's flags: missing instructions, or (on a CPU
    // that has them) ONEDNN_MAX_CPU_ISA holding oneDNN below them.
    const bool hardware = (CpuHardwareHas("avx512bw") && CpuHardwareHas("avx512vl") &&
                           CpuHardwareHas("avx512dq")) ||
                          CpuHardwareHas("avx_ne_convert");
    EXPECT_NE(why.find(hardware ? "ONEDNN_MAX_CPU_ISA="
                                : "this CPU has no AVX-512 BW/VL/DQ or AVX-NE-CONVERT"),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("bf16 linear needs"), std::string::npos) << why;
    torch::nn::Sequential packable(PackableLinear(8, 4));
    const auto refused = PackLinears(*packable, kCpu, c10::kBFloat16);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(std::string(refused.status().message()), "--cpu_linear=onednn: " + why);
  }
}

}  // namespace
}  // namespace ltb
