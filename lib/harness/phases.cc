#include "harness/phases.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include "absl/strings/str_cat.h"

namespace ltb {

const char kForward[] = "forward";
const char kForwardBackward[] = "forward_backward";
const char kTrainStep[] = "train_step";

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype)
    : device_(device) {
  if (dtype == c10::kFloat) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(device_);
  old_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // As Python's autocast does: the cast-weight cache lives for the
  // outermost region only.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, was_enabled_);
  at::autocast::set_autocast_dtype(device_, old_dtype_);
}

void PrepareModel(torch::nn::Module& module, const BenchSpec& spec) {
  if (spec.phase == kForward) {
    module.to(spec.device, spec.dtype);
    module.eval();
  } else {
    module.to(spec.device, c10::kFloat);
    module.train();
  }
}

namespace {

class ForwardWorkload final : public Workload {
 public:
  explicit ForwardWorkload(ModelFns fns) : fns_(std::move(fns)) {}
  void Step() override {
    c10::InferenceMode guard;
    fns_.forward();
  }

 private:
  ModelFns fns_;
};

class TrainWorkload final : public Workload {
 public:
  TrainWorkload(const BenchSpec& spec, ModelFns fns, bool step_optimizer)
      : fns_(std::move(fns)), device_(spec.device.type()), dtype_(spec.dtype) {
    if (step_optimizer) optimizer_ = fns_.make_optimizer();
  }

  void Step() override {
    c10::AutoGradMode grad(true);
    if (optimizer_) {
      optimizer_->zero_grad();
    } else {
      fns_.module->zero_grad();
    }
    at::Tensor loss;
    {
      AutocastGuard autocast(device_, dtype_);
      loss = fns_.loss(fns_.forward());
    }
    loss.backward();
    if (optimizer_) optimizer_->step();
  }

 private:
  ModelFns fns_;
  c10::DeviceType device_;
  c10::ScalarType dtype_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

std::unique_ptr<Workload> MakePhaseWorkload(const BenchSpec& spec, ModelFns fns) {
  if (spec.phase == kForward) return std::make_unique<ForwardWorkload>(std::move(fns));
  if (spec.phase == kForwardBackward) {
    return std::make_unique<TrainWorkload>(spec, std::move(fns), false);
  }
  if (spec.phase == kTrainStep) {
    return std::make_unique<TrainWorkload>(spec, std::move(fns), true);
  }
  TORCH_CHECK(false, "unknown phase '", spec.phase,
              "'; valid: forward, forward_backward, train_step");
}

}  // namespace ltb
