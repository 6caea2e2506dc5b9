// The Llama family (shared/MODELS.md, "Llama"): a Llama-3-class decoder with
// grouped-query attention, Llama 3's RoPE frequency scaling, RMSNorm and a
// SwiGLU MLP, under Hugging Face's LlamaForCausalLM parameter names, plus
// greedy generation with a key/value cache of kv heads.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "layers/packed_linear.h"
#include "models/decoder_generation.h"
#include "models/transformer.h"

namespace ltb {

struct LlamaOptions {
  LlamaOptions(int64_t vocab_size, int64_t d_model, int64_t d_ff, int64_t num_layers,
               int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, bool tied,
               double rope_factor)
      : vocab_size_(vocab_size),
        d_model_(d_model),
        d_ff_(d_ff),
        num_layers_(num_layers),
        num_heads_(num_heads),
        num_kv_heads_(num_kv_heads),
        head_dim_(head_dim),
        tied_(tied),
        rope_factor_(rope_factor) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, d_ff);
  TORCH_ARG(int64_t, num_layers);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(int64_t, num_kv_heads);
  TORCH_ARG(int64_t, head_dim);
  TORCH_ARG(bool, tied);  // lm_head is embed_tokens' weight
  // Llama 3's RoPE scaling: inverse frequencies of wavelengths over
  // original_context / low_freq_factor divided by the factor, under
  // original_context / high_freq_factor kept, smoothed between.
  TORCH_ARG(double, rope_factor);
  TORCH_ARG(double, rope_theta) = 500000.0;
  TORCH_ARG(double, low_freq_factor) = 1.0;
  TORCH_ARG(double, high_freq_factor) = 4.0;
  TORCH_ARG(int64_t, original_context) = 8192;
  TORCH_ARG(double, eps) = 1e-5;
  TORCH_ARG(bool, fused_attention) = true;
};

struct LlamaSize {
  std::string name;
  LlamaOptions options;
  int64_t card_params;  // shared/MODELS.md
};

// nano, 1B, 3B, 8B.
const std::vector<LlamaSize>& LlamaSizes();
absl::StatusOr<LlamaOptions> LlamaSizeOptions(const std::string& size);

// L(2d^2 + 2 d k + 3 d d_ff + 2d) + Vd (+ Vd untied) + d, k = kv heads x
// head size.
int64_t LlamaParamCount(const LlamaOptions& o);

// FLOPs of one layer for `tokens` queries over `keys` keys (2 per
// multiply-add): q and o (d x heads*hs), k and v (d x k), QK^T and AV, the
// three MLP matrices.
double LlamaLayerFlops(const LlamaOptions& o, double batch, double tokens, double keys);
// Every position's logits of (batch, seq) tokens.
double LlamaForwardFlops(const LlamaOptions& o, int64_t batch, int64_t seq);
// Greedy generation after `depth` cached tokens: the prompt attending to
// depth + prompt keys with logits of its last position only, then
// new_tokens - 1 single-token steps, step i attending to depth + prompt + i
// keys.
double LlamaGenerateFlops(const LlamaOptions& o, int64_t batch, int64_t prompt,
                          int64_t new_tokens, int64_t depth = 0);

// Positions a Llama 3 model handles (max_position_embeddings).
constexpr int64_t kLlamaContext = 131072;

// The inverse frequencies of Llama 3's scaled RoPE, as Hugging Face computes
// them (fp32), (head_dim / 2).
at::Tensor LlamaInverseFrequencies(const LlamaOptions& o);

// Hugging Face's LlamaRotaryEmbedding: one for the model, holding the
// inverse frequencies (a buffer of head size / 2 floats, the only one the
// model has); the cos and sin of each position are computed once a forward,
// in fp32, then cast to the hidden states' dtype.
class LlamaRotaryImpl : public torch::nn::Module {
 public:
  explicit LlamaRotaryImpl(const LlamaOptions& o);
  // (cos, sin) of `positions` (T), (T, hs / 2) each, in `dtype`.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& positions,
                                            c10::ScalarType dtype);
  // The inverse frequencies move with the model but stay fp32 whatever its
  // dtype, as transformers' from_pretrained(torch_dtype=...) keeps them:
  // rounded to bf16, they turn position 2047's angles by whole radians.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  using torch::nn::Module::to;
  at::Tensor inv_freq;
};
TORCH_MODULE(LlamaRotary);

// x: (B, heads, T, hs) rotated by (cos, sin) of its positions, Hugging
// Face's rotate_half: the two halves of a head rotate together. The result
// takes the wider of x's and cos's dtypes, as in PyTorch.
at::Tensor ApplyLlamaRotary(const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaOptions& o);
  // x: (B, T, d) at positions [position, position + T), whose (cos, sin)
  // are `rope`. With a cache (B, kv heads, P, hs), writes this chunk's keys
  // and values and attends to every cached position before it; without,
  // causal over the chunk.
  at::Tensor forward(const at::Tensor& x, const std::pair<at::Tensor, at::Tensor>& rope,
                     at::Tensor* cache_k = nullptr, at::Tensor* cache_v = nullptr,
                     int64_t position = 0);
  PackableLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_;
  bool fused_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMLPImpl : public torch::nn::Module {
 public:
  LlamaMLPImpl(int64_t d_model, int64_t d_ff);
  at::Tensor forward(const at::Tensor& x);
  PackableLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

class LlamaLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaLayerImpl(const LlamaOptions& o);
  at::Tensor forward(const at::Tensor& x, const std::pair<at::Tensor, at::Tensor>& rope,
                     at::Tensor* cache_k = nullptr, at::Tensor* cache_v = nullptr,
                     int64_t position = 0);
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
};
TORCH_MODULE(LlamaLayer);

// Hugging Face's LlamaModel: embed_tokens, layers, norm, rotary_emb.
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaOptions& o);
  // tokens (B, T) at positions [position, position + T) -> hidden states
  // (B, T, d) after the final norm; with a cache, using and filling it.
  at::Tensor forward(const at::Tensor& tokens, int64_t position = 0,
                     KVCache* cache = nullptr);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  LlamaRotary rotary_emb{nullptr};
};
TORCH_MODULE(LlamaModel);

// LlamaForCausalLM: `model` and, untied, `lm_head`.
class LlamaLMImpl : public torch::nn::Module, public CpuPackable, public Quantizable {
 public:
  explicit LlamaLMImpl(const LlamaOptions& o);
  // tokens (B, T) at positions [0, T) -> logits (B, T, V); no cache.
  at::Tensor forward(const at::Tensor& tokens);
  // tokens (B, T) at positions [position, position + T), using and filling
  // the cache; logits of the last position, (B, V).
  at::Tensor forward_cached(const at::Tensor& tokens, int64_t position, KVCache& cache);
  KVCache MakeCache(int64_t batch, int64_t positions) const;
  void PackForCpuInference() override;
  // Tied: quantises a copy of the head (the lookup keeps the embedding in
  // the run's dtype); untied, lm_head quantises itself.
  WeightChange Quantize(const Quant& quant) override;

  LlamaModel model{nullptr};
  PackableLinear lm_head{nullptr};  // untied sizes only
  const LlamaOptions& options() const { return options_; }

 private:
  at::Tensor Logits(const at::Tensor& y);  // of the final norm's output
  LlamaOptions options_;
  PackedLinear head_packed_;
  QuantizedLinear head_quantized_;
};
TORCH_MODULE(LlamaLM);

Family LlamaFamily();

}  // namespace ltb
