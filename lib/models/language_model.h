// What the language-model families (Transformer, GPT2, Llama) share:
// next-token batches of random ids and the phases over them, AdamW for
// training, and Hugging Face's initialisation of random weights.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "family/family.h"

namespace ltb {

// forward: token ids (B, T) -> logits (B, T, vocab). Handles forward,
// forward_backward, train_step and train_epoch (samples of seq + 1 tokens:
// the inputs and their next-token targets).
std::unique_ptr<Workload> BuildLanguageModel(
    const BenchSpec& spec, std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward, int64_t vocab);

// Random weights as Hugging Face initialises GPT-2 and Llama
// (PreTrainedModel._init_weights): every matrix and embedding from
// N(0, std), every bias zero, every norm's weight one; a matrix whose name
// ends in one of `residual` (GPT-2's c_proj.weight) from
// N(0, std / sqrt(2 layers)). Drawn in the order of the sorted names from
// the default generator, as tools/ltb_models.py's init_like_hugging_face
// draws them, so that one seed gives both sides the same weights.
// LibTorch's defaults would draw the embedding, which these models tie to
// their output layer, from N(0, 1): logits in the hundreds, whose softmax
// holds denormal probabilities, and a training step whose backward slows
// several times over as they multiply.
void InitLikeHuggingFace(torch::nn::Module& module, double std, int64_t layers,
                         const std::vector<std::string>& residual = {});

}  // namespace ltb
