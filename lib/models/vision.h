// What the image-classification families (ResNet, CNN) share: random images
// and labels, cross-entropy, SGD with momentum, the channels_last option,
// the plan of a phase from the model's size and activations, and the family
// itself over a size table.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "models/size_table.h"
#include "workloads/phases.h"

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

// What one image costs a classifier: parameters, forward FLOPs (2 per
// multiply-add), the elements of the outputs its layers keep for backward,
// and the most elements an inference forward holds at once.
struct ClassifierCost {
  int64_t params = 0;
  double flops = 0;
  int64_t activations = 0;
  int64_t inference_activations = 0;
};

// The live set of an inference forward, in elements an image: the image and
// five outputs of the largest layer. A C++ expression keeps its temporaries
// to its end (a convolution's, its norm's and its ReLU's outputs), and a
// residual block holds its input and output beside its shortcut's
// convolution and norm: ResNet/resnet18 held its image and three outputs of
// its stem, resnet50 about 4.3 outputs of its largest layer.
inline int64_t InferenceLiveSet(int64_t image_elements, int64_t largest_output) {
  return image_elements + 5 * largest_output;
}

// The plan of a classifier phase: samples/s, FLOPs (training: 3x forward),
// memory from `cost`'s activations (training) or its inference live set.
absl::StatusOr<Plan> PlanClassifier(const BenchSpec& spec, const ClassifierCost& cost);

// A classifier family named `name` over `sizes`: forward and train_step of a
// `Model` built from each size's options, over random images of `shape`
// (SGD at `lr`), planned from `cost`, its size cards from `card`. The caller
// sets the default suite and batch.
template <typename Model, typename Options>
Family ClassifierFamily(const std::string& name,
                        const std::vector<NamedSize<Options>>& sizes,
                        const ClassifierShape& shape, double lr,
                        std::function<ClassifierCost(const Options&)> cost,
                        std::function<nlohmann::ordered_json(const Options&)> card) {
  const auto options = [name, &sizes](const std::string& size) {
    return FindSize(name, sizes, size, &NamedSize<Options>::options);
  };
  Family f;
  f.name = name;
  f.serves = true;
  for (const NamedSize<Options>& s : sizes) f.sizes.push_back(s.name);
  f.phases = {ForwardPhase(Shape::kBatch), TrainStepPhase(Shape::kBatch)};
  f.packs_cpu_linears = true;
  f.sweeps_memory_format = true;
  f.plan = [options, cost](const BenchSpec& s) -> absl::StatusOr<Plan> {
    absl::StatusOr<Options> o = options(s.size);
    if (!o.ok()) return o.status();
    const ClassifierCost c = cost(*o);
    return PlanClassifier(s, c);
  };
  f.build = [options, shape, lr](const BenchSpec& s) {
    Model model(options(s.size).value());
    return BuildClassifier(
        s, model.ptr(), [model](const at::Tensor& x) mutable { return model(x); }, shape,
        lr);
  };
  f.size_cards = [&sizes, card] { return SizeCards(sizes, card); };
  f.constants = {{"image", static_cast<double>(shape.image)}, {"lr", lr}};
  return f;
}

}  // namespace ltb
