#include "models/attention.h"

#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>

#include "base/torch_compat.h"
#if LTB_HAS_SDPA
#include <ATen/ops/scaled_dot_product_attention.h>
#endif

#include <cmath>
#include <limits>

namespace ltb {

at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     bool causal, bool fused) {
  const int64_t tq = q.size(-2), tk = k.size(-2);
#if LTB_HAS_SDPA
  if (fused && (!causal || tq == tk)) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/causal);
  }
  if (fused) {
    // Queries after cached keys (a chunk at a depth): SDPA's is_causal aligns
    // the mask to the top left, so the mask is given, aligned to the bottom
    // right (true: attend).
    const at::Tensor seen =
        at::ones({tq, tk}, q.options().dtype(at::kBool)).tril(tk - tq);
    return at::scaled_dot_product_attention(q, k, v, seen, /*dropout_p=*/0.0,
                                            /*is_causal=*/false);
  }
#endif
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) /
                      std::sqrt(static_cast<double>(q.size(-1)));  // (B, nh, Tq, Tk)
  if (causal) {
    const at::Tensor future =
        at::ones({tq, tk}, q.options().dtype(at::kBool)).triu(1 + tk - tq);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  }
  return at::matmul(scores.softmax(-1), v);  // (B, nh, Tq, hs)
}

at::Tensor MaskedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask, bool fused) {
#if LTB_HAS_SDPA
  if (fused) {
    return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0,
                                            /*is_causal=*/false);
  }
#endif
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) /
                      std::sqrt(static_cast<double>(q.size(-1)));  // (B, nh, Tq, Tk)
  scores =
      scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
  return at::matmul(scores.softmax(-1), v);  // (B, nh, Tq, hs)
}

}  // namespace ltb
