#include "models/decoder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "family/family.h"
#include "models/attention.h"

namespace ltb {

namespace {

int64_t QueryWidth(const DecoderOptions& o) { return o.num_heads() * o.head_dim(); }
int64_t KvWidth(const DecoderOptions& o) { return o.num_kv_heads() * o.head_dim(); }
int64_t MlpMatrices(const DecoderOptions& o) {
  return o.mlp() == MlpKind::kSwiGLU ? 3 : 2;
}

}  // namespace

int64_t DecoderParamCount(const DecoderOptions& o) {
  const int64_t d = o.d_model(), f = o.d_ff(), v = o.vocab_size();
  const int64_t q = QueryWidth(o), k = KvWidth(o);
  const int64_t norm = o.norm() == NormKind::kLayer ? 2 * d : d;
  const int64_t qkv_biases = o.bias() || o.qkv_bias() ? q + (o.k_bias() ? 2 : 1) * k : 0;
  // An attention with the norm before it; the MLP's with its norm.
  const int64_t attention =
      2 * d * q + 2 * d * k + qkv_biases + (o.bias() ? d : 0) + norm;
  const int64_t mlp_biases = o.bias() ? (o.mlp() == MlpKind::kSwiGLU ? 2 * f : f) + d : 0;
  const int64_t layer = attention * (o.cross_positions() > 0 ? 2 : 1) +
                        MlpMatrices(o) * d * f + mlp_biases + norm;
  return o.num_layers() * layer + v * d + (o.tied() ? 0 : v * d) +
         (o.positions() == PositionKind::kLearned ? o.max_positions() * d : 0) + norm;
}

double DecoderLayerFlops(const DecoderOptions& o, double batch, double tokens,
                         double keys) {
  const double d = o.d_model(), f = o.d_ff();
  const auto q = static_cast<double>(QueryWidth(o));
  const auto k = static_cast<double>(KvWidth(o));
  const double projections = 2 * batch * tokens * d * (2 * q + 2 * k);  // q, o; k, v
  const double attention = 2 * batch * tokens * keys * q * 2;           // QK^T, AV
  const double mlp = 2 * batch * tokens * d * f * static_cast<double>(MlpMatrices(o));
  const double cross =  // q, o; QK^T, AV
      2 * batch * tokens * d * 2 * q + 2 * batch * tokens * o.cross_positions() * q * 2;
  return projections + attention + mlp + (o.cross_positions() > 0 ? cross : 0);
}

double DecoderForwardFlops(const DecoderOptions& o, int64_t batch, int64_t seq) {
  return o.num_layers() * DecoderLayerFlops(o, batch, seq, seq) +
         2.0 * batch * seq * o.d_model() * o.vocab_size();
}

double DecoderMaskedFlops(const DecoderOptions& o, double batch, double tokens) {
  return o.num_layers() * 2 * batch * (tokens * (tokens - 1) / 2) *
         static_cast<double>(QueryWidth(o)) * 2;
}

std::string CausalCountReason(double masked, double counted) {
  return absl::StrCat(kCausalAttentionCount,
                      absl::StrFormat(" (%.2g%% of this count)",
                                      counted > 0 ? 100 * masked / counted : 0.0));
}

double DecoderGenerateFlops(const DecoderOptions& o, int64_t batch, int64_t prompt,
                            int64_t new_tokens, int64_t depth) {
  const double head = 2.0 * batch * o.d_model() * o.vocab_size();
  double flops =
      o.num_layers() * DecoderLayerFlops(o, batch, prompt, depth + prompt) + head;
  for (int64_t i = 1; i < new_tokens; ++i) {
    flops += o.num_layers() * DecoderLayerFlops(o, batch, 1, depth + prompt + i) + head;
  }
  return flops;
}

// ---------------------------------------------------------------- modules

std::vector<at::Tensor> KVCache::tensors() const {
  std::vector<at::Tensor> all;
  for (const auto* part : {&keys, &values, &cross_keys, &cross_values}) {
    all.insert(all.end(), part->begin(), part->end());
  }
  return all;
}

NormImpl::NormImpl(NormKind kind, int64_t dim, double eps) : kind_(kind), eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
  if (kind == NormKind::kLayer) bias = register_parameter("bias", torch::zeros({dim}));
}

