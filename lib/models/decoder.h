// One decoder-only language model for every decoder family (Transformer,
// GPT2, Llama): a row of settings (DecoderOptions) over shared blocks, with
// the module names of the family's reference model (DecoderNames) so that
// parameter names and checkpoints match it. decoder_family.h turns a row
// into a benchmark family; models/README.md says how to add one.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "layers/packed_linear.h"

namespace ltb {

enum class NormKind { kLayer, kRms };  // LayerNorm (with bias), RMSNorm
inline constexpr const char* kNormNames[] = {"layer", "rms"};
// Learned: an embedding of positions added to the tokens'. RopePairs:
// rotary, adjacent pairs (0,1), (2,3), ... rotated, cos/sin tables computed
// once (in float64) as buffers of each attention. RopeHalf: Hugging Face's
// Llama rotary, the two halves of a head rotated together, one model-level
// fp32 inv_freq (Llama 3's scaling when rope_factor > 0). None: the caller
// adds them before the blocks (Whisper's encoder, fixed sinusoids).
enum class PositionKind { kLearned, kRopePairs, kRopeHalf, kNone };
inline constexpr const char* kPositionNames[] = {"learned", "rope_pairs", "rope_half",
                                                 "none"};
// fc, gelu(tanh), proj; down(silu(gate) * up); fc, gelu (exact), proj (Whisper).
enum class MlpKind { kGeluTanh, kSwiGLU, kGelu };
inline constexpr const char* kMlpNames[] = {"gelu_tanh", "swiglu", "gelu"};

struct DecoderOptions {
  // kv heads: `heads`; head size: d_model / heads.
  DecoderOptions(int64_t vocab_size, int64_t d_model, int64_t d_ff, int64_t num_layers,
                 int64_t num_heads)
      : vocab_size_(vocab_size),
        d_model_(d_model),
        d_ff_(d_ff),
        num_layers_(num_layers),
        num_heads_(num_heads),
        num_kv_heads_(num_heads),
        head_dim_(num_heads > 0 ? d_model / num_heads : 0) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, d_ff);
  TORCH_ARG(int64_t, num_layers);
  TORCH_ARG(int64_t, num_heads);
  TORCH_ARG(int64_t, num_kv_heads);
  TORCH_ARG(int64_t, head_dim);
  // Positions the model handles: a learned table's rows, the pair tables'
  // length, or the context of a RopeHalf model.
  TORCH_ARG(int64_t, max_positions) = 1024;
  TORCH_ARG(NormKind, norm) = NormKind::kRms;
  TORCH_ARG(double, eps) = 1e-5;
  TORCH_ARG(PositionKind, positions) = PositionKind::kRopePairs;
  TORCH_ARG(double, rope_theta) = 10000.0;
  // Llama 3's RoPE scaling (0: none): inverse frequencies of wavelengths over
  // original_context / low_freq_factor divided by the factor, under
  // original_context / high_freq_factor kept, smoothed between.
  TORCH_ARG(double, rope_factor) = 0.0;
  TORCH_ARG(double, low_freq_factor) = 1.0;
  TORCH_ARG(double, high_freq_factor) = 4.0;
  TORCH_ARG(int64_t, original_context) = 8192;
  TORCH_ARG(MlpKind, mlp) = MlpKind::kSwiGLU;
  TORCH_ARG(bool, bias) = false;       // every linear layer of the blocks
  TORCH_ARG(bool, qkv_bias) = false;   // q, k and v only (Qwen2)
  TORCH_ARG(bool, k_bias) = true;      // false: k's alone has none (Whisper's key)
  TORCH_ARG(bool, fused_qkv) = false;  // one (d, 3d) projection (GPT-2's c_attn)
  TORCH_ARG(bool, tied) = false;       // the head is the token embedding
  TORCH_ARG(bool, causal) = true;      // false: self-attention sees every position
  // Positions of an encoder's output that every block cross-attends to,
  // after its self-attention (Whisper's audio_ctx); 0: no cross-attention.
  TORCH_ARG(int64_t, cross_positions) = 0;
  // Fused: LibTorch's scaled_dot_product_attention; else the explicit
  // composition, which profilers count as matmuls.
  TORCH_ARG(bool, fused_attention) = true;
};

