// --weights: a Hugging Face checkpoint's tensors loaded into a family's
// model by name. Every parameter must be in the checkpoint with the shape
// the chosen size gives it; a buffer is loaded where the checkpoint holds it
// (else it keeps the value the model computed: RoPE's frequencies); a
// checkpoint tensor that is neither is an error unless the family ignores it
// (GPT2's attention masks, a tied model's lm_head). Tensors in the dtype
// asked for stay views of the mapped file; others are converted.
#pragma once

#include <c10/core/ScalarType.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "family/spec.h"
#include "models/safetensors.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ltb {

// How a family's module names meet a checkpoint's.
struct WeightNames {
  // The checkpoint names a module tensor may have, tried in order (empty:
  // the module's own name).
  std::function<std::vector<std::string>(const std::string& name)> candidates;
  // Module tensors the checkpoint stores transposed (GPT2's Conv1D weights,
  // (in, out) where a linear layer's are (out, in)).
  std::function<bool(const std::string& name)> transposed;
  // Names passed over on both sides: checkpoint tensors that are not the
  // module's, and module buffers it computes itself (RoPE tables).
  std::function<bool(const std::string& name)> ignored;
};

// Loads `checkpoint` into `module` (on the CPU) as `dtype`. An error is one
// sentence naming the checkpoint's file and the tensor, and `model` ("Llama/
// 1B"): a tensor missing, extra or of another shape.
absl::Status LoadWeights(torch::nn::Module& module, const std::string& model,
                         const Checkpoint& checkpoint, c10::ScalarType dtype,
                         const WeightNames& names = {});

// A family's build: loads spec.weights, when set, into `module` (built on the
// CPU, before it is converted and moved) in the dtype its weights take:
// inference phases' spec.dtype, training's fp32. Throws std::runtime_error
// with LoadWeights' (or the checkpoint's) sentence, which stops that
// benchmark alone.
void LoadSpecWeights(torch::nn::Module& module, const BenchSpec& spec,
                     const WeightNames& names = {});

}  // namespace ltb
