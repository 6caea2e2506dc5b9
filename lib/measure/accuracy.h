// How far a reduced-precision benchmark's result drifts from fp32's, on the
// same weights and inputs: rel_err for values, token_match_% for tokens.
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

// Runs the benchmark's model once in fp32, with `seed` (so the same weights
// and inputs), eagerly and without TF32 (a graphed or TF32 run is checked
// against the plain fp32 one), and measures how far `workload` drifts from
// it. Quantised weights (spec.quant) are checked against the same weights
// unquantised, in the benchmark's dtype: top1_agree_% and rel_err of the
// logits (the prompt's, for generation), and token_match_% of the greedy
// tokens. Empty for unquantised fp32, training, or workloads without a
// single output. The
// reference is built beside the benchmark's model only where the memory
// guard says it fits; where it does not (or fails), `absent` says why there
// is no check.
std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload,
                                                     std::string* absent);

}  // namespace ltb