// The reference model's attribute names, and how its weights are drawn.
struct DecoderNames {
  std::string trunk;  // "" or the submodule holding embed..final_norm ("model")
  std::string embed, pos_embed, layers, final_norm, head;
  std::string rope;  // RopeHalf: the trunk's rotary; RopePairs: each attention's
  std::string norm1, norm2, attn, mlp;
  std::string cross_norm, cross;  // cross-attention's
  std::string q, k, v, o, qkv;    // qkv: fused_qkv's projection
  std::string gate, up, down;     // GeluTanh: up (fc) and down (proj)
  // The order the reference builds its MLP's matrices in (which decides the
  // weights LibTorch's initialisers draw) and projects q, k and v in (which
  // decides how autograd sums their gradients): its weights and gradients
  // stay bit-identical.
  bool down_before_up = false;  // gate, down, up (the Transformer's w1, w2, w3)
  bool v_first = false;         // v, q, k (transformers' Llama)
  // Hugging Face's initialisation (InitLikeHuggingFace, std 0.02, these
  // matrices' std scaled by 1 / sqrt(2 layers)); else LibTorch's default
  // initialisers in construction order.
  bool hf_init = true;
  std::vector<std::string> residual_scaled;
  // false: nothing drawn, the weights left uninitialised (untouched memory,
  // not yet resident) for a checkpoint to fill (--weights), and the default
  // generator as it was.
  bool draw = true;
};

// Parameters: L(d q + 2 d k + q d + MLP + norms + biases, and as much
// again for cross-attention) + V d (+ V d untied) + positions d + final norm,
// q = heads x head size, k = kv heads x head size.
int64_t DecoderParamCount(const DecoderOptions& o);
// FLOPs of one layer for `tokens` queries over `keys` keys (2 per
// multiply-add): q and o (d x q), k and v (d x k), QK^T and AV, the MLP's
// two or three matrices; cross-attention's q and o, and QK^T and AV over
// cross_positions keys (its k and v are the encoder output's, computed once).
double DecoderLayerFlops(const DecoderOptions& o, double batch, double tokens,
                         double keys);
// Every position's logits of (batch, seq) tokens; backward is 2x this.
double DecoderForwardFlops(const DecoderOptions& o, int64_t batch, int64_t seq);
// What DecoderLayerFlops counts of `tokens` causal queries over themselves
// that a fused causal kernel skips: QK^T and AV above the diagonal, every
// layer.
double DecoderMaskedFlops(const DecoderOptions& o, double batch, double tokens);
// Plan::count_beyond_arithmetic for a count of `counted` FLOPs holding
// `masked` FLOPs of masked scores: kCausalAttentionCount and their share.
std::string CausalCountReason(double masked, double counted);
// Greedy generation after `depth` cached tokens: the prompt attending to
// depth + prompt keys with logits of its last position only, then
// new_tokens - 1 single-token steps, step i attending to depth + prompt + i.
double DecoderGenerateFlops(const DecoderOptions& o, int64_t batch, int64_t prompt,
                            int64_t new_tokens, int64_t depth = 0);

// Keys and values of every layer, (B, kv heads, positions, head size) each,
// allocated once and written in place as positions fill; and those of the
// encoder output that cross-attention reads, (B, heads, cross positions,
// head size), computed once per input.
struct KVCache {
  std::vector<at::Tensor> keys, values;
  std::vector<at::Tensor> cross_keys, cross_values;
  std::vector<at::Tensor> tensors() const;  // all of them, in that order
};

class NormImpl : public torch::nn::Module {
 public:
  NormImpl(NormKind kind, int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;  // bias: LayerNorm only

 private:
  NormKind kind_;
  double eps_;
};
TORCH_MODULE(Norm);

// The rotary embedding of either kind: RopePairs' cos/sin tables (buffers,
// fp32) or RopeHalf's inv_freq (a buffer that stays fp32 whatever the
// model's dtype, as transformers' from_pretrained(torch_dtype=...) keeps it:
// rounded to bf16, position 2047's angles turn by whole radians).
class RotaryImpl : public torch::nn::Module {
 public:
  explicit RotaryImpl(const DecoderOptions& o);
  // (cos, sin) of `positions` (T), (T, head size / 2) each: RopePairs'
  // fp32 rows; RopeHalf's fp32 angles cast to `dtype`.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& positions,
                                            c10::ScalarType dtype);
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  using torch::nn::Module::to;
  at::Tensor cos, sin, inv_freq;

 private:
  PositionKind kind_;
};
TORCH_MODULE(Rotary);

