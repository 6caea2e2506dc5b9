// The phases every model family shares — forward, forward_backward and
// train_step — as one Workload over a model's forward and loss functions.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>

#include "family/family.h"

namespace ltb {

// The phases families share, by name and as descriptors. A family may
// define its own (Whisper's encode and transcribe) as a Phase of its file.
extern const char kForward[];
extern const char kForwardBackward[];
extern const char kTrainStep[];
extern const char kTrainEpoch[];
extern const char kGenerate[];

// Inference.
Phase ForwardPhase(Shape shape = Shape::kSequence);
// Training: forward, loss and backward, without an optimizer step.
Phase ForwardBackwardPhase(Shape shape = Shape::kSequence);
// Training: a whole optimizer step.
Phase TrainStepPhase(Shape shape = Shape::kSequence);
// Training over a dataset, one epoch an iteration (--epochs).
Phase TrainEpochPhase();
// Inference: greedy decoding after a prompt.
Phase GeneratePhase();

struct ModelFns {
  std::shared_ptr<torch::nn::Module> module;
  // Runs the model on its stored inputs.
  std::function<at::Tensor()> forward;
  // forward returns next-token logits (..., V) (Workload::EvaluatesLogits).
  bool logits = false;
  // Turns the model's output into the scalar training loss.
  std::function<at::Tensor(const at::Tensor&)> loss;
  // The family's optimizer over module->parameters(); train_step only.
  std::function<std::unique_ptr<torch::optim::Optimizer>()> make_optimizer;
  // Inference: the bytes of weights a forward reads, reported as the
  // counter weight_bytes; 0: none reported.
  double weight_bytes = 0;
  // serve (inference): the stored inputs, batch first, and the model on
  // inputs like them of any batch size; unset where the model's inputs are
  // not batch first.
  at::Tensor inputs;
  std::function<at::Tensor(const at::Tensor&)> forward_on;
  // Language models: the logits (B, T, V) of token ids (B, T) of any batch
  // and length the model takes (Workload::Score), for scoring a text; unset
  // elsewhere.
  std::function<at::Tensor(const at::Tensor&)> score;
};

// The dtype a phase's floating-point inputs take: the spec's for inference,
// fp32 for training (autocast converts inside the model).
c10::ScalarType InputDtype(const BenchSpec& spec);

// Standard-normal inputs of `shape` on the spec's device in InputDtype(spec),
// drawn in fp32 whatever the dtype, so that runs of one seed in different
// precisions see the same numbers (rounded).
at::Tensor RandomInput(at::IntArrayRef shape, const BenchSpec& spec);

// Inference phases: one forward in inference mode. forward_backward: forward,
// loss, backward. train_step: with an optimizer step.
std::unique_ptr<Workload> MakePhaseWorkload(const BenchSpec& spec, ModelFns fns);

// --cuda_graphs for a whole step: `inner`, each Step() replaying one capture
// of inner's step (which runs eagerly first, as capture needs); Counters(),
// Evaluate() and the rest are inner's. `inner` itself where it graphs its
// own steps (generation). Throws where the device has no graphs or the step
// cannot be captured.
std::unique_ptr<Workload> GraphedSteps(std::unique_ptr<Workload> inner,
                                       const c10::Device& device);

}  // namespace ltb
