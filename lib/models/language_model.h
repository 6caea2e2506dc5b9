// What the language-model families (Transformer, GPT2, Llama) share:
// next-token batches of random ids and the phases over them, AdamW for
// training, and Hugging Face's initialisation of random weights.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/options/linear.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "family/family.h"
#include "layers/packed_linear.h"

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
// N(0, std / sqrt(2 layers)). LibTorch's defaults would draw the embedding,
// which these models tie to their output layer, from N(0, 1): logits in the
// hundreds, whose softmax holds denormal probabilities, and a training step
// whose backward slows several times over as they multiply.
//
// Drawn on the run's threads, with values that depend on the seed alone: one
// 64-bit base from the default generator (all this takes from it), then the
// matrices in the order of their sorted names, each flattened and cut into
// chunks of kInitChunk elements, chunk k of them all (counted across the
// matrices) drawn by normal_ from its own generator seeded InitChunkSeed(base,
// k). init_like_hugging_face (tools/ltb/pysuite/models/common.py) draws the
// same way, so that one seed gives both sides the same weights.
void InitLikeHuggingFace(torch::nn::Module& module, double std, int64_t layers,
                         const std::vector<std::string>& residual = {});

// Elements a chunk of InitLikeHuggingFace draws with one generator.
inline constexpr int64_t kInitChunk = int64_t{1} << 20;

// The seed of chunk `k`'s generator: murmur3's 32-bit finaliser of
// base + k (mod 2^32), a bijection, so no two chunks of a model share a seed.
// 32 bits because a CPU generator (MT19937) keeps only those of its seed.
uint32_t InitChunkSeed(uint64_t base, int64_t k);

// A linear layer and an embedding whose weights are allocated, not drawn,
// for models that InitLikeHuggingFace then draws whole: LibTorch's
// constructors would first fill them with kaiming_uniform_ and normal_, on
// one thread, only to be overwritten. They draw nothing from any generator.
PackableLinear UndrawnLinear(const torch::nn::LinearOptions& options);
torch::nn::Embedding UndrawnEmbedding(int64_t count, int64_t dim);

// A decoder language model's family (GPT2, Llama): forward,
// forward_backward, train_step and generate; batch 1 by default; packable
// CPU linears; generation at a depth; --weights. The caller adds its sizes'
// plan and build, its default suite and its sequence lengths.
Family DecoderFamily(std::string name, std::vector<std::string> sizes);

// A generate benchmark's shape: positive batch, prompt and new tokens, and
// depth + prompt + new tokens within `positions` ("but GPT2 has 1024").
absl::Status CheckGenerateShape(const BenchSpec& s, int64_t positions,
                                const std::string& limit);

}  // namespace ltb
