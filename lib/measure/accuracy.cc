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

double Top1Agreement(const at::Tensor& out, const at::Tensor& ref) {
  const at::Tensor a = out.to(HostDevice()).argmax(-1),
                   b = ref.to(HostDevice()).argmax(-1);
  TORCH_CHECK(a.sizes() == b.sizes(), "logits of shape ", out.sizes(), " and ",
              ref.sizes());
  return a.eq(b).to(c10::kDouble).mean().item<double>() * 100;
}

std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload,
                                                     std::string* absent) {
  absent->clear();
  // Compiled models report their own drift, against the eager outputs.
  if (spec.training() || !spec.backend.empty()) return {};
  const bool quantised = !spec.quant.none();
  if (!quantised && spec.dtype == c10::kFloat) return {};
  const at::Tensor out = workload.Evaluate();
  if (!out.defined()) return {};
  // Quantised weights against the same weights unquantised, in the same
  // dtype; a reduced precision against fp32. Eager either way (a graphed or
  // TF32 run is checked against the plain one).
  BenchSpec reference = spec;
  if (quantised) {
    reference.quant = Quant{};
  } else {
    reference.dtype = c10::kFloat;
    reference.tf32 = false;
  }
  reference.graph = false;
  const std::string what = quantised ? "unquantised" : "fp32";
  const auto none = [&](const std::string& why) {
    *absent = absl::StrCat("no accuracy check: ", why);
    std::cerr << spec.Name() << ": " << *absent << "\n";
    return std::vector<std::pair<std::string, double>>{};
  };
  // The benchmark's own model stays in memory: the reference must fit beside it.
  if (absl::StatusOr<Plan> plan = family.PlanFor(reference); plan.ok()) {
    if (absl::Status fits = CheckFits(plan->memory, spec.device); !fits.ok()) {
      return none(absl::StrCat("the ", what, " reference does not fit beside the model (",
                               fits.message(), ")"));
    }
  }
  try {
    at::manual_seed(seed);
    const std::unique_ptr<Workload> ref = family.build(reference);
    const at::Tensor expected = ref->Evaluate();
    if (!quantised) return {Drift(out, expected)};
    // Quantised: the predictions (logits of the prompt, or the forward's
    // output) and, for generation, the greedy tokens.
    std::vector<std::pair<std::string, double>> result;
    at::Tensor logits = workload.Logits(), ref_logits;
    if (logits.defined()) {
      ref_logits = ref->Logits();
    } else if (at::isFloatingType(out.scalar_type())) {
      logits = out;
      ref_logits = expected;
    }
    if (logits.defined()) {
      result.emplace_back("top1_agree_%", Top1Agreement(logits, ref_logits));
      result.emplace_back("rel_err", RelativeError(logits, ref_logits));
    }
    if (!at::isFloatingType(out.scalar_type())) result.push_back(Drift(out, expected));
    return result;
  } catch (const std::exception& e) {
    return none(absl::StrCat("the ", what, " reference failed: ", e.what()));
  }
}

}  // namespace ltb
