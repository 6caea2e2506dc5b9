#include "models/language_model.h"

#include <c10/core/GradMode.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "workloads/epoch.h"
#include "workloads/optimizers.h"
#include "workloads/phases.h"

namespace ltb {

std::unique_ptr<Workload> BuildLanguageModel(
    const BenchSpec& s, std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward, int64_t vocab) {
  PrepareModel(*module, s);
  // Cross-entropy of the logits of each position against the next token.
  const auto loss = [forward, vocab](const at::Tensor& batch) {
    const int64_t t = batch.size(1) - 1;
    const at::Tensor logits = forward(batch.narrow(1, 0, t));  // (B, T, V)
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(at::kFloat), batch.narrow(1, 1, t).reshape({-1}));
  };
  const auto adamw = [module, device = s.device]() {
    return MakeAdamW(device, module->parameters(), torch::optim::AdamWOptions(1e-4));
  };
  const at::Tensor ids = torch::randint(0, vocab, {s.batch, s.seq + 1},
                                        torch::dtype(torch::kLong).device(s.device));
  if (s.data_parallel) {  // train_step, train_epoch
    TrainFns train;
    train.module = module;
    train.loss = loss;
    train.make_optimizer = adamw;
    if (s.iterations == Iterations::kEpochs) {
      return MakeEpochWorkload(s, std::move(train), DatasetShape{s.seq + 1, vocab});
    }
    return MakeTrainStepWorkload(s, std::move(train), ids);
  }
  ModelFns fns;
  fns.module = module;
  const at::Tensor inputs = ids.narrow(1, 0, s.seq).contiguous();
  const at::Tensor targets = ids.narrow(1, 1, s.seq).contiguous();
  fns.forward = [forward, inputs]() { return forward(inputs); };
  fns.loss = [targets, vocab](const at::Tensor& logits) {
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(at::kFloat), targets.reshape({-1}));
  };
  fns.make_optimizer = adamw;
  return MakePhaseWorkload(s, std::move(fns));
}

void InitLikeHuggingFace(torch::nn::Module& module, double std, int64_t layers,
                         const std::vector<std::string>& residual) {
  c10::NoGradGuard no_grad;
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : module.named_parameters()) params.emplace_back(p.key(), p.value());
  std::sort(params.begin(), params.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(layers));
  for (auto& [name, p] : params) {
    if (p.dim() < 2) {  // a bias, or a norm's weight
      if (absl::EndsWith(name, "bias")) {
        p.zero_();
      } else {
        p.fill_(1);
      }
      continue;
    }
    const bool scaled =
        std::any_of(residual.begin(), residual.end(),
                    [&](const std::string& r) { return absl::EndsWith(name, r); });
    p.normal_(0, scaled ? residual_std : std);
  }
}

}  // namespace ltb
