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

#include "distributed/distributed.h"
#include "family/family.h"

namespace ltb {

struct TrainFns {
  std::shared_ptr<torch::nn::Module> module;
  // The scalar loss of a batch of samples (B, sample_tokens) on the device.
  std::function<at::Tensor(const at::Tensor& batch)> loss;
  std::function<std::unique_ptr<torch::optim::Optimizer>()> make_optimizer;
};

// GradScaler's dynamic loss scaling, with its fused kernels: multiply the
// loss by `scale`; unscale every gradient and look for inf or nan in one
// kernel (_amp_foreach_non_finite_check_and_unscale_); when one is found,
// skip the step and halve the scale; after `growth_interval` good steps in
// a row, double it (_amp_update_scale_, on the device). One host wait a
// step, for whether to skip, as GradScaler.step has.
class LossScaler {
 public:
  explicit LossScaler(const c10::Device& device = c10::Device(c10::kCPU),
                      double scale = 65536.0, int growth_interval = 2000);
  at::Tensor Scale(const at::Tensor& loss) const { return loss * scale_; }
  // Unscales the gradients; returns false (and backs off) when any is not
  // finite, in which case the caller skips the optimizer step.
  bool UnscaleAndCheck(const std::vector<at::Tensor>& params);
  double scale() const;  // reads the device: for tests and reports
  int64_t skipped() const { return skipped_; }

 private:
  at::Tensor scale_;           // 0-dim fp32 on the device
  at::Tensor growth_tracker_;  // 0-dim int32: good steps in a row
  at::Tensor found_inf_;       // 0-dim fp32
  int growth_interval_;
  int64_t skipped_ = 0;
};

// Every rank starts from rank 0's weights and buffers, takes rank 0's
// buffers again before each forward, and gradients are averaged over the
// ranks before the optimizer steps (Python DDP's defaults); fp16 gets a
// LossScaler.
class Trainer {
 public:
  Trainer(const BenchSpec& spec, TrainFns fns);
  // One optimizer step over `batch` (passed to fns.loss as it is);
  // `sync` false: without averaging the gradients over the ranks (no
  // communication), as Python DDP's no_sync().
  void Step(const at::Tensor& batch, bool sync = true);
  // Every rank's weights and buffers set to rank 0's again (after steps
  // without sync).
  void Resync();
  // Steps the scaler skipped (inf or nan in fp16); 0 without one.
  int64_t skipped() const { return scaler_ ? scaler_->skipped() : 0; }
  // The label's words for `skipped` of the measured steps skipped ("": none).
  static std::string SkippedCaveat(int64_t skipped);
  const torch::nn::Module& module() const { return *fns_.module; }
  // Data-parallel: how gradients are averaged over the ranks; else nullptr.
  const GradientSync* sync() const { return sync_.get(); }

 private:
  TrainFns fns_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<LossScaler> scaler_;
  std::unique_ptr<GradientSync> sync_;
  DataParallel* group_ = nullptr;    // data-parallel: the ranks' group
  std::vector<at::Tensor> buffers_;  // the module's, broadcast from rank 0
};

// train_step: one Trainer step over the same batch every time.
std::unique_ptr<Workload> MakeTrainStepWorkload(const BenchSpec& spec, TrainFns fns,
                                                const at::Tensor& batch);

}  // namespace ltb
