// How far a reduced-precision or quantised benchmark's result drifts from
// fp32's, on the same weights and inputs: for language models the
// teacher-forced KL divergence of each position's next-token distribution
// and the share of positions with the same top token; rel_err for values,
// token_match_% for tokens.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "family/family.h"

namespace ltb {

// For token ids, the share of tokens equal to the fp32 run's (token_match_%);
// for values, the largest absolute difference over the largest absolute
// fp32 value (rel_err).
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

// `run` against `reference`, two builds of one benchmark, teacher-forced:
// for generation, both score the reference's prompt followed by its greedy
// tokens `ref_out` (Workload::Score); for a forward that evaluates logits,
// their outputs `out` and `ref_out` are compared. No positions where the
// workloads have neither.
Divergence TeacherForced(Workload& run, const at::Tensor& out, Workload& reference,
                         const at::Tensor& ref_out);

// Runs the benchmark's model once in fp32, with `seed` (so the same weights
// and inputs), eagerly and without TF32 (a graphed or TF32 run is checked
// against the plain fp32 one), and measures how far `workload` drifts from
// it. Quantised weights (spec.quant) are checked against the same weights
// unquantised, in the benchmark's dtype: top1_agree_% and rel_err of the
// logits (the prompt's, for generation), and token_match_% of the greedy
// tokens. Language models (Workload::Score, Workload::EvaluatesLogits) are
// also scored teacher-forced against the fp32 model unquantised: for
// generation, both models read the reference's prompt and greedy tokens in
// one forward, so that one flipped token does not change every later
// position; for a forward, both outputs are logits of the same inputs.
// That gives kld_mean, kld_p99, kld_max and same_top1_% (Diverge). Empty
// for unquantised fp32, training, or workloads without a single output.
// A reference is built beside the benchmark's model only where the memory
// guard says it fits; where it does not (or fails), `absent` says why there
// is no check.
std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload,
                                                     std::string* absent);

}  // namespace ltb
