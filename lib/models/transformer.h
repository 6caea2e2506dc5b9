// The Transformer family: a decoder-only language model with RoPE, RMSNorm
// and SwiGLU (shared/MODELS.md, "Transformer"). Modules are registered under
// the reference model's attribute names so parameter names match it.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "layers/packed_linear.h"

namespace ltb {

struct TransformerOptions {
  TransformerOptions(int64_t vocab_size, int64_t d_model, int64_t d_ff,
                     int64_t num_layers, int64_t num_heads)
      : vocab_size_(vocab_size),
        d_model_(d_model),
        d_ff_(d_ff),
        num_layers_(num_layers),
        num_heads_(num_heads) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, d_ff);
  TORCH_ARG(int64_t, num_layers);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(int64_t, context_length) = 512;
  TORCH_ARG(double, rope_theta) = 10000.0;
  TORCH_ARG(double, eps) = 1e-5;
  // Fused: LibTorch's scaled_dot_product_attention. Explicit: matmul,
  // mask, softmax, matmul, which profilers count as matmuls.
  TORCH_ARG(bool, fused_attention) = true;
};

struct TransformerSize {
  std::string name;
  TransformerOptions options;
  int64_t card_params;  // shared/MODELS.md
};

// nano, small, medium, large, xl, 2.7B, in that order.
const std::vector<TransformerSize>& TransformerSizes();
absl::StatusOr<TransformerOptions> TransformerSizeOptions(const std::string& size);

// L(4d^2 + 3 d d_ff + 2d) + 2Vd + d.
int64_t TransformerParamCount(const TransformerOptions& o);

// Forward FLOPs for a (batch, seq) input: 2 per multiply-add of every
// matmul: the q, k, v, o projections, QK^T and AV over the full seq x seq
// square, the three FFN matrices and the LM head. Backward is 2x forward.
double TransformerForwardFlops(const TransformerOptions& o, int64_t batch, int64_t seq);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding over adjacent pairs (0,1), (2,3), ... of the
// last dimension. cos/sin tables are buffers, not parameters.
class RotaryEmbeddingImpl : public torch::nn::Module {
 public:
  RotaryEmbeddingImpl(int64_t head_dim, int64_t max_positions, double theta);
  // x: (..., T, head_dim); positions: (T) int64.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& positions);

 private:
  at::Tensor cos_, sin_;  // (max_positions, head_dim / 2)
};
TORCH_MODULE(RotaryEmbedding);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const TransformerOptions& o);
  // x: (B, T, d_model); positions: (T).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& positions);

  PackableLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, output_proj{nullptr};
  RotaryEmbedding rope{nullptr};

 private:
  int64_t num_heads_;
  bool fused_;
};
TORCH_MODULE(CausalSelfAttention);

class SwiGLUImpl : public torch::nn::Module {
 public:
  SwiGLUImpl(int64_t d_model, int64_t d_ff);
  at::Tensor forward(const at::Tensor& x);
  PackableLinear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(SwiGLU);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const TransformerOptions& o);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& positions);
  RMSNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  SwiGLU ffn{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerLMImpl : public torch::nn::Module {
 public:
  explicit TransformerLMImpl(const TransformerOptions& o);
  // tokens: (B, T) int64 -> logits (B, T, vocab).
  at::Tensor forward(const at::Tensor& tokens);

  torch::nn::Embedding token_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm ln_final{nullptr};
  PackableLinear lm_head{nullptr};

 private:
  TransformerOptions options_;
};
TORCH_MODULE(TransformerLM);

Family TransformerFamily();

}  // namespace ltb
