// What the image-classification families (ResNet, CNN) share: random images
// and labels, cross-entropy, SGD with momentum, the channels_last option,
// and the plan of a phase from the model's size and activations.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "family/family.h"

namespace ltb {

struct ClassifierShape {
  int64_t channels = 3;
  int64_t image = 224;  // square images, image x image
  int64_t classes = 1000;
};

// forward (eval mode) and train_step (SGD, momentum 0.9, `lr`) over random
// images; weights and inputs channels_last when the spec says so.
std::unique_ptr<Workload> BuildClassifier(
    const BenchSpec& spec, std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward, const ClassifierShape& shape,
    double lr);

// The plan of a classifier phase: samples/s, FLOPs (training: 3x forward),
// memory from `activations_per_image`, the elements one image's forward
// produces in the layers that keep their outputs for backward.
absl::StatusOr<Plan> PlanClassifier(const BenchSpec& spec, int64_t params,
                                    double forward_flops_per_image,
                                    int64_t activations_per_image);

}  // namespace ltb