// x (..., T, hs) rotated by (cos, sin) of its positions: RopePairs in x's
// dtype; RopeHalf in the wider of x's and cos's, as PyTorch promotes.
at::Tensor ApplyRotary(PositionKind kind, const at::Tensor& x,
                       const std::pair<at::Tensor, at::Tensor>& cs);

// Llama 3's scaled inverse frequencies as transformers computes them (fp32),
// (head size / 2); unscaled when rope_factor is 0.
at::Tensor RopeInverseFrequencies(const DecoderOptions& o);

// Where one forward is: the positions (T), RopeHalf's (cos, sin) of them,
// for a cached forward the layer's cache and the first position, and the
// keys and values the layer cross-attends to.
struct LayerInput {
  at::Tensor positions;
  std::pair<at::Tensor, at::Tensor> rope;
  at::Tensor* cache_k = nullptr;
  at::Tensor* cache_v = nullptr;
  int64_t position = 0;
  at::Tensor cross_k, cross_v;
  // A decode step over slots (forward_slots): row b's one token is at
  // positions[b] (S); its key and value go to the cache at that position,
  // and it attends to the first `keys` cached positions through `slot_mask`
  // (S, 1, 1, keys), true up to its own position. Undefined: every row at
  // `position`.
  at::Tensor slot_mask;
  int64_t keys = 0;
};

class DecoderAttentionImpl : public torch::nn::Module {
 public:
  DecoderAttentionImpl(const DecoderOptions& o, const DecoderNames& n);
  // x: (B, T, d) at positions [position, position + T). With a cache, writes
  // this chunk's keys and values and attends to every cached position before
  // it; without, causal over the chunk (unless the model is not causal).
  at::Tensor forward(const at::Tensor& x, const LayerInput& in);
  // Keys and values of an encoder output xa (B, S, d), (B, heads, S, hs) each.
  std::pair<at::Tensor, at::Tensor> KeysValues(const at::Tensor& xa);
  // Cross-attention of x (B, T, d) over KeysValues' keys and values.
  at::Tensor Cross(const at::Tensor& x, const at::Tensor& k, const at::Tensor& v);
  PackableLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr},
      qkv_proj{nullptr};
  Rotary rope{nullptr};  // RopePairs: this attention's tables

 private:
  at::Tensor Heads(const at::Tensor& y,
                   int64_t n) const;            // (B, T, n hs) -> (B, n, T, hs)
  at::Tensor Merge(const at::Tensor& y) const;  // (B, nh, T, hs) -> (B, T, q)
  // forward_slots' attention: q, k, v (S, heads, 1, hs) rotated; writes
  // each row's key and value at its own position and attends under the mask.
  at::Tensor SlotStep(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const LayerInput& in);
  int64_t heads_, kv_heads_, head_dim_;
  PositionKind positions_;
  bool fused_, v_first_, causal_;
};
TORCH_MODULE(DecoderAttention);

class DecoderMlpImpl : public torch::nn::Module {
 public:
  DecoderMlpImpl(const DecoderOptions& o, const DecoderNames& n);
  at::Tensor forward(const at::Tensor& x);
  PackableLinear gate{nullptr}, up{nullptr}, down{nullptr};

 private:
  MlpKind kind_;
};
TORCH_MODULE(DecoderMlp);

class DecoderBlockImpl : public torch::nn::Module {
 public:
  DecoderBlockImpl(const DecoderOptions& o, const DecoderNames& n);
  at::Tensor forward(const at::Tensor& x, const LayerInput& in);
  Norm norm1{nullptr}, norm2{nullptr}, cross_norm{nullptr};
  DecoderAttention attn{nullptr}, cross{nullptr};
  DecoderMlp mlp{nullptr};
};
TORCH_MODULE(DecoderBlock);

class DecoderLMImpl : public torch::nn::Module {
 public:
  DecoderLMImpl(const DecoderOptions& o, const DecoderNames& n);
  // tokens (B, T) at positions [0, T) -> logits (B, T, V); no cache.
  at::Tensor forward(const at::Tensor& tokens);
  // tokens (B, T) at positions [position, position + T), using and filling
  // the cache; logits of the last position only, (B, V).
  at::Tensor forward_cached(const at::Tensor& tokens, int64_t position, KVCache& cache);
  // One decode step of slots at positions of their own (continuous
  // batching): tokens (S, 1), row b at positions[b], using and filling rows
  // [0, S) of the cache; logits (S, V). Each row attends to its own
  // positions only, so what earlier sequences left in its row beyond them
  // is never read into its result (if finite: masked scores weigh 0).
  at::Tensor forward_slots(const at::Tensor& tokens,
                           const std::vector<int64_t>& positions, KVCache& cache);
  // The same step in shapes that do not depend on the positions, which a
  // CUDA graph can capture: positions (S) on the device, and every row
  // attending over the first `keys` cached positions (more than any row's
  // position; its own through the mask). forward_slots is this step with
  // keys one past the largest position.
  at::Tensor forward_slots_over(const at::Tensor& tokens, const at::Tensor& positions,
                                int64_t keys, KVCache& cache);
  KVCache MakeCache(int64_t batch, int64_t positions) const;

