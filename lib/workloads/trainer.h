// One optimizer step over a batch, as the training phases over token batches
// (train_step, train_epoch) take it: forward and loss under autocast,
// dynamic loss scaling for fp16, gradients averaged over data-parallel
// ranks, then the optimizer step.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "family/family.h"

namespace ltb {

struct TrainFns {
  std::shared_ptr<torch::nn::Module> module;
  // The scalar loss of a batch of samples (B, sample_tokens) on the device.
  std::function<at::Tensor(const at::Tensor& batch)> loss;
  std::function<std::unique_ptr<torch::optim::Optimizer>()> make_optimizer;
};

// GradScaler's dynamic loss scaling: multiply the loss by `scale`; when a
// gradient is inf or nan, skip the step and halve the scale; after
// `growth_interval` good steps in a row, double it.
class LossScaler {
 public:
  explicit LossScaler(double scale = 65536.0, int growth_interval = 2000)
      : scale_(scale), growth_interval_(growth_interval) {}
  at::Tensor Scale(const at::Tensor& loss) const { return loss * scale_; }
  // Unscales the gradients; returns false (and backs off) when any is not
  // finite, in which case the caller skips the optimizer step.
  bool UnscaleAndCheck(const std::vector<at::Tensor>& params);
  double scale() const { return scale_; }
  int64_t skipped() const { return skipped_; }

 private:
  double scale_;
  int growth_interval_;
  int good_steps_ = 0;
  int64_t skipped_ = 0;
};

// Every rank starts from rank 0's weights; fp16 gets a LossScaler.
class Trainer {
 public:
  Trainer(const BenchSpec& spec, TrainFns fns);
  void Step(const at::Tensor& batch);
  const torch::nn::Module& module() const { return *fns_.module; }

 private:
  TrainFns fns_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<LossScaler> scaler_;
};

// train_step: one Trainer step over the same batch every time.
std::unique_ptr<Workload> MakeTrainStepWorkload(const BenchSpec& spec, TrainFns fns,
                                                const at::Tensor& batch);

}  // namespace ltb
