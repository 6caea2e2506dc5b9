#include "layers/prepare.h"

#include <torch/nn/module.h>

#include <stdexcept>
#include <string>

#include "layers/packed_linear.h"

namespace ltb {

WeightChange PrepareModel(torch::nn::Module& module, const BenchSpec& spec) {
  if (spec.training()) {
    module.to(spec.device, c10::kFloat);
    module.train();
    return {};
  }
  module.to(spec.device, spec.dtype);
  module.eval();
  if (spec.pack_cpu_linears) {
    absl::StatusOr<int> packed = PackLinears(module, spec.device, spec.dtype);
    if (!packed.ok()) throw std::runtime_error(std::string(packed.status().message()));
  }
  if (spec.quant.none()) return {};
  absl::StatusOr<WeightChange> change = QuantizeLinears(module, spec);
  if (!change.ok()) throw std::runtime_error(std::string(change.status().message()));
  return *change;
}

absl::StatusOr<PrepareCost> PlanPrepare(const BenchSpec& spec, int64_t params) {
  return PlanQuant(spec, params);
}

}  // namespace ltb