  const DecoderOptions& options() const { return options_; }
  DecoderBlockImpl& block(size_t i) { return *layers[i]->as<DecoderBlock>(); }

  torch::nn::Embedding embed{nullptr}, pos_embed{nullptr};
  torch::nn::ModuleList layers{nullptr};
  Norm final_norm{nullptr};
  Rotary rotary{nullptr};        // RopeHalf
  PackableLinear head{nullptr};  // untied
  TiedHead tied_head{nullptr};   // tied: the embedding's weight

 private:
  // Hidden states of tokens at [position, position + T) after the last
  // block, (B, T, d); the cache used and filled when given.
  at::Tensor Trunk(const at::Tensor& tokens, int64_t position, KVCache* cache);
  at::Tensor Logits(const at::Tensor& hidden);  // the final norm, then the head
  DecoderOptions options_;
};
TORCH_MODULE(DecoderLM);

// Rows [first, first + count) of a cache, as views that write into it: a
// prefill of one sequence into its slot runs forward_cached on them.
KVCache CacheRows(const KVCache& cache, int64_t first, int64_t count);
// Copies row `from`'s first `length` positions to row `to` in every layer.
void MoveCacheRow(KVCache& cache, int64_t from, int64_t to, int64_t length);

// Greedy generation of `new_tokens` after `prompt` (B, P): the prompt in one
// pass filling the cache, then one token a step. Returns (B, new_tokens).
at::Tensor GenerateWithCache(DecoderLM& model, const at::Tensor& prompt,
                             int64_t new_tokens);
// The same tokens by recomputing the whole sequence every step (no cache).
at::Tensor GenerateByRecompute(DecoderLM& model, const at::Tensor& prompt,
                               int64_t new_tokens);
// Both for any model: `step(tokens, position)` gives the logits of the last
// of tokens at [position, position + T) (B, V), filling its cache;
// `logits(tokens)` those of every position from 0 (B, T, V), with no cache.
at::Tensor GreedyWithCache(
    const std::function<at::Tensor(const at::Tensor&, int64_t)>& step,
    const at::Tensor& prompt, int64_t new_tokens);
at::Tensor GreedyByRecompute(const std::function<at::Tensor(const at::Tensor&)>& logits,
                             const at::Tensor& prompt, int64_t new_tokens);

// Random weights as Hugging Face initialises GPT-2 and Llama
// (PreTrainedModel._init_weights): every matrix and embedding from
// N(0, std), every bias zero, every norm's weight one; a matrix whose name
// ends in one of `residual` (GPT-2's c_proj.weight) from
// N(0, std / sqrt(2 layers)). LibTorch's defaults would draw the embedding,
// which these models tie to their output layer, from N(0, 1): logits in the
// hundreds, whose softmax holds denormal probabilities, and a training step
// whose backward slows several times over as they multiply.
//
// Drawn on the run's threads, with values that depend on the seed alone: one
// 64-bit base from the default generator (all this takes from it), then the
// matrices in the order of their sorted names, each flattened and cut into
// chunks of kInitChunk elements, chunk k of them all (counted across the
// matrices) drawn by normal_ from its own generator seeded InitChunkSeed(base,
// k). init_like_hugging_face (tools/ltb/pysuite/models/common.py) draws the
// same way, so that one seed gives both sides the same weights.
void InitLikeHuggingFace(torch::nn::Module& module, double std, int64_t layers,
                         const std::vector<std::string>& residual = {});

// Elements a chunk of InitLikeHuggingFace draws with one generator.
inline constexpr int64_t kInitChunk = int64_t{1} << 20;

// The seed of chunk `k`'s generator: murmur3's 32-bit finaliser of
// base + k (mod 2^32), a bijection, so no two chunks of a model share a seed.
// 32 bits because a CPU generator (MT19937) keeps only those of its seed.
uint32_t InitChunkSeed(uint64_t base, int64_t k);

}  // namespace ltb
