// A model made ready for its phase before the timed steps: device, dtype and
// mode by the phase's kind, then the linear layers' other paths for
// inference (oneDNN's packed weights, quantised weights).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "family/spec.h"
#include "layers/quant.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ltb {

// Precision policy: inference phases run a model whose weights and buffers
// were converted to spec.dtype, in eval mode; training phases keep fp32
// weights, in train mode, and run forward and loss under autocast to
// spec.dtype (mixed precision), as training does in practice. For inference
// with spec.pack_cpu_linears the model's linear layers are packed for
// oneDNN, and with spec.quant quantised (throwing, with the reason, where
// that cannot run). Returns what quantising changed in the bytes of weights
// a step reads.
WeightChange PrepareModel(torch::nn::Module& module, const BenchSpec& spec);

// What PrepareModel adds to the plan of a model of `params` parameters: the
// bytes of the copies it holds beside the weights (quantised ones), and why
// mfu does not apply (empty: it does); an error, with the reason, where it
// cannot run. Quantisation is all it adds (PlanQuant).
using PrepareCost = QuantCost;
absl::StatusOr<PrepareCost> PlanPrepare(const BenchSpec& spec, int64_t params);

}  // namespace ltb
