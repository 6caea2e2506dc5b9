#include "workloads/trainer.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/interrupt.h"
#include "device/autocast.h"
#include "device/timer.h"
#include "distributed/distributed.h"

namespace ltb {

Trainer::Trainer(const BenchSpec& spec, TrainFns fns)
    : fns_(std::move(fns)), device_(spec.device), dtype_(spec.dtype) {
  optimizer_ = fns_.make_optimizer();
  if (dtype_ == c10::kHalf) scaler_.emplace(device_);
  if (DataParallel* group = CurrentProcessGroup()) {
    group_ = group;
    buffers_ = fns_.module->buffers();
    Resync();  // every rank starts from rank 0's weights and buffers
    sync_ = group->SyncGradients(fns_.module->parameters(), spec.bucket_mb << 20);
  }
}

void Trainer::Resync() {
  if (group_ == nullptr) return;
  torch::NoGradGuard no_grad;
  // As Python DDP's _sync_module_states: the parameters, then the buffers.
  std::vector<at::Tensor> states = fns_.module->parameters();
  states.insert(states.end(), buffers_.begin(), buffers_.end());
  group_->Broadcast(states);
}

void Trainer::Step(const at::Tensor& batch, bool sync) {
  GradientSync* grads = sync ? sync_.get() : nullptr;
  c10::AutoGradMode grad(true);
  // Gradients set to none, as Python's zero_grad() does by default (LibTorch's
  // detaches them in place first, which a data-parallel bucket's view
  // forbids).
  for (at::Tensor& p : fns_.module->parameters()) p.mutable_grad().reset();
  if (grads) {
    grads->BeforeForward();
    // Rank 0's buffers (BatchNorm's running statistics, ...) before each
    // forward that averages gradients. Python DDP (broadcast_buffers, its
    // default) broadcasts before each forward that follows an averaging one:
    // the same in a run of averaging steps; here the traffic belongs to the
    // averaging step, so that comm_exposed_ms (averaging steps against
    // no_sync ones) counts it.
    if (!buffers_.empty()) {
      torch::NoGradGuard no_grad;
      group_->Broadcast(buffers_);
    }
  }
  at::Tensor loss;
  {
    AutocastGuard autocast(device_, dtype_);
    loss = fns_.loss(batch);
  }
  if (grads) grads->BeforeBackward();
  (scaler_ ? scaler_->Scale(loss) : loss).backward();
  if (grads) grads->AfterBackward();  // the gradients are the ranks' mean
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

std::string Trainer::SkippedCaveat(int64_t skipped) {
  if (skipped <= 0) return {};
  return absl::StrCat(skipped,
                      " of the measured steps skipped the optimizer: fp16's loss "
                      "scaler found gradients that are not finite (and lowered its "
                      "scale), so those steps changed no weight");
}

namespace {

// Pairs of steps, with and without gradient averaging, timed after the
// measured steps for comm_exposed_ms.
constexpr int kExposedPairs = 5;

class TrainStepWorkload final : public Workload {
 public:
  TrainStepWorkload(const BenchSpec& spec, TrainFns fns, at::Tensor batch)
      : trainer_(spec, std::move(fns)), batch_(std::move(batch)), device_(spec.device) {}
  void Step() override { trainer_.Step(batch_); }
  void ResetStats() override {
    exposed_ms_ = -1;
    skipped_ = 0;
  }
  void BeginMeasurement() override { skipped_from_ = trainer_.skipped(); }
  std::string Caveat() const override { return Trainer::SkippedCaveat(skipped_); }

  // Data-parallel: what communication adds to a step, measured after the
  // timed steps as the median difference between a step and the same step
  // without averaging (no communication), in alternating pairs; then every
  // rank takes rank 0's weights again. Every rank does it (no collective
  // runs in the steps without averaging, so none can wait on another).
  void EndMeasurement() override {
    skipped_ = trainer_.skipped() - skipped_from_;  // before the steps below
    if (trainer_.sync() == nullptr || StopRequested()) return;
    StepTimer timer(device_, /*sync=*/true);
    std::vector<double> differences;
    for (int i = 0; i < kExposedPairs; ++i) {
      double seconds[2];
      for (const bool sync : {true, false}) {
        timer.Start();
        trainer_.Step(batch_, sync);
        seconds[sync ? 0 : 1] = timer.Stop();
      }
      differences.push_back(seconds[0] - seconds[1]);
    }
    std::sort(differences.begin(), differences.end());
    exposed_ms_ = differences[differences.size() / 2] * 1e3;
    trainer_.Resync();
  }

  std::vector<std::pair<std::string, double>> Counters() const override {
    if (trainer_.sync() == nullptr) return {};
    std::vector<std::pair<std::string, double>> c = {
        {"grad_buckets", static_cast<double>(trainer_.sync()->Buckets())}};
    if (exposed_ms_ != -1) c.emplace_back("comm_exposed_ms", exposed_ms_);
    return c;
  }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(trainer_.module());
  }

 private:
  Trainer trainer_;
  at::Tensor batch_;
  c10::Device device_;
  double exposed_ms_ = -1;
  int64_t skipped_from_ = 0, skipped_ = 0;  // the scaler's, over the measured steps
};

}  // namespace

std::unique_ptr<Workload> MakeTrainStepWorkload(const BenchSpec& spec, TrainFns fns,
                                                const at::Tensor& batch) {
  return std::make_unique<TrainStepWorkload>(spec, std::move(fns), batch);
}

}  // namespace ltb
