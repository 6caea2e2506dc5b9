// The phases every model family shares — forward, forward_backward and
// train_step — as one Workload over a model's forward and loss functions.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>

#include "harness/family.h"

namespace ltb {

// Phase names in the order they are registered.
extern const char kForward[];
extern const char kForwardBackward[];
extern const char kTrainStep[];

struct ModelFns {
  std::shared_ptr<torch::nn::Module> module;
  // Runs the model on its stored inputs.
  std::function<at::Tensor()> forward;
  // Turns the model's output into the scalar training loss.
  std::function<at::Tensor(const at::Tensor&)> loss;
  // The family's optimizer over module->parameters(); train_step only.
  std::function<std::unique_ptr<torch::optim::Optimizer>()> make_optimizer;
};

// Precision policy: `forward` runs a model whose weights were converted to
// spec.dtype; training phases keep fp32 weights and run forward and loss
// under autocast to spec.dtype (mixed precision), as training does in
// practice. PrepareModel applies the device and weight dtype accordingly.
void PrepareModel(torch::nn::Module& module, const BenchSpec& spec);

std::unique_ptr<Workload> MakePhaseWorkload(const BenchSpec& spec, ModelFns fns);

// RAII autocast for one device type; a no-op for fp32.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool active_ = false;
  bool was_enabled_ = false;
  c10::ScalarType old_dtype_ = c10::kFloat;
};

}  // namespace ltb