at::Tensor NormImpl::forward(const at::Tensor& x) {
  if (kind_ == NormKind::kLayer) {
    return at::layer_norm(x, {weight.size(0)}, weight, bias, eps_);
  }
  // Normalise in fp32 whatever the activation dtype, as the references do.
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor rms = xf.pow(2).mean(-1, /*keepdim=*/true).add(eps_).rsqrt();
  return (xf * rms).to(x.scalar_type()) * weight;
}

at::Tensor RopeInverseFrequencies(const DecoderOptions& o) {
  // As transformers' _compute_llama3_parameters, in fp32.
  const int64_t dim = o.head_dim();
  const at::Tensor inv_freq =
      1.0 / torch::pow(o.rope_theta(),
                       torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / dim);
  if (o.rope_factor() <= 0) return inv_freq;
  const double low_wavelen = o.original_context() / o.low_freq_factor();
  const double high_wavelen = o.original_context() / o.high_freq_factor();
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled =
      torch::where(wavelen > low_wavelen, inv_freq / o.rope_factor(), inv_freq);
  const at::Tensor smooth = (o.original_context() / wavelen - o.low_freq_factor()) /
                            (o.high_freq_factor() - o.low_freq_factor());
  const at::Tensor smoothed = (1 - smooth) * scaled / o.rope_factor() + smooth * scaled;
  const at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

RotaryImpl::RotaryImpl(const DecoderOptions& o) : kind_(o.positions()) {
  TORCH_CHECK(o.head_dim() % 2 == 0, "RoPE needs an even head size, got ", o.head_dim());
  if (kind_ == PositionKind::kRopeHalf) {
    inv_freq = register_buffer("inv_freq", RopeInverseFrequencies(o));
    return;
  }
  const int64_t hd = o.head_dim();
  const at::Tensor freq =
      torch::pow(o.rope_theta(), -torch::arange(0, hd, 2, torch::kDouble) / hd);
  const at::Tensor angles =
      torch::outer(torch::arange(o.max_positions(), torch::kDouble), freq);
  cos = register_buffer("cos", angles.cos().to(torch::kFloat));  // (P, hd/2)
  sin = register_buffer("sin", angles.sin().to(torch::kFloat));
}

void RotaryImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  if (kind_ == PositionKind::kRopeHalf) {
    torch::nn::Module::to(device, non_blocking);
  } else {
    torch::nn::Module::to(device, dtype, non_blocking);
  }
}

void RotaryImpl::to(torch::Dtype dtype, bool non_blocking) {
  if (kind_ != PositionKind::kRopeHalf) torch::nn::Module::to(dtype, non_blocking);
}

std::pair<at::Tensor, at::Tensor> RotaryImpl::forward(const at::Tensor& positions,
                                                      c10::ScalarType dtype) {
  if (kind_ == PositionKind::kRopePairs) {
    return {cos.index_select(0, positions), sin.index_select(0, positions)};
  }
  // fp32 products of position and frequency, as transformers computes them.
  const at::Tensor angles =
      torch::outer(positions.to(at::kFloat), inv_freq);  // (T, hs/2)
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

at::Tensor ApplyRotary(PositionKind kind, const at::Tensor& x,
                       const std::pair<at::Tensor, at::Tensor>& cs) {
  if (kind == PositionKind::kRopeHalf) {  // transformers' rotate_half
    const auto& [c, s] = cs;
    const int64_t half = x.size(-1) / 2;
    const at::Tensor x1 = x.narrow(-1, 0, half);
    const at::Tensor x2 = x.narrow(-1, half, half);
    return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
  }
  const at::Tensor c = cs.first.to(x.scalar_type());
  const at::Tensor s = cs.second.to(x.scalar_type());
  auto shape = x.sizes().vec();
  shape.back() /= 2;
  shape.push_back(2);
  const at::Tensor pairs = x.reshape(shape);  // (..., T, hd/2, 2)
  const at::Tensor x0 = pairs.select(-1, 0);  // (..., T, hd/2)
  const at::Tensor x1 = pairs.select(-1, 1);
  return torch::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1)
      .flatten(-2);  // (..., T, hd)
}

