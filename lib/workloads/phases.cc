#include "workloads/phases.h"

#include <ATen/ops/randn.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/torch_compat.h"
#include "device/autocast.h"
#include "device/device.h"
#include "workloads/trainer.h"

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
  bool EvaluatesLogits() const override { return fns_.logits; }
  at::Tensor Score(const at::Tensor& tokens) override {
    if (!fns_.score) return {};
    c10::InferenceMode guard;
    return fns_.score(tokens);
  }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(*fns_.module);
  }
  std::vector<std::pair<std::string, double>> Counters() const override {
    if (fns_.weight_bytes <= 0) return {};
    return {{"weight_bytes", fns_.weight_bytes}};
  }
  at::Tensor BatchInputs() const override {
    return fns_.forward_on ? fns_.inputs : at::Tensor();
  }
  at::Tensor RunBatch(const at::Tensor& batch) override {
    if (!fns_.forward_on) return {};
    c10::InferenceMode guard;
    return fns_.forward_on(batch);
  }

 private:
  ModelFns fns_;
};

// forward_backward: forward, loss and backward, no optimizer step.
class TrainWorkload final : public Workload {
 public:
  TrainWorkload(const BenchSpec& spec, ModelFns fns)
      : fns_(std::move(fns)), device_(spec.device), dtype_(spec.dtype) {}

  void Step() override {
    c10::AutoGradMode grad(true);
    fns_.module->zero_grad();
    at::Tensor loss;
    {
      AutocastGuard autocast(device_, dtype_);
      loss = fns_.loss(fns_.forward());
    }
    loss.backward();
  }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(*fns_.module);
  }

 private:
  ModelFns fns_;
  c10::Device device_;
  c10::ScalarType dtype_;
};

}  // namespace

std::unique_ptr<Workload> MakePhaseWorkload(const BenchSpec& spec, ModelFns fns) {
  if (!spec.training()) return std::make_unique<ForwardWorkload>(std::move(fns));
  if (spec.phase == kForwardBackward) {
    return std::make_unique<TrainWorkload>(spec, std::move(fns));
  }
  if (spec.phase == kTrainStep) {
    // The Trainer of the token-batch families: loss scaling in fp16, and
    // gradients averaged over data-parallel ranks.
    TrainFns train;
    train.module = fns.module;
    train.loss = [forward = fns.forward, loss = fns.loss](const at::Tensor&) {
      return loss(forward());
    };
    train.make_optimizer = fns.make_optimizer;
    return MakeTrainStepWorkload(spec, std::move(train), at::Tensor());
  }
  TORCH_CHECK(false, "no shared workload for training phase '", spec.phase,
              "'; valid: forward_backward, train_step");
}

namespace {

// An inference step captured once and replayed: the step captured is the
// inner workload's Evaluate(), whose output tensor the replays rewrite in
// place, so that the accuracy check reads what a replay computed.
class GraphedWorkload final : public Workload {
 public:
  GraphedWorkload(std::unique_ptr<Workload> inner, const c10::Device& device)
      : inner_(std::move(inner)), graphs_(BackendOf(device).MakeGraphs(device)) {
    graph_ = graphs_->Capture([this] { output_ = inner_->Evaluate(); });
  }

  void Step() override { graphs_->Replay(graph_); }
  void ResetStats() override { inner_->ResetStats(); }
  std::vector<std::pair<std::string, double>> Counters() const override {
    return inner_->Counters();
  }
  void BeginMeasurement() override { inner_->BeginMeasurement(); }
  void EndMeasurement() override { inner_->EndMeasurement(); }
  at::Tensor Evaluate() override {
    graphs_->Replay(graph_);
    return output_.defined() ? output_.clone() : output_;
  }
  bool EvaluatesLogits() const override { return inner_->EvaluatesLogits(); }
  // Eager, outside the graph: a text's sequences are not the captured shape.
  at::Tensor Score(const at::Tensor& tokens) override { return inner_->Score(tokens); }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return inner_->Tensors();
  }
  double FlopsPerStep() const override { return inner_->FlopsPerStep(); }
  int64_t UntrackedBytes() const override {
    return inner_->UntrackedBytes() + graphs_->PoolBytes();
  }

 private:
  std::unique_ptr<Workload> inner_;
  std::unique_ptr<StepGraphs> graphs_;
  size_t graph_ = 0;
  at::Tensor output_;  // written by every replay
};

}  // namespace

std::unique_ptr<Workload> GraphedSteps(std::unique_ptr<Workload> inner,
                                       const c10::Device& device) {
  if (inner->ReplaysItsOwnGraphs()) return inner;
  return std::make_unique<GraphedWorkload>(std::move(inner), device);
}

}  // namespace ltb
