#include "family/family.h"

#include <torch/nn/module.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ltb {

std::vector<Case> Family::Cases() const {
  if (!cases.empty()) return cases;
  std::vector<Case> all;
  for (const std::string& size : sizes) {
    for (const Phase& phase : phases) all.push_back({size, phase});
  }
  return all;
}

absl::StatusOr<Case> Family::FindCase(const std::string& size,
                                      const std::string& phase) const {
  std::vector<std::string> sizes, phases;
  for (const Case& c : Cases()) {
    if (c.size != size) {
      if (std::find(sizes.begin(), sizes.end(), c.size) == sizes.end())
        sizes.push_back(c.size);
      continue;
    }
    if (c.phase.name == phase) return c;
    phases.push_back(c.phase.name);
  }
  if (phases.empty()) {
    return absl::NotFoundError(absl::StrCat("unknown ", name, " size '", size,
                                            "'; valid: ", absl::StrJoin(sizes, ", ")));
  }
  return absl::NotFoundError(absl::StrCat(name, "/", size, " has no phase '", phase,
                                          "'; valid: ", absl::StrJoin(phases, ", ")));
}

absl::StatusOr<Plan> Family::PlanFor(const BenchSpec& spec) const {
  absl::StatusOr<Case> c = FindCase(spec.size, spec.phase);
  if (!c.ok()) return c.status();
  return plan(spec);
}

double RelativeError(const at::Tensor& out, const at::Tensor& ref) {
  const at::Tensor a = out.to(c10::kCPU, c10::kDouble),
                   b = ref.to(c10::kCPU, c10::kDouble);
  TORCH_CHECK(a.sizes() == b.sizes(), "an output of shape ", a.sizes(), " against ",
              b.sizes());
  const double scale = b.abs().max().item<double>();
  const double diff = (a - b).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

std::vector<std::pair<std::string, at::Tensor>> ModuleTensors(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters())
    out.emplace_back("param:" + p.key(), p.value());
  for (const auto& b : module.named_buffers())
    out.emplace_back("buffer:" + b.key(), b.value());
  return out;
}

void SetPhase(const Phase& phase, BenchSpec* spec) {
  spec->phase = phase.name;
  spec->kind = phase.kind;
  spec->data_parallel = phase.data_parallel;
  spec->iterations = phase.iterations;
}

}  // namespace ltb