namespace {

// A linear layer drawn by LibTorch's initialiser now, or allocated for
// InitLikeHuggingFace to draw later (or a checkpoint to fill).
PackableLinear MakeLinear(const DecoderNames& n, int64_t in, int64_t out, bool bias) {
  const auto options = torch::nn::LinearOptions(in, out).bias(bias);
  if (!n.hf_init && n.draw) return PackableLinear(options);
  // Built with no output features: its initialisation fills no element and
  // draws nothing; then the parameters take their shapes, uninitialised.
  PackableLinear linear(torch::nn::LinearOptions(in, 0).bias(bias));
  c10::NoGradGuard no_grad;
  linear->options = options;
  const at::TensorOptions like = linear->weight.options();
  linear->weight.set_data(at::empty({out, in}, like));
  if (bias) linear->bias.set_data(at::empty({out}, like));
  return linear;
}

torch::nn::Embedding MakeEmbedding(const DecoderNames& n, int64_t count, int64_t dim) {
  if (!n.hf_init && n.draw) return torch::nn::Embedding(count, dim);
  // Given its weight, an embedding keeps it rather than drawing one.
  return torch::nn::Embedding(
      torch::nn::EmbeddingOptions(count, dim)._weight(at::empty({count, dim})));
}

}  // namespace

DecoderAttentionImpl::DecoderAttentionImpl(const DecoderOptions& opt,
                                           const DecoderNames& n)
    : heads_(opt.num_heads()),
      kv_heads_(opt.num_kv_heads()),
      head_dim_(opt.head_dim()),
      positions_(opt.positions()),
      fused_(opt.fused_attention()),
      v_first_(n.v_first),
      causal_(opt.causal()) {
  TORCH_CHECK(heads_ % kv_heads_ == 0, "kv heads (", kv_heads_, ") must divide heads (",
              heads_, ")");
  const int64_t d = opt.d_model(), width = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
  const bool qkv_bias = opt.bias() || opt.qkv_bias();
  if (opt.fused_qkv()) {
    TORCH_CHECK(kv == width && opt.k_bias(),
                "a fused q/k/v projection needs as many kv heads as heads, and k's bias");
    qkv_proj = register_module(n.qkv, MakeLinear(n, d, 3 * width, qkv_bias));
  } else {
    q_proj = register_module(n.q, MakeLinear(n, d, width, qkv_bias));
    k_proj = register_module(n.k, MakeLinear(n, d, kv, qkv_bias && opt.k_bias()));
    v_proj = register_module(n.v, MakeLinear(n, d, kv, qkv_bias));
  }
  o_proj = register_module(n.o, MakeLinear(n, width, d, opt.bias()));
  if (positions_ == PositionKind::kRopePairs) rope = register_module(n.rope, Rotary(opt));
}

at::Tensor DecoderAttentionImpl::Heads(const at::Tensor& y, int64_t n) const {
  return y.view({y.size(0), y.size(1), n, head_dim_}).transpose(1, 2);
}

at::Tensor DecoderAttentionImpl::Merge(const at::Tensor& y) const {
  return y.transpose(1, 2).reshape({y.size(0), y.size(2), heads_ * head_dim_});
}

std::pair<at::Tensor, at::Tensor> DecoderAttentionImpl::KeysValues(const at::Tensor& xa) {
  return {Heads(k_proj(xa), kv_heads_), Heads(v_proj(xa), kv_heads_)};
}

at::Tensor DecoderAttentionImpl::Cross(const at::Tensor& x, const at::Tensor& k,
                                       const at::Tensor& v) {
  const at::Tensor q = Heads(q_proj(x), heads_);
  return o_proj(Merge(Attention(q, k, v, /*causal=*/false, fused_)));
}

