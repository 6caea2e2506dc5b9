#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "models/attention.h"
#include "models/language_model.h"
#include "models/size_table.h"
#include "models/weights.h"
#include "workloads/phases.h"

namespace ltb {

const std::vector<LlamaSize>& LlamaSizes() {
  static const auto* sizes = new std::vector<LlamaSize>{
      {"nano", LlamaOptions(1000, 64, 256, 2, 4, 2, 16, true, 32.0), 187'200},
      {"1B", LlamaOptions(128256, 2048, 8192, 16, 32, 8, 64, true, 32.0), 1'235'814'400},
      {"3B", LlamaOptions(128256, 3072, 8192, 28, 24, 8, 128, true, 32.0), 3'212'749'824},
      {"8B", LlamaOptions(128256, 4096, 14336, 32, 32, 8, 128, false, 8.0),
       8'030'261'248},
  };
  return *sizes;
}

absl::StatusOr<LlamaOptions> LlamaSizeOptions(const std::string& size) {
  return FindSize("Llama", LlamaSizes(), size, &LlamaSize::options);
}

int64_t LlamaParamCount(const LlamaOptions& o) {
  const int64_t d = o.d_model(), f = o.d_ff(), v = o.vocab_size();
  const int64_t q = o.num_heads() * o.head_dim(), k = o.num_kv_heads() * o.head_dim();
  // q and o are d x (heads x hs), which the card's 2d^2 assumes equal to d^2.
  return o.num_layers() * (2 * d * q + 2 * d * k + 3 * d * f + 2 * d) + v * d +
         (o.tied() ? 0 : v * d) + d;
}

double LlamaLayerFlops(const LlamaOptions& o, double batch, double tokens, double keys) {
  const double d = o.d_model(), f = o.d_ff();
  const double q = static_cast<double>(o.num_heads() * o.head_dim());
  const double k = static_cast<double>(o.num_kv_heads() * o.head_dim());
  const double projections = 2 * batch * tokens * d * (2 * q + 2 * k);  // q, o; k, v
  const double attention = 2 * batch * tokens * keys * q * 2;           // QK^T, AV
  const double mlp = 2 * batch * tokens * d * f * 3;
  return projections + attention + mlp;
}

double LlamaForwardFlops(const LlamaOptions& o, int64_t batch, int64_t seq) {
  return o.num_layers() * LlamaLayerFlops(o, batch, seq, seq) +
         2.0 * batch * seq * o.d_model() * o.vocab_size();
}

double LlamaGenerateFlops(const LlamaOptions& o, int64_t batch, int64_t prompt,
                          int64_t new_tokens, int64_t depth) {
  const double head = 2.0 * batch * o.d_model() * o.vocab_size();
  double flops =
      o.num_layers() * LlamaLayerFlops(o, batch, prompt, depth + prompt) + head;
  for (int64_t i = 1; i < new_tokens; ++i) {
    flops += o.num_layers() * LlamaLayerFlops(o, batch, 1, depth + prompt + i) + head;
  }
  return flops;
}

// ---------------------------------------------------------------- modules

at::Tensor LlamaInverseFrequencies(const LlamaOptions& o) {
  // As transformers' _compute_llama3_parameters, in fp32.
  const int64_t dim = o.head_dim();
  const at::Tensor inv_freq =
      1.0 / torch::pow(o.rope_theta(),
                       torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / dim);
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

LlamaRotaryImpl::LlamaRotaryImpl(const LlamaOptions& o) {
  TORCH_CHECK(o.head_dim() % 2 == 0, "RoPE needs an even head size, got ", o.head_dim());
  inv_freq = register_buffer("inv_freq", LlamaInverseFrequencies(o));
}

void LlamaRotaryImpl::to(torch::Device device, torch::Dtype, bool non_blocking) {
  torch::nn::Module::to(device, non_blocking);
}

void LlamaRotaryImpl::to(torch::Dtype, bool) {}

std::pair<at::Tensor, at::Tensor> LlamaRotaryImpl::forward(const at::Tensor& positions,
                                                           c10::ScalarType dtype) {
  // fp32 products of position and frequency, as transformers computes them.
  const at::Tensor angles =
      torch::outer(positions.to(at::kFloat), inv_freq);  // (T, hs/2)
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

at::Tensor ApplyLlamaRotary(const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half);
  const at::Tensor x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaOptions& o)
    : heads_(o.num_heads()),
      kv_heads_(o.num_kv_heads()),
      head_dim_(o.head_dim()),
      fused_(o.fused_attention()) {
  TORCH_CHECK(o.num_heads() % o.num_kv_heads() == 0, "kv heads (", o.num_kv_heads(),
              ") must divide heads (", o.num_heads(), ")");
  const auto linear = [](int64_t in, int64_t out) {
    return UndrawnLinear(torch::nn::LinearOptions(in, out).bias(false));
  };
  q_proj = register_module("q_proj", linear(o.d_model(), heads_ * head_dim_));
  k_proj = register_module("k_proj", linear(o.d_model(), kv_heads_ * head_dim_));
  v_proj = register_module("v_proj", linear(o.d_model(), kv_heads_ * head_dim_));
  o_proj = register_module("o_proj", linear(heads_ * head_dim_, o.d_model()));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x,
                                       const std::pair<at::Tensor, at::Tensor>& rope,
                                       at::Tensor* cache_k, at::Tensor* cache_v,
                                       int64_t position) {
  const int64_t b = x.size(0), t = x.size(1);
  const auto heads = [&](const at::Tensor& y, int64_t n) {
    return y.view({b, t, n, head_dim_}).transpose(1, 2);  // (B, n, T, hs)
  };
  const auto& [cos, sin] = rope;
  // Rotated in the wider of the projections' and the hidden states' dtypes
  // (fp32 under autocast), as transformers does; then back to v's for the
  // cache and the attention.
  at::Tensor v = heads(v_proj(x), kv_heads_);
  const at::Tensor q =
      ApplyLlamaRotary(heads(q_proj(x), heads_), cos, sin).to(v.scalar_type());
  at::Tensor k =
      ApplyLlamaRotary(heads(k_proj(x), kv_heads_), cos, sin).to(v.scalar_type());
  if (cache_k != nullptr) {
    cache_k->narrow(2, position, t).copy_(k);
    cache_v->narrow(2, position, t).copy_(v);
    k = cache_k->narrow(2, 0, position + t);  // (B, kv, position + T, hs)
    v = cache_v->narrow(2, 0, position + t);
  }
  if (t == 1 && kv_heads_ != heads_) {
    // Decoding one token: the rep query heads a kv head serves attend to the
    // same keys with no mask, as rep queries of one head would. Grouped so,
    // attention reads the cache in place, where repeating its keys and
    // values to every head (below) would copy rep times the cache each step.
    const int64_t rep = heads_ / kv_heads_;
    const at::Tensor y = Attention(q.reshape({b, kv_heads_, rep, head_dim_}), k, v,
                                   /*causal=*/false, fused_);  // (B, kv, rep, hs)
    return o_proj(y.reshape({b, 1, heads_ * head_dim_}));
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
  const at::Tensor y = Attention(q, k, v, /*causal=*/t > 1, fused_);  // (B, nh, T, hs)
  return o_proj(y.transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
}

LlamaMLPImpl::LlamaMLPImpl(int64_t d_model, int64_t d_ff) {
  const auto linear = [](int64_t in, int64_t out) {
    return UndrawnLinear(torch::nn::LinearOptions(in, out).bias(false));
  };
  gate_proj = register_module("gate_proj", linear(d_model, d_ff));
  up_proj = register_module("up_proj", linear(d_model, d_ff));
  down_proj = register_module("down_proj", linear(d_ff, d_model));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

LlamaLayerImpl::LlamaLayerImpl(const LlamaOptions& o)
    : input_layernorm(register_module("input_layernorm", RMSNorm(o.d_model(), o.eps()))),
      post_attention_layernorm(
          register_module("post_attention_layernorm", RMSNorm(o.d_model(), o.eps()))),
      self_attn(register_module("self_attn", LlamaAttention(o))),
      mlp(register_module("mlp", LlamaMLP(o.d_model(), o.d_ff()))) {}

at::Tensor LlamaLayerImpl::forward(const at::Tensor& x,
                                   const std::pair<at::Tensor, at::Tensor>& rope,
                                   at::Tensor* cache_k, at::Tensor* cache_v,
                                   int64_t position) {
  const at::Tensor h =
      x + self_attn(input_layernorm(x), rope, cache_k, cache_v, position);
  return h + mlp(post_attention_layernorm(h));
}

LlamaModelImpl::LlamaModelImpl(const LlamaOptions& o)
    : embed_tokens(
          register_module("embed_tokens", UndrawnEmbedding(o.vocab_size(), o.d_model()))),
      layers(register_module("layers", torch::nn::ModuleList())),
      norm(register_module("norm", RMSNorm(o.d_model(), o.eps()))),
      rotary_emb(register_module("rotary_emb", LlamaRotary(o))) {
  for (int64_t i = 0; i < o.num_layers(); ++i) layers->push_back(LlamaLayer(o));
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens, int64_t position,
                                   KVCache* cache) {
  const int64_t t = tokens.size(1);
  if (cache != nullptr) {
    TORCH_CHECK(position + t <= cache->keys.front().size(2), "position ", position + t,
                " is beyond the cache of ", cache->keys.front().size(2));
  }
  const at::Tensor positions = torch::arange(
      position, position + t, torch::dtype(torch::kLong).device(tokens.device()));
  at::Tensor x = embed_tokens(tokens);  // (B, T, d)
  const auto rope = rotary_emb(positions, x.scalar_type());
  for (size_t i = 0; i < layers->size(); ++i) {
    LlamaLayerImpl* layer = layers[i]->as<LlamaLayer>();
    x = cache == nullptr
            ? layer->forward(x, rope)
            : layer->forward(x, rope, &cache->keys[i], &cache->values[i], position);
  }
  return norm(x);
}

LlamaLMImpl::LlamaLMImpl(const LlamaOptions& o)
    : model(register_module("model", LlamaModel(o))), options_(o) {
  if (!o.tied()) {
    lm_head = register_module(
        "lm_head",
        UndrawnLinear(torch::nn::LinearOptions(o.d_model(), o.vocab_size()).bias(false)));
  }
  InitLikeHuggingFace(*this, 0.02, o.num_layers());  // LlamaConfig's initializer_range
}

at::Tensor LlamaLMImpl::Logits(const at::Tensor& y) {
  if (!options_.tied()) return lm_head(y);
  if (head_quantized_.quantized()) return head_quantized_(y);
  if (head_packed_.packed()) return head_packed_(y);
  return at::linear(y, model->embed_tokens->weight);
}

void LlamaLMImpl::PackForCpuInference() {
  if (options_.tied())
    head_packed_ = PackedLinear(model->embed_tokens->weight, at::Tensor());
}

WeightChange LlamaLMImpl::Quantize(const Quant& quant) {
  if (!options_.tied()) return {};
  const at::Tensor& embedding = model->embed_tokens->weight;
  head_quantized_ = QuantizedLinear(embedding, at::Tensor(), quant);
  // A decode step reads the quantised head instead of the embedding (one
  // row of which the lookup reads).
  return {static_cast<int64_t>(embedding.nbytes()), head_quantized_.bytes()};
}

at::Tensor LlamaLMImpl::forward(const at::Tensor& tokens) {
  return Logits(model(tokens));  // (B, T, V)
}

at::Tensor LlamaLMImpl::forward_cached(const at::Tensor& tokens, int64_t position,
                                       KVCache& cache) {
  const at::Tensor y = model(tokens, position, &cache);
  return Logits(y.select(1, tokens.size(1) - 1));  // (B, V): the last position only
}

KVCache LlamaLMImpl::MakeCache(int64_t batch, int64_t positions) const {
  const auto opts = model->embed_tokens->weight.options();
  KVCache cache;
  for (int64_t i = 0; i < options_.num_layers(); ++i) {
    for (auto* list : {&cache.keys, &cache.values}) {
      list->push_back(torch::empty(
          {batch, options_.num_kv_heads(), positions, options_.head_dim()}, opts));
    }
  }
  return cache;
}

// ----------------------------------------------------------------- family

namespace {

absl::StatusOr<Plan> PlanLlama(const BenchSpec& s) {
  absl::StatusOr<LlamaOptions> o = LlamaSizeOptions(s.size);
  if (!o.ok()) return o.status();
  Plan plan;
  plan.params = LlamaParamCount(*o);
  const int64_t d = o->d_model(), v = o->vocab_size(), f = o->d_ff(),
                layers = o->num_layers();
  const int64_t q = o->num_heads() * o->head_dim(), k = o->num_kv_heads() * o->head_dim();
  MemoryEstimate& m = plan.memory;
  if (s.phase == kGenerate) {
    if (absl::Status shape = CheckGenerateShape(s, kLlamaContext, "Llama's context is");
        !shape.ok()) {
      return shape;
    }
    plan.tokens_per_step = s.batch * s.new_tokens;
    plan.flops_per_step =
        LlamaGenerateFlops(*o, s.batch, s.prompt, s.new_tokens, s.depth);
    plan.reports_weight_bandwidth = true;
    const int64_t e = DtypeBytes(s.dtype);
    m.weights = plan.params * e;
    // The cache (kv heads); the widest of the prompt's and the depth's chunks,
    // with their keys and values repeated to the heads and their attention
    // scores; the logits.
    const int64_t chunk = std::max(s.prompt, std::min(s.depth, kDepthChunk));
    const int64_t keys = s.depth + s.prompt;
    m.activations = 2 * layers * s.batch * (keys + s.new_tokens) * k * e +
                    s.batch * chunk * (2 * d + 2 * q + 3 * f) * e +
                    2 * s.batch * keys * q * e +
                    s.batch * o->num_heads() * chunk * keys * 4 + s.batch * v * 4;
    return plan;
  }
  if (s.batch <= 0 || s.seq <= 0) {
    return absl::InvalidArgumentError("batch and seq must be positive");
  }
  const double fwd = LlamaForwardFlops(*o, s.batch, s.seq);
  plan.flops_per_step = s.training() ? 3 * fwd : fwd;
  plan.tokens_per_step = s.batch * s.seq;
  const int64_t tokens = s.batch * s.seq;
  if (!s.training()) {
    const int64_t e = DtypeBytes(s.dtype);
    m.weights = plan.params * e;
    m.activations = tokens * (2 * d + 2 * q + 3 * f + 2 * v) * e;
    return plan;
  }
  const int64_t e = s.dtype == c10::kFloat ? 4 : 2;
  m.weights = plan.params * 4 + (s.dtype == c10::kFloat ? 0 : plan.params * 2);
  m.gradients = plan.params * 4;
  m.optimizer = s.phase == kTrainStep ? 2 * plan.params * 4 : 0;  // AdamW moments
  // Saved per layer and token: norms, q/k/v (and k, v repeated to the heads),
  // attention output, the MLP's three d_ff-wide tensors; then the logits.
  m.activations =
      layers * tokens * (4 * d + 4 * q + 2 * k + 3 * f) * e + tokens * v * 4 * 4;
  return plan;
}

std::unique_ptr<Workload> BuildLlama(const BenchSpec& s) {
  const LlamaOptions o = LlamaSizeOptions(s.size).value();
  LlamaLM model(o);
  // Hugging Face's names; a tied checkpoint may keep lm_head.weight (the
  // embedding again), and older ones each layer's inv_freq, which the model
  // computes.
  WeightNames names;
  names.ignored = [tied = o.tied()](const std::string& name) {
    return (tied && name == "lm_head.weight") ||
           absl::EndsWith(name, "rotary_emb.inv_freq");
  };
  LoadSpecWeights(*model, s, names);
  if (s.phase == kGenerate) {
    // A decode step reads every weight once, except the embedding: one row
    // of it, unless the head is tied to it (then all of it, as the head).
    const int64_t read =
        LlamaParamCount(o) - (o.tied() ? 0 : o.vocab_size() * o.d_model());
    return MakeDecoderGenerateWorkload(s, model, o.vocab_size(),
                                       static_cast<double>(read) * DtypeBytes(s.dtype));
  }
  return BuildLanguageModel(
      s, model.ptr(), [model](const at::Tensor& x) mutable { return model(x); },
      o.vocab_size());
}

// The size table as `bench --list_families` prints it: every option.
std::string LlamaSizeCards() {
  return SizeCards(LlamaSizes(), [](const LlamaOptions& o) {
    return nlohmann::ordered_json{{"vocab_size", o.vocab_size()},
                                  {"d_model", o.d_model()},
                                  {"d_ff", o.d_ff()},
                                  {"num_layers", o.num_layers()},
                                  {"num_heads", o.num_heads()},
                                  {"num_kv_heads", o.num_kv_heads()},
                                  {"head_dim", o.head_dim()},
                                  {"tied", o.tied()},
                                  {"rope_factor", o.rope_factor()},
                                  {"rope_theta", o.rope_theta()},
                                  {"low_freq_factor", o.low_freq_factor()},
                                  {"high_freq_factor", o.high_freq_factor()},
                                  {"original_context", o.original_context()},
                                  {"eps", o.eps()},
                                  {"fused_attention", o.fused_attention()}};
  });
}

}  // namespace

Family LlamaFamily() {
  std::vector<std::string> sizes;
  for (const LlamaSize& s : LlamaSizes()) sizes.push_back(s.name);
  Family f = DecoderFamily("Llama", sizes);
  // The default suite: 1B's generation, on the CPU of a 16-token prompt and
  // 4 new tokens (each decode step reads 5 GB of fp32 weights, 0.27 to 0.38 s
  // on two-core AVX2 EPYCs, whose 16-token prompt takes 0.5 to 1.8 s, MKL
  // packing every weight for a product of few rows: a step of 1.3 to 2.8 s,
  // which Google Benchmark measures three times or more within the suite's
  // 6 s, as it does any step up to about 3.3 s); on GPUs 8B's too (32 GB of
  // fp32 weights, 16 of bf16).
  f.suite = {"1B/[^/]+/generate/", "8B/cuda[^/]*/generate/"};
  f.default_seqs = {2048};
  f.suite_cpu_seqs = {64};
  f.suite_cpu_new_tokens = 4;
  f.suite_cpu_prompt = 16;
  f.constants.emplace_back("context", static_cast<double>(kLlamaContext));
  f.plan = PlanLlama;
  f.build = BuildLlama;
  f.size_cards = LlamaSizeCards;
  return f;
}
LTB_REGISTER_FAMILY(LlamaFamily, 35);

}  // namespace ltb
