// The ResNet family (shared/MODELS.md, "ResNet"): torchvision's ResNet —
// 7x7 stem, batch norm, BasicBlock or Bottleneck stages, 1000 classes —
// with torchvision's parameter names.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "layers/packed_linear.h"
#include "models/size_table.h"
#include "models/vision.h"

namespace ltb {

// One number per stage.
using ResNetStages = std::array<int64_t, 4>;

// As torchvision's ResNet(block, layers): the block type and the blocks per
// stage are required.
struct ResNetOptions {
  ResNetOptions(bool bottleneck, ResNetStages blocks)
      : bottleneck_(bottleneck), blocks_(blocks) {}
  TORCH_ARG(bool, bottleneck);  // Bottleneck (expansion 4) or BasicBlock
  TORCH_ARG(ResNetStages, blocks);
  TORCH_ARG(ResNetStages, widths) = {64, 128, 256, 512};
  TORCH_ARG(int64_t, stem) = 64;  // channels of the 7x7 stem
  TORCH_ARG(int64_t, classes) = 1000;
};

using ResNetSize = NamedSize<ResNetOptions>;

// nano, resnet18, resnet50.
const std::vector<ResNetSize>& ResNetSizes();
absl::StatusOr<ResNetOptions> ResNetSizeOptions(const std::string& size);

// What one image of `image` x `image` costs: parameters, forward FLOPs of
// the convolutions and the classifier, and the elements of the convolution
// outputs (each kept with its batch norm and ReLU outputs).
ClassifierCost ResNetCostFor(const ResNetOptions& o, int64_t image);

class ResNetBlockImpl : public torch::nn::Module {
 public:
  ResNetBlockImpl(bool bottleneck, int64_t in, int64_t planes, int64_t stride);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(ResNetBlock);

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& o);
  // x: (N, 3, H, W) -> logits (N, classes).
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr},
      layer4{nullptr};
  PackableLinear fc{nullptr};
};
TORCH_MODULE(ResNet);

Family ResNetFamily();

}  // namespace ltb
