// What the language-model families (Transformer, GPT2) share: next-token
// batches of random ids and the phases over them, AdamW for training.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>

#include "family/family.h"

namespace ltb {

// forward: token ids (B, T) -> logits (B, T, vocab). Handles forward,
// forward_backward, train_step and train_epoch (samples of seq + 1 tokens:
// the inputs and their next-token targets).
std::unique_ptr<Workload> BuildLanguageModel(
    const BenchSpec& spec, std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward, int64_t vocab);

}  // namespace ltb
