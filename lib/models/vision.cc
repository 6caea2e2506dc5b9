#include "models/vision.h"

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"
#include "layers/prepare.h"
#include "workloads/optimizers.h"
#include "workloads/phases.h"

namespace ltb {

std::unique_ptr<Workload> BuildClassifier(
    const BenchSpec& spec, std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward, const ClassifierShape& shape,
    double lr) {
  PrepareModel(*module, spec);
  const auto memory_format =
      spec.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  if (spec.channels_last) {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : module->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(memory_format));
    }
  }
  const at::Tensor images =
      RandomInput({spec.batch, shape.channels, shape.image, shape.image}, spec)
          .contiguous(memory_format);
  const at::Tensor labels = torch::randint(
      0, shape.classes, {spec.batch}, torch::dtype(torch::kLong).device(spec.device));
  ModelFns fns;
  fns.module = module;
  fns.forward = [forward, images]() { return forward(images); };
  fns.inputs = images;
  fns.forward_on = forward;
  fns.loss = [labels](const at::Tensor& logits) {
    return torch::nn::functional::cross_entropy(logits.to(at::kFloat), labels);
  };
  fns.make_optimizer = [module, lr, device = spec.device]() {
    return MakeSGD(device, module->parameters(),
                   torch::optim::SGDOptions(lr).momentum(0.9));
  };
  return MakePhaseWorkload(spec, std::move(fns));
}

absl::StatusOr<Plan> PlanClassifier(const BenchSpec& spec, const ClassifierCost& cost) {
  const int64_t params = cost.params, activations_per_image = cost.activations;
  const double forward_flops_per_image = cost.flops;
  if (spec.batch <= 0) return absl::InvalidArgumentError("batch must be positive");
  Plan plan;
  plan.params = params;
  plan.samples_per_step = spec.batch;
  plan.count_beyond_arithmetic = kDirectConvolutionCount;  // CNN and ResNet
  const double fwd = forward_flops_per_image * spec.batch;
  MemoryEstimate& m = plan.memory;
  if (!spec.training()) {
    const int64_t e = DtypeBytes(spec.dtype);
    plan.flops_per_step = fwd;
    m.weights = params * e;
    m.activations = spec.batch * cost.inference_activations * e;
    return plan;
  }
  const int64_t e = spec.dtype == c10::kFloat ? 4 : 2;
  plan.flops_per_step = 3 * fwd;
  m = TrainingState(params, spec.dtype, 1);  // SGD's momentum
  m.activations =
      spec.batch * activations_per_image * e * 2;  // outputs and their gradients
  return plan;
}

}  // namespace ltb