at::Tensor DecoderAttentionImpl::forward(const at::Tensor& x, const LayerInput& in) {
  const int64_t b = x.size(0), t = x.size(1), width = heads_ * head_dim_;
  at::Tensor q, k, v;
  if (qkv_proj) {
    const std::vector<at::Tensor> parts = qkv_proj(x).split(width, -1);
    q = Heads(parts[0], heads_), k = Heads(parts[1], kv_heads_);
    v = Heads(parts[2], kv_heads_);
  } else if (v_first_) {
    v = Heads(v_proj(x), kv_heads_);
    q = Heads(q_proj(x), heads_), k = Heads(k_proj(x), kv_heads_);
  } else {
    q = Heads(q_proj(x), heads_), k = Heads(k_proj(x), kv_heads_);
    v = Heads(v_proj(x), kv_heads_);
  }
  // RopePairs: this attention's tables; RopeHalf: the model's (cos, sin).
  // Rotated in the wider of the projections' and the rotary's dtypes (fp32
  // under autocast), as transformers does; then back to v's for the cache
  // and the attention.
  if (positions_ == PositionKind::kRopePairs || positions_ == PositionKind::kRopeHalf) {
    auto cs = rope ? rope(in.positions, x.scalar_type()) : in.rope;
    if (rope && in.slot_mask.defined()) {  // (S, hs/2): one row per slot
      cs = {cs.first.view({b, 1, 1, -1}), cs.second.view({b, 1, 1, -1})};
    }
    q = ApplyRotary(positions_, q, cs).to(v.scalar_type());
    k = ApplyRotary(positions_, k, cs).to(v.scalar_type());
  }
  if (in.slot_mask.defined()) return SlotStep(q, k, v, in);
  if (in.cache_k != nullptr) {
    in.cache_k->narrow(2, in.position, t).copy_(k);
    in.cache_v->narrow(2, in.position, t).copy_(v);
    k = in.cache_k->narrow(2, 0, in.position + t);  // (B, kv, position + T, hs)
    v = in.cache_v->narrow(2, 0, in.position + t);
  }
  if (t == 1 && kv_heads_ != heads_) {
    // Decoding one token: the rep query heads a kv head serves attend to the
    // same keys with no mask, as rep queries of one head would. Grouped so,
    // attention reads the cache in place, where repeating its keys and
    // values to every head (below) would copy rep times the cache each step.
    const int64_t rep = heads_ / kv_heads_;
    const at::Tensor y = Attention(q.reshape({b, kv_heads_, rep, head_dim_}), k, v,
                                   /*causal=*/false, fused_);  // (B, kv, rep, hs)
    return o_proj(y.reshape({b, 1, width}));
  }
  if (kv_heads_ != heads_) {
    // Each kv head serves heads / kv heads query heads in a row (transformers'
    // repeat_kv).
    const int64_t rep = heads_ / kv_heads_, keys = k.size(2);
    k = k.unsqueeze(2)
            .expand({b, kv_heads_, rep, keys, head_dim_})
            .reshape({b, heads_, keys, head_dim_});
    v = v.unsqueeze(2)
            .expand({b, kv_heads_, rep, keys, head_dim_})
            .reshape({b, heads_, keys, head_dim_});
  }
  // A chunk is causal over itself and sees every cached position before it.
  return o_proj(Merge(Attention(q, k, v, causal_ && t > 1, fused_)));  // (B, T, d)
}

at::Tensor DecoderAttentionImpl::SlotStep(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const LayerInput& in) {
  const int64_t b = q.size(0), width = heads_ * head_dim_;
  const at::Tensor rows = torch::arange(b, in.positions.options());
  // Row r's key and value at its own position: (B, P, kv, hs)[r, positions[r]].
  in.cache_k->transpose(1, 2).index_put_({rows, in.positions},
                                         k.select(2, 0));  // (S, kv, hs)
  in.cache_v->transpose(1, 2).index_put_({rows, in.positions}, v.select(2, 0));
  const at::Tensor keys = in.cache_k->narrow(2, 0, in.keys);  // (S, kv, keys, hs)
  const at::Tensor values = in.cache_v->narrow(2, 0, in.keys);
  // As a single-token step: the query heads a kv head serves grouped on it,
  // the cache read in place.
  const int64_t rep = heads_ / kv_heads_;
  const at::Tensor y = MaskedAttention(q.reshape({b, kv_heads_, rep, head_dim_}), keys,
                                       values, in.slot_mask, fused_);  // (S, kv, rep, hs)
  return o_proj(y.reshape({b, 1, width}));
}

