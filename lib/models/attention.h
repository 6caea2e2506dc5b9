// Scaled dot-product attention for the model families: LibTorch's fused
// function (LibTorch 2.0 and newer), or the explicit composition (matmul,
// mask, softmax, matmul) whose matmuls a profiler counts, for checking FLOP
// formulas.
#pragma once

#include <ATen/core/Tensor.h>

namespace ltb {

// q: (B, heads, Tq, hs); k, v: (B, heads, Tk, hs) -> (B, heads, Tq, hs).
// Causal: query i sees keys up to Tk - Tq + i (the queries are the last Tq
// positions of the keys').
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     bool causal, bool fused);
// The same with a mask (broadcast to (B, heads, Tq, Tk), true: attend) in
// place of causality: each row of a batch attends to keys of its own.
at::Tensor MaskedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask, bool fused);

}  // namespace ltb
