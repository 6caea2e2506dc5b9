// The CNN family (shared/MODELS.md, "CNN"): a small CIFAR-sized network of
// two convolutions with ReLU and max pooling, then two linear layers.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "layers/packed_linear.h"
#include "models/size_table.h"

namespace ltb {

struct CNNOptions {
  CNNOptions(int64_t conv1, int64_t conv2, int64_t hidden)
      : conv1_(conv1), conv2_(conv2), hidden_(hidden) {}
  TORCH_ARG(int64_t, conv1);   // channels of the first convolution
  TORCH_ARG(int64_t, conv2);   // channels of the second
  TORCH_ARG(int64_t, hidden);  // width of the first linear layer
  TORCH_ARG(int64_t, classes) = 10;
};

using CNNSize = NamedSize<CNNOptions>;

// nano, default.
const std::vector<CNNSize>& CNNSizes();
absl::StatusOr<CNNOptions> CNNSizeOptions(const std::string& size);

// Parameters and forward FLOPs of one 3x32x32 image (2 per multiply-add).
int64_t CNNParamCount(const CNNOptions& o);
double CNNForwardFlops(const CNNOptions& o);

class CNNImpl : public torch::nn::Module {
 public:
  explicit CNNImpl(const CNNOptions& o);
  // x: (N, 3, 32, 32) -> logits (N, classes).
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  PackableLinear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(CNN);

Family CNNFamily();

}  // namespace ltb
