#include "models/cnn.h"

#include <torch/nn/functional/pooling.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "models/size_table.h"
#include "models/vision.h"
#include "workloads/phases.h"

namespace ltb {

const std::vector<CNNSize>& CNNSizes() {
  static const auto* sizes = new std::vector<CNNSize>{
      {"nano", CNNOptions(16, 32, 128), 268'650},
      {"default", CNNOptions(32, 64, 512), 2'122'186},
  };
  return *sizes;
}

absl::StatusOr<CNNOptions> CNNSizeOptions(const std::string& size) {
  return FindSize("CNN", CNNSizes(), size, &CNNSize::options);
}

int64_t CNNParamCount(const CNNOptions& o) {
  return (3 * 9 + 1) * o.conv1() + (o.conv1() * 9 + 1) * o.conv2() +
         (o.conv2() * 8 * 8 + 1) * o.hidden() + (o.hidden() + 1) * o.classes();
}

double CNNForwardFlops(const CNNOptions& o) {
  return 2.0 * 32 * 32 * 3 * o.conv1() * 9 + 2.0 * 16 * 16 * o.conv1() * o.conv2() * 9 +
         2.0 * o.conv2() * 8 * 8 * o.hidden() + 2.0 * o.hidden() * o.classes();
}

CNNImpl::CNNImpl(const CNNOptions& o)
    : conv1(register_module(
          "conv1",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(3, o.conv1(), 3).padding(1)))),
      conv2(register_module(
          "conv2", torch::nn::Conv2d(
                       torch::nn::Conv2dOptions(o.conv1(), o.conv2(), 3).padding(1)))),
      fc1(register_module("fc1", PackableLinear(o.conv2() * 8 * 8, o.hidden()))),
      fc2(register_module("fc2", PackableLinear(o.hidden(), o.classes()))) {}

at::Tensor CNNImpl::forward(const at::Tensor& x) {
  namespace F = torch::nn::functional;
  const auto pool = F::MaxPool2dFuncOptions(2);
  at::Tensor y = F::max_pool2d(torch::relu(conv1(x)), pool);  // (N, c1, 16, 16)
  y = F::max_pool2d(torch::relu(conv2(y)), pool);             // (N, c2, 8, 8)
  return fc2(torch::relu(fc1(y.flatten(1))));                 // (N, classes)
}

// CIFAR-10's images, and the learning rate of its SGD.
constexpr int64_t kCNNImage = 32;
constexpr double kCNNLr = 0.1;

Family CNNFamily() {
  Family f = ClassifierFamily<CNN, CNNOptions>(
      "CNN", CNNSizes(), ClassifierShape{3, kCNNImage, 10}, kCNNLr,
      [](const CNNOptions& o) {
        // Conv, ReLU and pool outputs of both stages, then the hidden layer.
        return ClassifierCost{
            CNNParamCount(o), CNNForwardFlops(o),
            3 * (o.conv1() * 32 * 32 + o.conv2() * 16 * 16) + 2 * o.hidden(),
            InferenceLiveSet(3 * 32 * 32, std::max({o.conv1() * 32 * 32,
                                                    o.conv2() * 16 * 16, o.hidden()}))};
      },
      [](const CNNOptions& o) {
        return nlohmann::ordered_json{{"conv1", o.conv1()},
                                      {"conv2", o.conv2()},
                                      {"hidden", o.hidden()},
                                      {"classes", o.classes()}};
      });
  f.suite = {"default/"};
  f.default_batch = 128;
  return f;
}
LTB_REGISTER_FAMILY(CNNFamily, 50);

}  // namespace ltb
