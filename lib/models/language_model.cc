#include "models/language_model.h"

#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

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

}  // namespace ltb
