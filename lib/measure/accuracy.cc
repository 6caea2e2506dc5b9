#include "measure/accuracy.h"

#include <ATen/Context.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "measure/guard.h"

namespace ltb {

std::pair<std::string, double> Drift(const at::Tensor& out, const at::Tensor& ref) {
  if (at::isFloatingType(ref.scalar_type())) return {"rel_err", RelativeError(out, ref)};
  const at::Tensor a = out.to(HostDevice()), b = ref.to(HostDevice());
  TORCH_CHECK(a.sizes() == b.sizes(), "tokens of shape ", a.sizes(), " and ", b.sizes());
  return {"token_match_%", a.eq(b).to(c10::kDouble).mean().item<double>() * 100};
}

std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload,
                                                     std::string* absent) {
  absent->clear();
  // Compiled models report their own drift, against the eager outputs.
  if (spec.training() || spec.dtype == c10::kFloat || !spec.backend.empty()) return {};
  const at::Tensor out = workload.Evaluate();
  if (!out.defined()) return {};
  BenchSpec fp32 = spec;
  fp32.dtype = c10::kFloat;
  fp32.graph = false;
  fp32.tf32 = false;
  const auto none = [&](const std::string& why) {
    *absent = absl::StrCat("no accuracy check: ", why);
    std::cerr << spec.Name() << ": " << *absent << "\n";
    return std::vector<std::pair<std::string, double>>{};
  };
  // The benchmark's own model stays in memory: the reference must fit beside it.
  if (absl::StatusOr<Plan> plan = family.PlanFor(fp32); plan.ok()) {
    if (absl::Status fits = CheckFits(plan->memory, spec.device); !fits.ok()) {
      return none(absl::StrCat("the fp32 reference does not fit beside the model (",
                               fits.message(), ")"));
    }
  }
  try {
    at::manual_seed(seed);
    const at::Tensor ref = family.build(fp32)->Evaluate();
    return {Drift(out, ref)};
  } catch (const std::exception& e) {
    return none(absl::StrCat("the fp32 reference failed: ", e.what()));
  }
}

}  // namespace ltb