DecoderMlpImpl::DecoderMlpImpl(const DecoderOptions& o, const DecoderNames& n)
    : kind_(o.mlp()) {
  const int64_t d = o.d_model(), f = o.d_ff();
  if (kind_ != MlpKind::kSwiGLU) {
    up = register_module(n.up, MakeLinear(n, d, f, o.bias()));
    down = register_module(n.down, MakeLinear(n, f, d, o.bias()));
    return;
  }
  gate = register_module(n.gate, MakeLinear(n, d, f, o.bias()));
  if (n.down_before_up) down = register_module(n.down, MakeLinear(n, f, d, o.bias()));
  up = register_module(n.up, MakeLinear(n, d, f, o.bias()));
  if (!n.down_before_up) down = register_module(n.down, MakeLinear(n, f, d, o.bias()));
}

at::Tensor DecoderMlpImpl::forward(const at::Tensor& x) {
  if (kind_ == MlpKind::kGelu) return down(torch::gelu(up(x)));
  if (kind_ == MlpKind::kGeluTanh) return down(torch::gelu(up(x), "tanh"));
  return down(torch::silu(gate(x)) * up(x));
}

DecoderBlockImpl::DecoderBlockImpl(const DecoderOptions& o, const DecoderNames& n)
    : norm1(register_module(n.norm1, Norm(o.norm(), o.d_model(), o.eps()))),
      norm2(register_module(n.norm2, Norm(o.norm(), o.d_model(), o.eps()))),
      attn(register_module(n.attn, DecoderAttention(o, n))) {
  // Built in the reference's order, which decides the weights LibTorch's
  // initialisers draw: self-attention, cross-attention, the MLP.
  if (o.cross_positions() > 0) {
    cross_norm = register_module(n.cross_norm, Norm(o.norm(), o.d_model(), o.eps()));
    cross = register_module(n.cross, DecoderAttention(o, n));
  }
  mlp = register_module(n.mlp, DecoderMlp(o, n));
}

at::Tensor DecoderBlockImpl::forward(const at::Tensor& x, const LayerInput& in) {
  at::Tensor h = x + attn(norm1(x), in);
  if (cross) h = h + cross->Cross(cross_norm(h), in.cross_k, in.cross_v);
  return h + mlp(norm2(h));
}

DecoderLMImpl::DecoderLMImpl(const DecoderOptions& o, const DecoderNames& n)
    : options_(o) {
  // The trunk's modules sit on this module or on a child (Llama's `model`).
  torch::nn::Module* trunk = this;
  if (!n.trunk.empty()) {
    trunk = register_module(n.trunk, std::make_shared<torch::nn::Module>()).get();
  }
  // Registered in the reference's order: where LibTorch's initialisers draw
  // the weights, the order decides them (the blocks last).
  embed = trunk->register_module(n.embed, MakeEmbedding(n, o.vocab_size(), o.d_model()));
  if (o.positions() == PositionKind::kLearned) {
    pos_embed = trunk->register_module(n.pos_embed,
                                       MakeEmbedding(n, o.max_positions(), o.d_model()));
  }
  layers = trunk->register_module(n.layers, torch::nn::ModuleList());
  final_norm = trunk->register_module(n.final_norm, Norm(o.norm(), o.d_model(), o.eps()));
  if (o.positions() == PositionKind::kRopeHalf) {
    rotary = trunk->register_module(n.rope, Rotary(o));
  }
  if (o.tied()) {
    tied_head = register_module("tied_head", TiedHead(embed->weight));
  } else {
    head = register_module(n.head, MakeLinear(n, o.d_model(), o.vocab_size(), false));
  }
  for (int64_t i = 0; i < o.num_layers(); ++i) layers->push_back(DecoderBlock(o, n));
  if (n.hf_init && n.draw) {
    InitLikeHuggingFace(*this, 0.02, o.num_layers(), n.residual_scaled);
  }
}

at::Tensor DecoderLMImpl::Trunk(const at::Tensor& tokens, int64_t position,
                                KVCache* cache) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(position + t <= options_.max_positions(), "sequence of ", position + t,
              " positions is longer than the model's ", options_.max_positions());
  if (cache != nullptr) {
    TORCH_CHECK(position + t <= cache->keys.front().size(2), "position ", position + t,
                " is beyond the cache of ", cache->keys.front().size(2));
  }
  LayerInput in;
  in.positions = torch::arange(position, position + t,
                               torch::dtype(torch::kLong).device(tokens.device()));
  in.position = position;
  at::Tensor x = embed(tokens);  // (B, T, d)
  if (pos_embed) x = x + pos_embed(in.positions);
  if (rotary) in.rope = rotary(in.positions, x.scalar_type());
  for (size_t i = 0; i < layers->size(); ++i) {
    if (cache != nullptr) in.cache_k = &cache->keys[i], in.cache_v = &cache->values[i];
    x = block(i).forward(x, in);
  }
  return x;
}

