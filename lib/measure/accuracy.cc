#include "measure/accuracy.h"

#include <ATen/Context.h>

#include <iostream>

#include "device/device.h"

namespace ltb {

std::pair<std::string, double> Drift(const at::Tensor& out, const at::Tensor& ref) {
  if (at::isFloatingType(ref.scalar_type())) return {"rel_err", RelativeError(out, ref)};
  const at::Tensor a = out.to(HostDevice()), b = ref.to(HostDevice());
  TORCH_CHECK(a.sizes() == b.sizes(), "tokens of shape ", a.sizes(), " and ", b.sizes());
  return {"token_match_%", a.eq(b).to(c10::kDouble).mean().item<double>() * 100};
}

std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload) {
  // Compiled models report their own drift, against the eager outputs.
  if (spec.training() || spec.dtype == c10::kFloat || !spec.backend.empty()) return {};
  const at::Tensor out = workload.Evaluate();
  if (!out.defined()) return {};
  BenchSpec fp32 = spec;
  fp32.dtype = c10::kFloat;
  try {
    at::manual_seed(seed);
    const at::Tensor ref = family.build(fp32)->Evaluate();
    return {Drift(out, ref)};
  } catch (const std::exception& e) {
    std::cerr << spec.Name()
              << ": no accuracy check, the fp32 reference failed: " << e.what() << "\n";
    return {};
  }
}

}  // namespace ltb
