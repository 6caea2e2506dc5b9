#include "workloads/trainer.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <map>

#include "device/autocast.h"
#include "distributed/distributed.h"

namespace ltb {

Trainer::Trainer(const BenchSpec& spec, TrainFns fns)
    : fns_(std::move(fns)), device_(spec.device), dtype_(spec.dtype) {
  optimizer_ = fns_.make_optimizer();
  if (dtype_ == c10::kHalf) scaler_.emplace(device_);
  if (DataParallel* group = CurrentProcessGroup()) {
    // Every rank starts from rank 0's weights.
    {
      torch::NoGradGuard no_grad;
      group->Broadcast(fns_.module->parameters());
    }
    sync_ = group->SyncGradients(fns_.module->parameters(), kDefaultBucketBytes);
  }
}

void Trainer::Step(const at::Tensor& batch) {
  c10::AutoGradMode grad(true);
  // Gradients set to none, as Python's zero_grad() does by default (LibTorch's
  // detaches them in place first, which a data-parallel bucket's view
  // forbids).
  for (at::Tensor& p : fns_.module->parameters()) p.mutable_grad().reset();
  if (sync_) sync_->BeforeForward();
  at::Tensor loss;
  {
    AutocastGuard autocast(device_, dtype_);
    loss = fns_.loss(batch);
  }
  if (sync_) sync_->BeforeBackward();
  (scaler_ ? scaler_->Scale(loss) : loss).backward();
  if (sync_) sync_->AfterBackward();  // the gradients are the ranks' mean
  const std::vector<at::Tensor> params = fns_.module->parameters();
  if (scaler_ && !scaler_->UnscaleAndCheck(params)) return;  // skipped: inf or nan
  optimizer_->step();
}

LossScaler::LossScaler(const c10::Device& device, double scale, int growth_interval)
    : scale_(at::full({}, scale, at::TensorOptions(at::kFloat).device(device))),
      growth_tracker_(at::zeros({}, at::TensorOptions(at::kInt).device(device))),
      found_inf_(at::zeros({}, at::TensorOptions(at::kFloat).device(device))),
      growth_interval_(growth_interval) {}

double LossScaler::scale() const { return scale_.item<double>(); }

bool LossScaler::UnscaleAndCheck(const std::vector<at::Tensor>& params) {
  c10::NoGradGuard no_grad;
  found_inf_.zero_();
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // One fused kernel per gradient dtype, as GradScaler groups them.
  std::map<c10::ScalarType, std::vector<at::Tensor>> grads;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) grads[p.grad().scalar_type()].push_back(p.grad());
  }
  for (auto& [dtype, group] : grads) {
    at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf_, inv_scale);
  }
  const bool finite = found_inf_.item<float>() == 0;  // the step's one host wait
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, /*growth_factor=*/2.0,
                         /*backoff_factor=*/0.5, growth_interval_);
  if (!finite) ++skipped_;
  return finite;
}

namespace {

class TrainStepWorkload final : public Workload {
 public:
  TrainStepWorkload(const BenchSpec& spec, TrainFns fns, at::Tensor batch)
      : trainer_(spec, std::move(fns)), batch_(std::move(batch)) {}
  void Step() override { trainer_.Step(batch_); }
  std::vector<std::pair<std::string, double>> Counters() const override {
    if (trainer_.sync() == nullptr) return {};
    return {{"grad_buckets", static_cast<double>(trainer_.sync()->Buckets())}};
  }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(trainer_.module());
  }

 private:
  Trainer trainer_;
  at::Tensor batch_;
};

}  // namespace

std::unique_ptr<Workload> MakeTrainStepWorkload(const BenchSpec& spec, TrainFns fns,
                                                const at::Tensor& batch) {
  return std::make_unique<TrainStepWorkload>(spec, std::move(fns), batch);
}

}  // namespace ltb