at::Tensor DecoderLMImpl::Logits(const at::Tensor& hidden) {
  const at::Tensor y = final_norm(hidden);
  return head ? head(y) : tied_head(y);
}

at::Tensor DecoderLMImpl::forward(const at::Tensor& tokens) {
  return Logits(Trunk(tokens, 0, nullptr));  // (B, T, V)
}

at::Tensor DecoderLMImpl::forward_cached(const at::Tensor& tokens, int64_t position,
                                         KVCache& cache) {
  const at::Tensor x = Trunk(tokens, position, &cache);
  return Logits(x.select(1, tokens.size(1) - 1));  // (B, V): the last position only
}

at::Tensor DecoderLMImpl::forward_slots(const at::Tensor& tokens,
                                        const std::vector<int64_t>& positions,
                                        KVCache& cache) {
  TORCH_CHECK(
      tokens.size(0) == static_cast<int64_t>(positions.size()) && tokens.size(0) > 0,
      "forward_slots takes one token (S, 1) and one position per slot");
  const int64_t keys = *std::max_element(positions.begin(), positions.end()) + 1;
  return forward_slots_over(
      tokens, torch::tensor(positions, torch::kLong).to(tokens.device()), keys, cache);
}

at::Tensor DecoderLMImpl::forward_slots_over(const at::Tensor& tokens,
                                             const at::Tensor& positions, int64_t keys,
                                             KVCache& cache) {
  const int64_t s = tokens.size(0);
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) == 1 && positions.dim() == 1 &&
                  positions.size(0) == s && s > 0,
              "forward_slots takes one token (S, 1) and one position per slot");
  TORCH_CHECK(s <= cache.keys.front().size(0), s, " slots, but the cache has ",
              cache.keys.front().size(0));
  TORCH_CHECK(keys <= options_.max_positions() && keys <= cache.keys.front().size(2),
              "position ", keys - 1, " is beyond the model's ", options_.max_positions(),
              " positions or the cache's ", cache.keys.front().size(2));
  LayerInput in;
  in.positions = positions;  // (S)
  in.keys = keys;
  in.slot_mask = (torch::arange(keys, in.positions.options()).unsqueeze(0) <=
                  in.positions.unsqueeze(1))
                     .view({s, 1, 1, keys});  // (S, 1, 1, keys)
  at::Tensor x = embed(tokens);               // (S, 1, d)
  if (pos_embed) x = x + pos_embed(in.positions).unsqueeze(1);
  if (rotary) {
    const auto [c, sn] = rotary(in.positions, x.scalar_type());  // (S, hs/2)
    in.rope = {c.view({s, 1, 1, -1}), sn.view({s, 1, 1, -1})};
  }
  KVCache rows = CacheRows(cache, 0, s);
  for (size_t i = 0; i < layers->size(); ++i) {
    in.cache_k = &rows.keys[i], in.cache_v = &rows.values[i];
    x = block(i).forward(x, in);
  }
  return Logits(x.select(1, 0));  // (S, V)
}

KVCache CacheRows(const KVCache& cache, int64_t first, int64_t count) {
  KVCache rows;
  for (const at::Tensor& t : cache.keys) rows.keys.push_back(t.narrow(0, first, count));
  for (const at::Tensor& t : cache.values) {
    rows.values.push_back(t.narrow(0, first, count));
  }
  return rows;
}

void MoveCacheRow(KVCache& cache, int64_t from, int64_t to, int64_t length) {
  if (from == to || length == 0) return;
  for (auto* list : {&cache.keys, &cache.values}) {
    for (at::Tensor& t : *list) {
      t.select(0, to).narrow(1, 0, length).copy_(t.select(0, from).narrow(1, 0, length));
    }
  }
}

KVCache DecoderLMImpl::MakeCache(int64_t batch, int64_t positions) const {
  const auto opts = embed->weight.options();
  KVCache cache;
  for (int64_t i = 0; i < options_.num_layers(); ++i) {
    for (auto* list : {&cache.keys, &cache.values}) {
      list->push_back(torch::empty(
          {batch, options_.num_kv_heads(), positions, options_.head_dim()}, opts));
    }
  }
  return cache;
}

