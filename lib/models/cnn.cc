#include "models/cnn.h"

#include <torch/nn/functional/pooling.h>

#include "absl/strings/str_cat.h"
#include "harness/phases.h"
#include "models/size_table.h"
#include "models/vision.h"

namespace ltb {

const std::vector<CNNSize>& CNNSizes() {
  static const auto* sizes = new std::vector<CNNSize>{
      {"nano", {16, 32, 128, 10}, 268'650},
      {"default", {32, 64, 512, 10}, 2'122'186},
  };
  return *sizes;
}

absl::StatusOr<CNNConfig> CNNSizeConfig(const std::string& size) {
  return FindSize("CNN", CNNSizes(), size, &CNNSize::config);
}

int64_t CNNParamCount(const CNNConfig& c) {
  return (3 * 9 + 1) * c.conv1 + (c.conv1 * 9 + 1) * c.conv2 +
         (c.conv2 * 8 * 8 + 1) * c.hidden + (c.hidden + 1) * c.classes;
}

double CNNForwardFlops(const CNNConfig& c) {
  return 2.0 * 32 * 32 * 3 * c.conv1 * 9 + 2.0 * 16 * 16 * c.conv1 * c.conv2 * 9 +
         2.0 * c.conv2 * 8 * 8 * c.hidden + 2.0 * c.hidden * c.classes;
}

CNNImpl::CNNImpl(const CNNConfig& c)
    : conv1(register_module(
          "conv1",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(3, c.conv1, 3).padding(1)))),
      conv2(register_module(
          "conv2",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(c.conv1, c.conv2, 3).padding(1)))),
      fc1(register_module("fc1", torch::nn::Linear(c.conv2 * 8 * 8, c.hidden))),
      fc2(register_module("fc2", torch::nn::Linear(c.hidden, c.classes))) {}

at::Tensor CNNImpl::forward(const at::Tensor& x) {
  namespace F = torch::nn::functional;
  const auto pool = F::MaxPool2dFuncOptions(2);
  at::Tensor y = F::max_pool2d(torch::relu(conv1(x)), pool);  // (N, c1, 16, 16)
  y = F::max_pool2d(torch::relu(conv2(y)), pool);             // (N, c2, 8, 8)
  return fc2(torch::relu(fc1(y.flatten(1))));                 // (N, classes)
}

Family CNNFamily() {
  Family f;
  f.name = "CNN";
  for (const CNNSize& s : CNNSizes()) {
    f.sizes.push_back(s.name);
    for (const char* phase : {kForward, kTrainStep}) {
      f.cases.push_back({s.name, phase, true, Shape::kBatch});
    }
  }
  f.phases = {kForward, kTrainStep};
  f.suite = {"default/"};
  f.default_batch = 128;
  f.sweeps_memory_format = true;
  f.plan = [](const BenchSpec& s) -> absl::StatusOr<Plan> {
    absl::StatusOr<CNNConfig> c = CNNSizeConfig(s.size);
    if (!c.ok()) return c.status();
    // Conv, ReLU and pool outputs of both stages, then the hidden layer.
    const int64_t activations =
        3 * (c->conv1 * 32 * 32 + c->conv2 * 16 * 16) + 2 * c->hidden;
    return PlanClassifier(s, CNNParamCount(*c), CNNForwardFlops(*c), activations);
  };
  f.build = [](const BenchSpec& s) {
    CNN model(CNNSizeConfig(s.size).value());
    return BuildClassifier(
        s, model.ptr(), [model](const at::Tensor& x) mutable { return model(x); },
        ClassifierShape{3, 32, 10}, 0.1);
  };
  return f;
}

}  // namespace ltb
