#include "harness/phases.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/randn.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "harness/packed_linear.h"
#include "harness/torch_compat.h"

namespace ltb {

const char kForward[] = "forward";
const char kForwardBackward[] = "forward_backward";
const char kTrainStep[] = "train_step";
const char kTrainEpoch[] = "train_epoch";
const char kGenerate[] = "generate";

Phase ForwardPhase(Shape shape) { return {kForward, PhaseKind::kInference, shape}; }
Phase ForwardBackwardPhase(Shape shape) {
  return {kForwardBackward, PhaseKind::kTraining, shape};
}
Phase TrainStepPhase(Shape shape) {
  return {kTrainStep, PhaseKind::kTraining, shape, Iterations::kTimed, true};
}
Phase TrainEpochPhase() {
  return {kTrainEpoch, PhaseKind::kTraining, Shape::kSequence, Iterations::kEpochs, true};
}
Phase GeneratePhase() { return {kGenerate, PhaseKind::kInference, Shape::kGenerate}; }

namespace {

#if LTB_HAS_DEVICE_AUTOCAST
bool AutocastEnabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
c10::ScalarType AutocastDtype(c10::DeviceType d) {
  return at::autocast::get_autocast_dtype(d);
}
void SetAutocast(c10::DeviceType d, bool enabled, c10::ScalarType dtype) {
  at::autocast::set_autocast_enabled(d, enabled);
  at::autocast::set_autocast_dtype(d, dtype);
}
#else
// Before LibTorch 2.4, autocast has one set of functions for CPU and one for
// CUDA, and none for other devices.
void CheckLegacyAutocast(c10::DeviceType d) {
  TORCH_CHECK(d == c10::kCPU || d == c10::kCUDA, "mixed precision on ", d,
              " needs LibTorch 2.4 or newer; this one is " TORCH_VERSION);
}
bool AutocastEnabled(c10::DeviceType d) {
  CheckLegacyAutocast(d);
  return d == c10::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
c10::ScalarType AutocastDtype(c10::DeviceType d) {
  return d == c10::kCPU ? at::autocast::get_autocast_cpu_dtype()
                        : at::autocast::get_autocast_gpu_dtype();
}
void SetAutocast(c10::DeviceType d, bool enabled, c10::ScalarType dtype) {
  if (d == c10::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype)
    : device_(device) {
  if (dtype == c10::kFloat) return;
  was_enabled_ = AutocastEnabled(device_);
  old_dtype_ = AutocastDtype(device_);
  active_ = true;
  SetAutocast(device_, true, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // As Python's autocast does: the cast-weight cache lives for the
  // outermost region only.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocast(device_, was_enabled_, old_dtype_);
}

void PrepareModel(torch::nn::Module& module, const BenchSpec& spec) {
  if (!spec.training()) {
    module.to(spec.device, spec.dtype);
    module.eval();
    if (spec.pack_cpu_linears) {
      absl::StatusOr<int> packed = PackLinears(module, spec.device, spec.dtype);
      if (!packed.ok()) throw std::runtime_error(std::string(packed.status().message()));
    }
  } else {
    module.to(spec.device, c10::kFloat);
    module.train();
  }
}

c10::ScalarType InputDtype(const BenchSpec& spec) {
  return spec.training() ? c10::kFloat : spec.dtype;
}

at::Tensor RandomInput(at::IntArrayRef shape, const BenchSpec& spec) {
  return at::randn(shape, at::TensorOptions().dtype(c10::kFloat).device(spec.device))
      .to(InputDtype(spec));
}

namespace {

class ForwardWorkload final : public Workload {
 public:
  explicit ForwardWorkload(ModelFns fns) : fns_(std::move(fns)) {}
  void Step() override {
    c10::InferenceMode guard;
    fns_.forward();
  }
  at::Tensor Evaluate() override {
    c10::InferenceMode guard;
    return fns_.forward();
  }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(*fns_.module);
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
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(*fns_.module);
  }

 private:
  ModelFns fns_;
  c10::DeviceType device_;
  c10::ScalarType dtype_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

std::unique_ptr<Workload> MakePhaseWorkload(const BenchSpec& spec, ModelFns fns) {
  if (!spec.training()) return std::make_unique<ForwardWorkload>(std::move(fns));
  if (spec.phase == kForwardBackward) {
    return std::make_unique<TrainWorkload>(spec, std::move(fns), false);
  }
  if (spec.phase == kTrainStep) {
    return std::make_unique<TrainWorkload>(spec, std::move(fns), true);
  }
  TORCH_CHECK(false, "no shared workload for training phase '", spec.phase,
              "'; valid: forward_backward, train_step");
}

}  // namespace ltb
