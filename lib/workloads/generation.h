// The generate phase shared by text-generation families: greedy decoding
// timed as prefill (the prompt, up to the first new token) and decode (one
// token per step), with the counters that describe it.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "family/family.h"
#include "workloads/phases.h"

namespace ltb {

struct GenerateFns {
  std::shared_ptr<torch::nn::Module> module;  // kept alive with the workload
  // Runs the prompt from an empty cache; returns the first new token (B, 1).
  std::function<at::Tensor()> prefill;
  at::Tensor prompt;  // its token ids (B, P), for --print_tokens
  // Feeds one token per sequence at `position`; returns the next (B, 1).
  std::function<at::Tensor(const at::Tensor& token, int64_t position)> decode;
  // The cache's tensors (keys and values), for checking their dtype.
  std::function<std::vector<at::Tensor>()> cache;
  // Bytes of the cache a decode step reads when its token attends to
  // `positions` cached positions (itself included); unset: none counted.
  std::function<double(int64_t positions)> cache_read_bytes;
  // The logits (B, T, V) of tokens (B, T) from position 0, through the
  // model's plain forward (no cache); unset: none. Logits() is the prompt's.
  std::function<at::Tensor(const at::Tensor& tokens)> score;
  // The decoder in slots over the same cache, for serve; unset: none.
  std::shared_ptr<SlotDecoder> slots;
};

// Counters, averaged over the measured steps (N = spec.new_tokens, D =
// spec.depth, the tokens in the cache before the prompt):
//   ttft_ms           prefill time, prompt to first new token
//   tpot_ms           decode time / (N - 1): time per output token after the first
//   tpot_p50_ms, tpot_p90_ms, tpot_p99_ms
//                     percentiles of the single decode steps' times
//   pp_tok/s          batch * prompt / prefill time (prompt processing)
//   tg_tok/s          batch * (N - 1) / decode time (token generation)
//   weight_GB/s       weight_bytes * (N - 1) / decode time / 1e9
//   read_GB/s         what the decode steps read, the weights and the cache
//                     up to each step's position (Whisper's cross-attention
//                     keys and values whole), / decode time / 1e9 (where
//                     cache_read_bytes is set: GPT2, Llama, Whisper)
//   kv_cache_bytes    the cache's size (D + prompt + N positions; Whisper's
//                     cross-attention keys and values too)
//   weight_bytes      what a decode step reads of the weights
//   tpot_growth_%     mean of the last 10 decode steps over the first 10, minus 1
// so that ttft + (N - 1) * tpot is the step time (N = 1: the prefill alone,
// and none of the decode steps' counters). Evaluate() returns the
// generated token ids (B, N).
std::unique_ptr<Workload> MakeGenerateWorkload(const BenchSpec& spec, GenerateFns fns,
                                               double weight_bytes);

// tpot_growth_%'s window: the last and the first this many decode steps
// (fewer, half the decode steps each, in a shorter generation).
constexpr int64_t kGrowthWindow = 10;

// The counters above that every generation of more than one new token
// reports (read_GB/s and kv_cache_bytes where the model counts its cache,
// tpot_growth_% where the decode steps are many enough): what bench
// --list_families names for a generating phase.
const std::vector<std::string>& GenerationCounterNames();

}  // namespace ltb
