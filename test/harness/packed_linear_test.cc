#include "harness/packed_linear.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/torch.h>

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

TEST(PackLinears, PacksEveryLayerOfAModel) {
  if (!CanPackLinear(kCpu, c10::kBFloat16)) GTEST_SKIP() << "no oneDNN";
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

}  // namespace
}  // namespace ltb
