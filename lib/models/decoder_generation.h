// What the decoder-only generating families (GPT2, Llama) share: the
// key/value cache, greedy generation with it or by recomputing the whole
// sequence, and the generate phase's workload. `Model` is a module holder
// (GPT2LM, LlamaLM) with forward(tokens) -> logits (B, T, V),
// forward_cached(tokens, position, cache) -> last logits (B, V) and
// MakeCache(batch, positions).
#pragma once

#include <ATen/ops/cat.h>
#include <ATen/ops/randint.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "family/family.h"
#include "workloads/generation.h"
#include "workloads/phases.h"

namespace ltb {

// Keys and values of every layer, (B, kv heads, positions, head size) each,
// allocated once and written in place as positions fill.
struct KVCache {
  std::vector<at::Tensor> keys, values;
};

// Greedy generation of `new_tokens` after `prompt` (B, P): the prompt in one
// pass filling the cache, then one token a step. Returns (B, new_tokens).
template <typename Model>
at::Tensor GenerateWithCache(Model& model, const at::Tensor& prompt, int64_t new_tokens) {
  KVCache cache = model->MakeCache(prompt.size(0), prompt.size(1) + new_tokens);
  std::vector<at::Tensor> out;
  at::Tensor token = model->forward_cached(prompt, 0, cache).argmax(-1, true);  // (B, 1)
  out.push_back(token);
  for (int64_t i = 1; i < new_tokens; ++i) {
    token = model->forward_cached(token, prompt.size(1) + i - 1, cache).argmax(-1, true);
    out.push_back(token);
  }
  return at::cat(out, 1);
}

// The same tokens by recomputing the whole sequence every step (no cache).
template <typename Model>
at::Tensor GenerateByRecompute(Model& model, const at::Tensor& prompt,
                               int64_t new_tokens) {
  at::Tensor seq = prompt;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const at::Tensor next = model(seq).select(1, seq.size(1) - 1).argmax(-1, true);
    seq = at::cat({seq, next}, 1);
  }
  return seq.narrow(1, prompt.size(1), new_tokens);
}

// Chunks of the depth filled at once: bounds the attention scores a chunk
// computes (chunk x depth per head) when the depth is long.
constexpr int64_t kDepthChunk = 512;

// The generate phase of `model` (already built for spec): a random prompt
// of spec.batch x spec.prompt ids below `vocab`, a cache for depth + prompt
// + new tokens whose first spec.depth positions are filled once here from
// random tokens (outside the timed steps; every step's prompt then starts at
// that depth), and `weight_bytes` read a decode step.
template <typename Model>
std::unique_ptr<Workload> MakeDecoderGenerateWorkload(const BenchSpec& s, Model model,
                                                      int64_t vocab,
                                                      double weight_bytes) {
  // Quantised layers read their packed bytes instead of the weights'.
  const WeightChange change = PrepareModel(*model, s);
  weight_bytes += static_cast<double>(change.added - change.removed);
  const auto ids = at::TensorOptions().dtype(at::kLong).device(s.device);
  const at::Tensor prompt = at::randint(0, vocab, {s.batch, s.prompt}, ids);
  auto cache = std::make_shared<KVCache>(
      model->MakeCache(s.batch, s.depth + s.prompt + s.new_tokens));
  {
    c10::InferenceMode guard;
    for (int64_t at = 0; at < s.depth; at += kDepthChunk) {
      const int64_t n = std::min(kDepthChunk, s.depth - at);
      model->forward_cached(at::randint(0, vocab, {s.batch, n}, ids), at, *cache);
    }
  }
  const int64_t depth = s.depth;
  GenerateFns fns;
  fns.module = model.ptr();
  fns.prompt = prompt;
  fns.prefill = [model, prompt, cache, depth]() mutable {
    return model->forward_cached(prompt, depth, *cache).argmax(-1, true);
  };
  fns.decode = [model, cache](const at::Tensor& token, int64_t position) mutable {
    return model->forward_cached(token, position, *cache).argmax(-1, true);
  };
  fns.logits = [model, prompt]() mutable { return model->forward(prompt); };
  fns.cache = [cache]() {
    std::vector<at::Tensor> tensors = cache->keys;
    tensors.insert(tensors.end(), cache->values.begin(), cache->values.end());
    return tensors;
  };
  // Keys and values are (B, kv heads, positions, head size) in every layer.
  double per_position = 0;
  for (const auto* list : {&cache->keys, &cache->values}) {
    for (const at::Tensor& t : *list) {
      per_position += static_cast<double>(t.nbytes()) / static_cast<double>(t.size(2));
    }
  }
  fns.cache_read_bytes = [per_position](int64_t positions) {
    return per_position * static_cast<double>(positions);
  };
  return MakeGenerateWorkload(s, std::move(fns), weight_bytes);
}

}  // namespace ltb
