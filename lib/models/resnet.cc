#include "models/resnet.h"

#include <torch/nn/functional/pooling.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "models/size_table.h"
#include "models/vision.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

int64_t Expansion(bool bottleneck) { return bottleneck ? 4 : 1; }

int64_t OutSize(int64_t in, int64_t k, int64_t stride, int64_t pad) {
  return (in + 2 * pad - k) / stride + 1;
}

}  // namespace

const std::vector<ResNetSize>& ResNetSizes() {
  static const auto* sizes = new std::vector<ResNetSize>{
      {"nano",
       ResNetOptions(/*bottleneck=*/false, {1, 1, 1, 1})
           .widths({16, 32, 64, 128})
           .stem(16),
       438'456},
      {"resnet18", ResNetOptions(/*bottleneck=*/false, {2, 2, 2, 2}), 11'689'512},
      {"resnet50", ResNetOptions(/*bottleneck=*/true, {3, 4, 6, 3}), 25'557'032},
  };
  return *sizes;
}

absl::StatusOr<ResNetOptions> ResNetSizeOptions(const std::string& size) {
  return FindSize("ResNet", ResNetSizes(), size, &ResNetSize::options);
}

ClassifierCost ResNetCostFor(const ResNetOptions& o, int64_t image) {
  ClassifierCost cost;
  int64_t hw = image, largest = 0;
  // A convolution without bias followed by batch norm (2 parameters a channel).
  const auto conv = [&](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
    hw = OutSize(hw, k, stride, pad);
    cost.params += in * out * k * k + 2 * out;
    cost.flops += 2.0 * in * out * k * k * hw * hw;
    cost.activations += 3 * out * hw * hw;
    largest = std::max(largest, out * hw * hw);
  };
  conv(3, o.stem(), 7, 2, 3);
  hw = OutSize(hw, 3, 2, 1);  // max pool
  int64_t in = o.stem();
  const int64_t e = Expansion(o.bottleneck());
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = o.widths()[stage];
    for (int64_t b = 0; b < o.blocks()[stage]; ++b) {
      const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
      const int64_t block_in_hw = hw;
      if (o.bottleneck()) {
        conv(in, planes, 1, 1, 0);
        conv(planes, planes, 3, stride, 1);
        conv(planes, planes * e, 1, 1, 0);
      } else {
        conv(in, planes, 3, stride, 1);
        conv(planes, planes, 3, 1, 1);
      }
      if (stride != 1 || in != planes * e) {
        const int64_t out_hw = hw;
        hw = block_in_hw;
        conv(in, planes * e, 1, stride, 0);
        hw = out_hw;
      }
      in = planes * e;
    }
  }
  cost.params += in * o.classes() + o.classes();
  cost.flops += 2.0 * in * o.classes();
  cost.inference_activations = InferenceLiveSet(3 * image * image, largest);
  return cost;
}

ResNetBlockImpl::ResNetBlockImpl(bool bottleneck, int64_t in, int64_t planes,
                                 int64_t stride) {
  const int64_t out = planes * Expansion(bottleneck);
  if (bottleneck) {
    conv1 = register_module("conv1", Conv(in, planes, 1, 1, 0));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", Conv(planes, planes, 3, stride, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
    conv3 = register_module("conv3", Conv(planes, out, 1, 1, 0));
    bn3 = register_module("bn3", torch::nn::BatchNorm2d(out));
  } else {
    conv1 = register_module("conv1", Conv(in, planes, 3, stride, 1));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", Conv(planes, planes, 3, 1, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  }
  if (stride != 1 || in != out) {
    downsample = register_module(
        "downsample",
        torch::nn::Sequential(Conv(in, out, 1, stride, 0), torch::nn::BatchNorm2d(out)));
  }
}

at::Tensor ResNetBlockImpl::forward(const at::Tensor& x) {
  at::Tensor y = torch::relu(bn1(conv1(x)));
  if (conv3) {
    y = bn3(conv3(torch::relu(bn2(conv2(y)))));
  } else {
    y = bn2(conv2(y));
  }
  return torch::relu(y + (downsample ? downsample->forward(x) : x));
}

ResNetImpl::ResNetImpl(const ResNetOptions& o)
    : conv1(register_module("conv1", Conv(3, o.stem(), 7, 2, 3))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(o.stem()))) {
  int64_t in = o.stem();
  torch::nn::Sequential* stages[] = {&layer1, &layer2, &layer3, &layer4};
  for (int stage = 0; stage < 4; ++stage) {
    torch::nn::Sequential seq;
    for (int64_t b = 0; b < o.blocks()[stage]; ++b) {
      const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
      seq->push_back(ResNetBlock(o.bottleneck(), in, o.widths()[stage], stride));
      in = o.widths()[stage] * Expansion(o.bottleneck());
    }
    *stages[stage] = register_module(absl::StrCat("layer", stage + 1), seq);
  }
  fc = register_module("fc", PackableLinear(in, o.classes()));
}

at::Tensor ResNetImpl::forward(const at::Tensor& x) {
  namespace F = torch::nn::functional;
  at::Tensor y = torch::relu(bn1(conv1(x)));  // (N, stem, H/2, W/2)
  y = F::max_pool2d(y, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
  y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
  y = F::adaptive_avg_pool2d(y, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);  // (N, C)
  return fc(y);
}

// ImageNet's images and the learning rate of torchvision's ResNet recipe.
constexpr int64_t kResNetImage = 224;
constexpr double kResNetLr = 0.1;

Family ResNetFamily() {
  Family f = ClassifierFamily<ResNet, ResNetOptions>(
      "ResNet", ResNetSizes(), ClassifierShape{3, kResNetImage, 1000}, kResNetLr,
      [](const ResNetOptions& o) { return ResNetCostFor(o, kResNetImage); },
      [](const ResNetOptions& o) {
        return nlohmann::ordered_json{{"bottleneck", o.bottleneck()},
                                      {"blocks", o.blocks()},
                                      {"widths", o.widths()},
                                      {"stem", o.stem()},
                                      {"classes", o.classes()}};
      });
  f.suite = {"resnet18/"};
  f.default_batch = 32;
  f.suite_cpu_batch = 4;
  return f;
}
LTB_REGISTER_FAMILY(ResNetFamily, 40);

}  // namespace ltb
