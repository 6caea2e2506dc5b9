// How far a reduced-precision or quantised benchmark's result drifts from
// fp32's, on the same weights and inputs: for language models the
// teacher-forced KL divergence of each position's next-token distribution
// and the share of positions with the same top token; rel_err for values,
// token_match_% for tokens; with a held-out text (--eval_tokens), the
// perplexity each precision gives it.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"

namespace ltb {

// For token ids, the share of tokens equal to the reference run's
// (token_match_%); for values, the largest absolute difference over the
// reference's largest absolute value (rel_err). Accuracy's reference is the
// fp32 run for an unquantised reduced-precision run, the same dtype
// unquantised for a quantised one.
std::pair<std::string, double> Drift(const at::Tensor& out, const at::Tensor& ref);

// The share of positions (all but the last dimension) where the two
// logits' argmax agree, in percent (top1_agree_%).
double Top1Agreement(const at::Tensor& out, const at::Tensor& ref);

// How two runs' next-token distributions differ position by position, over
// the same tokens: KL(P_ref || P) in nats of the softmax of `ref`'s logits
// (P_ref) and of `logits`' (P), llama.cpp's `llama-perplexity
// --kl-divergence` measure.
struct Divergence {
  int64_t positions = 0;
  // Positions where `logits` has a value that is not finite: their KL is
  // undefined, and the kld_* counters are left out.
  int64_t non_finite = 0;
  double kld_mean = 0, kld_p99 = 0, kld_max = 0;
  double same_top1 = 0;  // % of positions whose argmax agree
};

// Every position's KL(softmax(ref) || softmax(logits)) over the last
// dimension, in fp64 on the host: a (positions,) tensor, positions being
// the product of the leading dimensions. Any devices and dtypes; the same
// shape.
at::Tensor PositionKL(const at::Tensor& logits, const at::Tensor& ref);

// PositionKL's mean, 99th percentile (linear between the nearest ranks,
// numpy's default) and max, and the share of positions whose argmax agree.
Divergence Diverge(const at::Tensor& logits, const at::Tensor& ref);

// kld_mean, kld_p99, kld_max (where every position's logits are finite) and
// same_top1_%.
std::vector<std::pair<std::string, double>> DivergenceCounters(const Divergence& d);

// A held-out text's token ids for --eval_tokens: a text file of one
// sequence a line, its ids (integers >= 0) separated by spaces, every line
// as long, at least 2 ids; lines that start with '#' say where the text came
// from and are skipped. A (sequences, T) int64 tensor on the host, or an
// error naming the file and the line.
absl::StatusOr<at::Tensor> ReadEvalTokens(const std::string& path);

// Every position's negative log-likelihood of the token after it, in nats
// and fp64 on the host: -log softmax(logits[b, t])[tokens[b, t + 1]] for t
// < T - 1, as a (B * (T - 1),) tensor; logits (B, T, V) of tokens (B, T).
// Its mean is the cross-entropy of the text, exp of it the perplexity.
at::Tensor NextTokenNll(const at::Tensor& logits, const at::Tensor& tokens);

// A text scored by a run, and by a reference where one is given: each
// sequence read from position 0 in one plain forward (Workload::Score),
// teacher-forced, over the positions that predict a token of the text.
struct TextScore {
  int64_t predictions = 0;      // sequences x (T - 1)
  double nll = 0, ref_nll = 0;  // mean NextTokenNll: run, reference
  Divergence divergence;        // of the run from the reference, same positions
  double Ppl() const;
  double RefPpl() const;
};

// Scores `tokens` (ReadEvalTokens) on `device` with `run` and, unless null,
// `reference`, a few sequences at a time (the logits of all of them at once
// would take gigabytes at a large vocabulary). Throws where an id is not in
// the model's vocabulary, or where a workload cannot score tokens.
TextScore ScoreText(Workload& run, Workload* reference, const at::Tensor& tokens,
                    const c10::Device& device);

// `run` against `reference`, two builds of one benchmark, teacher-forced:
// for generation, both score the reference's prompt followed by its greedy
// tokens `ref_out` (Workload::Score); for a forward that evaluates logits,
// their outputs `out` and `ref_out` are compared. No positions where the
// workloads have neither.
Divergence TeacherForced(Workload& run, const at::Tensor& out, Workload& reference,
                         const at::Tensor& ref_out);

// Runs the benchmark's model once in fp32, with `seed` (so the same weights
// and inputs), eagerly and without TF32 (a graphed run in bf16 or fp16, or a
// TF32 one, is checked against the plain fp32 one: the reference computes
// with TF32 off, though the runner keeps it on for a /tf32 benchmark), and
// measures how far `workload` drifts from it. Quantised weights
// (spec.quant) are checked against the same weights unquantised, in the
// benchmark's dtype: top1_agree_% and rel_err of the logits (the prompt's,
// for generation), and token_match_% of the greedy tokens. Language models
// (Workload::Score, Workload::EvaluatesLogits) are also scored teacher-forced against the
// fp32 model unquantised: for generation, both models read the reference's prompt and
// greedy tokens in one forward, so that one flipped token does not change every later
// position; for a forward, both outputs are logits of the same inputs.
// That gives kld_mean, kld_p99, kld_max and same_top1_% (Diverge). Empty
// for unquantised fp32 (not TF32) without a text, training, or workloads
// without a single output.
// With a held-out text (`text` defined, ReadEvalTokens), inference of the
// language models that load checkpoints (Family::loads_weights: Transformer,
// GPT2, Llama) also scores it: ppl for the run, ppl_ratio against the
// fp32 model unquantised, and the kld_* and same_top1_% counters computed
// over the text's positions instead of the prompt's and greedy tokens' (an
// unquantised fp32 run without TF32: ppl alone).
// A reference is built beside the benchmark's model only where the memory
// guard says it fits; where it does not (or fails), `absent` says why there
// is no check.
std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload,
                                                     const at::Tensor& text,
                                                     std::string* absent);

}  // namespace ltb
