#include "workloads/trainer.h"

#include <c10/core/GradMode.h>

#include "device/autocast.h"
#include "distributed/distributed.h"
#include "workloads/phases.h"

namespace ltb {

Trainer::Trainer(const BenchSpec& spec, TrainFns fns)
    : fns_(std::move(fns)), device_(spec.device), dtype_(spec.dtype) {
  optimizer_ = fns_.make_optimizer();
  if (dtype_ == c10::kHalf) scaler_.emplace();
  if (DataParallel* group = CurrentProcessGroup()) {
    // Every rank starts from rank 0's weights.
    torch::NoGradGuard no_grad;
    group->Broadcast(fns_.module->parameters());
  }
}

void Trainer::Step(const at::Tensor& batch) {
  c10::AutoGradMode grad(true);
  optimizer_->zero_grad();
  at::Tensor loss;
  {
    AutocastGuard autocast(device_, dtype_);
    loss = fns_.loss(batch);
  }
  (scaler_ ? scaler_->Scale(loss) : loss).backward();
  const std::vector<at::Tensor> params = fns_.module->parameters();
  if (DataParallel* group = CurrentProcessGroup()) group->AverageGradients(params);
  if (scaler_ && !scaler_->UnscaleAndCheck(params)) return;  // skipped: inf or nan
  optimizer_->step();
}

bool LossScaler::UnscaleAndCheck(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> checks;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    p.grad().mul_(1.0 / scale_);
    checks.push_back(p.grad().isfinite().all());
  }
  // One device sync for the whole check, not one per parameter.
  const bool finite = checks.empty() || at::stack(checks).all().item<bool>();
  if (!finite) {
    scale_ *= 0.5;
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2.0;
    good_steps_ = 0;
  }
  return true;
}

namespace {

class TrainStepWorkload final : public Workload {
 public:
  TrainStepWorkload(const BenchSpec& spec, TrainFns fns, at::Tensor batch)
      : trainer_(spec, std::move(fns)), batch_(std::move(batch)) {}
  void Step() override { trainer_.Step(batch_); }
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