at::Tensor GreedyWithCache(
    const std::function<at::Tensor(const at::Tensor&, int64_t)>& step,
    const at::Tensor& prompt, int64_t new_tokens) {
  std::vector<at::Tensor> out;
  at::Tensor token = step(prompt, 0).argmax(-1, true);  // (B, 1)
  out.push_back(token);
  for (int64_t i = 1; i < new_tokens; ++i) {
    token = step(token, prompt.size(1) + i - 1).argmax(-1, true);
    out.push_back(token);
  }
  return at::cat(out, 1);
}

at::Tensor GreedyByRecompute(const std::function<at::Tensor(const at::Tensor&)>& logits,
                             const at::Tensor& prompt, int64_t new_tokens) {
  at::Tensor seq = prompt;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const at::Tensor next = logits(seq).select(1, seq.size(1) - 1).argmax(-1, true);
    seq = at::cat({seq, next}, 1);
  }
  return seq.narrow(1, prompt.size(1), new_tokens);
}

at::Tensor GenerateWithCache(DecoderLM& model, const at::Tensor& prompt,
                             int64_t new_tokens) {
  KVCache cache = model->MakeCache(prompt.size(0), prompt.size(1) + new_tokens);
  return GreedyWithCache(
      [&](const at::Tensor& tokens, int64_t position) {
        return model->forward_cached(tokens, position, cache);
      },
      prompt, new_tokens);
}

at::Tensor GenerateByRecompute(DecoderLM& model, const at::Tensor& prompt,
                               int64_t new_tokens) {
  return GreedyByRecompute([&](const at::Tensor& tokens) { return model(tokens); },
                           prompt, new_tokens);
}

// ----------------------------------------------------- random initialisation

uint32_t InitChunkSeed(uint64_t base, int64_t k) {
  uint32_t h = static_cast<uint32_t>(base + static_cast<uint64_t>(k));
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

void InitLikeHuggingFace(torch::nn::Module& module, double std, int64_t layers,
                         const std::vector<std::string>& residual) {
  c10::NoGradGuard no_grad;
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : module.named_parameters()) params.emplace_back(p.key(), p.value());
  std::sort(params.begin(), params.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(layers));
  // As a 64-bit integer's random_ draws it: the same call in Python.
  const auto base =
      static_cast<uint64_t>(at::empty({}, at::kLong).random_().item<int64_t>());
  struct Chunk {
    at::Tensor elements;  // a slice of a flattened matrix, detached
    double stddev;
  };
  std::vector<Chunk> chunks;
  for (auto& [name, p] : params) {
    if (p.dim() < 2) {  // a bias, or a norm's weight
      if (absl::EndsWith(name, "bias")) {
        p.zero_();
      } else {
        p.fill_(1);
      }
      continue;
    }
    TORCH_CHECK(p.is_contiguous(), name, " is not contiguous");
    const bool scaled =
        std::any_of(residual.begin(), residual.end(),
                    [&](const std::string& r) { return absl::EndsWith(name, r); });
    // Detached: the worker threads below run with grad mode on.
    const at::Tensor flat = p.detach().view({-1});
    for (int64_t start = 0; start < flat.numel(); start += kInitChunk) {
      chunks.push_back({flat.narrow(0, start, std::min(kInitChunk, flat.numel() - start)),
                        scaled ? residual_std : std});
    }
  }
  // On the run's intra-op threads, each taking the next chunk not yet
  // taken. Threads of its own: at::parallel_for would run inline here, in a
  // file built without OpenMP.
  const auto count = static_cast<int64_t>(chunks.size());
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  std::exception_ptr error;
  const auto draw = [&] {
    try {
      for (int64_t k = next++; k < count; k = next++) {
        at::Generator generator =
            at::make_generator<at::CPUGeneratorImpl>(InitChunkSeed(base, k));
        chunks[k].elements.normal_(0, chunks[k].stddev, generator);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next = count;
    }
  };
  std::vector<std::thread> helpers;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), count);
  for (int64_t t = 1; t < threads; ++t) helpers.emplace_back(draw);
  draw();
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace ltb
