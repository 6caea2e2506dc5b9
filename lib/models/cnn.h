// The CNN family (shared/MODELS.md, "CNN"): a small CIFAR-sized network of
// two convolutions with ReLU and max pooling, then two linear layers.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "harness/family.h"

namespace ltb {

struct CNNConfig {
  int64_t conv1 = 32, conv2 = 64, hidden = 512, classes = 10;
};

struct CNNSize {
  std::string name;
  CNNConfig config;
  int64_t card_params;
};

// nano, default.
const std::vector<CNNSize>& CNNSizes();
absl::StatusOr<CNNConfig> CNNSizeConfig(const std::string& size);

// Parameters and forward FLOPs of one 3x32x32 image (2 per multiply-add).
int64_t CNNParamCount(const CNNConfig& c);
double CNNForwardFlops(const CNNConfig& c);

class CNNImpl : public torch::nn::Module {
 public:
  explicit CNNImpl(const CNNConfig& c);
  // x: (N, 3, 32, 32) -> logits (N, classes).
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(CNN);

Family CNNFamily();

}  // namespace ltb
