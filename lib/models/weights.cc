#include "models/weights.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ltb {
namespace {

std::string ShapeText(at::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::Status LoadWeights(torch::nn::Module& module, const std::string& model,
                         const Checkpoint& checkpoint, c10::ScalarType dtype,
                         const WeightNames& names) {
  const auto& entries = checkpoint.entries();
  const auto file_of = [&](const std::string& name) {
    return checkpoint.files()[entries.at(name).file];
  };
  std::set<std::string> used;
  // Parameters first (each must be there), then buffers (where present).
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : module.named_parameters())
    tensors.emplace_back(p.key(), p.value());
  const size_t parameters = tensors.size();
  for (const auto& b : module.named_buffers()) tensors.emplace_back(b.key(), b.value());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& [name, tensor] = tensors[i];
    if (names.ignored && names.ignored(name)) continue;
    std::vector<std::string> candidates =
        names.candidates ? names.candidates(name) : std::vector<std::string>{};
    if (candidates.empty()) candidates = {name};
    std::string found;
    for (const std::string& c : candidates) {
      if (entries.count(c)) {
        found = c;
        break;
      }
    }
    if (found.empty()) {
      if (i >= parameters) continue;  // a buffer the model computes
      return absl::NotFoundError(absl::StrCat(
          absl::StrJoin(checkpoint.files(), ", "), " has no tensor '", candidates.front(),
          "', which ", model, " needs with shape ", ShapeText(tensor.sizes())));
    }
    const bool transposed = names.transposed && names.transposed(name);
    const SafetensorsEntry& e = entries.at(found);
    std::vector<int64_t> want(tensor.sizes().begin(), tensor.sizes().end());
    if (transposed && want.size() == 2) std::swap(want[0], want[1]);
    if (e.shape != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_of(found), ": tensor '", found, "' has shape ",
                       ShapeText(e.shape), ", but ", model, " needs ", ShapeText(want),
                       transposed ? " (stored transposed)" : ""));
    }
    absl::StatusOr<at::Tensor> loaded = checkpoint.Load(found, dtype);
    if (!loaded.ok()) return loaded.status();
    at::Tensor value = transposed ? loaded->t().contiguous() : *std::move(loaded);
    tensor.set_data(value);
    used.insert(found);
  }
  for (const auto& [name, entry] : entries) {
    if (used.count(name) || (names.ignored && names.ignored(name))) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.files()[entry.file], " holds tensor '", name, "' of shape ",
        ShapeText(entry.shape), ", which ", model, " has no parameter or buffer for"));
  }
  return absl::OkStatus();
}

void LoadSpecWeights(torch::nn::Module& module, const BenchSpec& spec,
                     const WeightNames& names) {
  if (spec.weights.empty()) return;
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(spec.weights);
  absl::Status status = checkpoint.status();
  if (checkpoint.ok()) {
    status = LoadWeights(module, absl::StrCat(spec.family, "/", spec.size), *checkpoint,
                         spec.training() ? c10::kFloat : spec.dtype, names);
  }
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

}  // namespace ltb
