// The GPT2 family (shared/MODELS.md, "GPT2"): GPT-2 with learned positions,
// LayerNorm, GELU (tanh) and an LM head tied to the token embedding, plus
// greedy generation with a key/value cache written in place.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "layers/packed_linear.h"
#include "models/decoder_generation.h"
#include "models/weights.h"

namespace ltb {

struct GPT2Options {
  GPT2Options(int64_t vocab_size, int64_t d_model, int64_t num_layers, int64_t num_heads)
      : vocab_size_(vocab_size),
        d_model_(d_model),
        num_layers_(num_layers),
        num_heads_(num_heads) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, num_layers);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(int64_t, max_positions) = 1024;
  TORCH_ARG(double, eps) = 1e-5;
  // Fused: LibTorch's scaled_dot_product_attention; else the explicit
  // composition, which profilers count as matmuls.
  TORCH_ARG(bool, fused_attention) = true;
};

struct GPT2Size {
  std::string name;
  GPT2Options options;
  int64_t card_params;  // shared/MODELS.md
};

// nano, small, medium, large, xl.
const std::vector<GPT2Size>& GPT2Sizes();
absl::StatusOr<GPT2Options> GPT2SizeOptions(const std::string& size);

// Vd + 1024 d + L(12 d^2 + 13 d) + 2d.
int64_t GPT2ParamCount(const GPT2Options& o);

// Forward FLOPs of (batch, seq) tokens with logits for every position:
// L(24 B T d^2 + 4 B T^2 d) + 2 B T d V.
double GPT2ForwardFlops(const GPT2Options& o, int64_t batch, int64_t seq);

// FLOPs of greedy generation after `depth` cached tokens: the prompt
// attending to depth + P keys with logits for its last position only, then
// N - 1 single-token steps, step i attending to depth + P + i keys.
double GPT2GenerateFlops(const GPT2Options& o, int64_t batch, int64_t prompt,
                         int64_t new_tokens, int64_t depth = 0);

class GPT2AttentionImpl : public torch::nn::Module {
 public:
  explicit GPT2AttentionImpl(const GPT2Options& o);
  // x: (B, T, d). With a cache, writes this chunk's keys and values at
  // positions [position, position + T) and attends to everything before;
  // a chunk longer than one token must start at position 0.
  at::Tensor forward(const at::Tensor& x, at::Tensor* cache_k = nullptr,
                     at::Tensor* cache_v = nullptr, int64_t position = 0);

  PackableLinear c_attn{nullptr}, c_proj{nullptr};

 private:
  int64_t num_heads_;
  bool fused_;
};
TORCH_MODULE(GPT2Attention);

class GPT2MLPImpl : public torch::nn::Module {
 public:
  explicit GPT2MLPImpl(int64_t d_model);
  at::Tensor forward(const at::Tensor& x);
  PackableLinear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(GPT2MLP);

class GPT2BlockImpl : public torch::nn::Module {
 public:
  explicit GPT2BlockImpl(const GPT2Options& o);
  at::Tensor forward(const at::Tensor& x, at::Tensor* cache_k = nullptr,
                     at::Tensor* cache_v = nullptr, int64_t position = 0);
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  GPT2Attention attn{nullptr};
  GPT2MLP mlp{nullptr};
};
TORCH_MODULE(GPT2Block);

class GPT2LMImpl : public torch::nn::Module, public CpuPackable, public Quantizable {
 public:
  explicit GPT2LMImpl(const GPT2Options& o);

  // tokens (B, T) at positions [0, T) -> logits (B, T, V); no cache.
  at::Tensor forward(const at::Tensor& tokens);

  // tokens (B, T) at positions [position, position + T), using and filling
  // the cache; returns logits of the last position only, (B, V).
  at::Tensor forward_cached(const at::Tensor& tokens, int64_t position, KVCache& cache);

  KVCache MakeCache(int64_t batch, int64_t positions) const;

  // Packs the tied LM head for oneDNN (the blocks' layers pack themselves);
  // for CPU inference after the weights are final (see packed_linear.h).
  void PackForCpuInference() override;
  // Quantises a copy of the tied head (the lookup keeps wte in the run's dtype).
  WeightChange Quantize(const Quant& quant) override;

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h;
  torch::nn::LayerNorm ln_f{nullptr};

  const GPT2Options& options() const { return options_; }

 private:
  at::Tensor Logits(const at::Tensor& x);  // tied LM head
  GPT2Options options_;
  PackedLinear head_packed_;
  QuantizedLinear head_quantized_;
};
TORCH_MODULE(GPT2LM);

// How Hugging Face's gpt2 checkpoints name GPT2LM's tensors (--weights): the
// same names, bare or under "transformer." (GPT2LMHeadModel's), Conv1D
// weights stored (in, out), the attention masks old files keep as buffers,
// and the head tied to wte.
WeightNames GPT2CheckpointNames();

Family GPT2Family();

}  // namespace ltb
