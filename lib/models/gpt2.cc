#include "models/gpt2.h"

#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
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

const std::vector<GPT2Size>& GPT2Sizes() {
  static const auto* sizes = new std::vector<GPT2Size>{
      {"nano", GPT2Options(1000, 64, 2, 4), 229'632},
      {"small", GPT2Options(50257, 768, 12, 12), 124'439'808},
      {"medium", GPT2Options(50257, 1024, 24, 16), 354'823'168},
      {"large", GPT2Options(50257, 1280, 36, 20), 774'030'080},
      {"xl", GPT2Options(50257, 1600, 48, 25), 1'557'611'200},
  };
  return *sizes;
}

absl::StatusOr<GPT2Options> GPT2SizeOptions(const std::string& size) {
  return FindSize("GPT2", GPT2Sizes(), size, &GPT2Size::options);
}

int64_t GPT2ParamCount(const GPT2Options& o) {
  const int64_t d = o.d_model();
  return o.vocab_size() * d + o.max_positions() * d +
         o.num_layers() * (12 * d * d + 13 * d) + 2 * d;
}

namespace {

// One layer over `tokens` queries attending to `keys` keys: the qkv, output
// and MLP projections (24 d^2 per token) and QK^T plus AV.
double LayerFlops(const GPT2Options& o, double batch, double tokens, double keys) {
  const double d = o.d_model();
  return 24 * batch * tokens * d * d + 4 * batch * tokens * keys * d;
}

}  // namespace

double GPT2ForwardFlops(const GPT2Options& o, int64_t batch, int64_t seq) {
  return o.num_layers() * LayerFlops(o, batch, seq, seq) +
         2.0 * batch * seq * o.d_model() * o.vocab_size();
}

double GPT2GenerateFlops(const GPT2Options& o, int64_t batch, int64_t prompt,
                         int64_t new_tokens, int64_t depth) {
  const double head = 2.0 * batch * o.d_model() * o.vocab_size();
  double flops = o.num_layers() * LayerFlops(o, batch, prompt, depth + prompt) + head;
  for (int64_t i = 1; i < new_tokens; ++i) {
    flops += o.num_layers() * LayerFlops(o, batch, 1, depth + prompt + i) + head;
  }
  return flops;
}

// ---------------------------------------------------------------- modules

namespace {

// Every weight is drawn by InitLikeHuggingFace (GPT2LMImpl), none before.
PackableLinear Linear(int64_t in, int64_t out) {
  return UndrawnLinear(torch::nn::LinearOptions(in, out));
}

}  // namespace

GPT2AttentionImpl::GPT2AttentionImpl(const GPT2Options& o)
    : num_heads_(o.num_heads()), fused_(o.fused_attention()) {
  TORCH_CHECK(o.d_model() % o.num_heads() == 0, "heads (", o.num_heads(),
              ") must divide d_model (", o.d_model(), ")");
  c_attn = register_module("c_attn", Linear(o.d_model(), 3 * o.d_model()));
  c_proj = register_module("c_proj", Linear(o.d_model(), o.d_model()));
}

at::Tensor GPT2AttentionImpl::forward(const at::Tensor& x, at::Tensor* cache_k,
                                      at::Tensor* cache_v, int64_t position) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hs = d / num_heads_;
  const std::vector<at::Tensor> qkv = c_attn(x).split(d, -1);
  const auto heads = [&](const at::Tensor& y) {
    return y.view({b, t, num_heads_, hs}).transpose(1, 2);  // (B, nh, T, hs)
  };
  const at::Tensor q = heads(qkv[0]);
  at::Tensor k = heads(qkv[1]), v = heads(qkv[2]);
  if (cache_k != nullptr) {
    cache_k->narrow(2, position, t).copy_(k);
    cache_v->narrow(2, position, t).copy_(v);
    k = cache_k->narrow(2, 0, position + t);  // (B, nh, position + T, hs)
    v = cache_v->narrow(2, 0, position + t);
  }
  // A chunk is causal over itself and sees every cached position before it;
  // one new token attends to all before it.
  const at::Tensor y = Attention(q, k, v, /*causal=*/t > 1, fused_);  // (B, nh, T, hs)
  return c_proj(y.transpose(1, 2).reshape({b, t, d}));                // (B, T, d)
}

GPT2MLPImpl::GPT2MLPImpl(int64_t d_model) {
  c_fc = register_module("c_fc", Linear(d_model, 4 * d_model));
  c_proj = register_module("c_proj", Linear(4 * d_model, d_model));
}

at::Tensor GPT2MLPImpl::forward(const at::Tensor& x) {
  return c_proj(torch::gelu(c_fc(x), "tanh"));
}

GPT2BlockImpl::GPT2BlockImpl(const GPT2Options& o)
    : ln_1(register_module(
          "ln_1",
          torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model()}).eps(o.eps())))),
      ln_2(register_module(
          "ln_2",
          torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model()}).eps(o.eps())))),
      attn(register_module("attn", GPT2Attention(o))),
      mlp(register_module("mlp", GPT2MLP(o.d_model()))) {}

at::Tensor GPT2BlockImpl::forward(const at::Tensor& x, at::Tensor* cache_k,
                                  at::Tensor* cache_v, int64_t position) {
  const at::Tensor h = x + attn(ln_1(x), cache_k, cache_v, position);
  return h + mlp(ln_2(h));
}

GPT2LMImpl::GPT2LMImpl(const GPT2Options& o)
    : wte(register_module("wte", UndrawnEmbedding(o.vocab_size(), o.d_model()))),
      wpe(register_module("wpe", UndrawnEmbedding(o.max_positions(), o.d_model()))),
      h(register_module("h", torch::nn::ModuleList())),
      ln_f(register_module(
          "ln_f",
          torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model()}).eps(o.eps())))),
      options_(o) {
  for (int64_t i = 0; i < o.num_layers(); ++i) h->push_back(GPT2Block(o));
  // GPT2Config's initializer_range, its residual projections scaled.
  InitLikeHuggingFace(*this, 0.02, o.num_layers(), {"c_proj.weight"});
}

at::Tensor GPT2LMImpl::Logits(const at::Tensor& x) {
  const at::Tensor y = ln_f(x);
  if (head_quantized_.quantized()) return head_quantized_(y);
  if (head_packed_.packed()) return head_packed_(y);
  return at::linear(y, wte->weight);  // tied to the token embedding
}

WeightChange GPT2LMImpl::Quantize(const Quant& quant) {
  head_quantized_ = QuantizedLinear(wte->weight, at::Tensor(), quant);
  // A decode step reads the quantised head instead of wte (one row of which
  // the lookup reads, as it does of wpe).
  return {static_cast<int64_t>(wte->weight.nbytes()), head_quantized_.bytes()};
}

void GPT2LMImpl::PackForCpuInference() {
  head_packed_ = PackedLinear(wte->weight, at::Tensor());
}

at::Tensor GPT2LMImpl::forward(const at::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= options_.max_positions(), "sequence of ", t, " tokens exceeds GPT2's ",
              options_.max_positions(), " positions");
  const at::Tensor pos =
      torch::arange(t, torch::dtype(torch::kLong).device(tokens.device()));
  at::Tensor x = wte(tokens) + wpe(pos);  // (B, T, d)
  for (const auto& block : *h) x = block->as<GPT2Block>()->forward(x);
  return Logits(x);  // (B, T, V)
}

at::Tensor GPT2LMImpl::forward_cached(const at::Tensor& tokens, int64_t position,
                                      KVCache& cache) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(position + t <= cache.keys.front().size(2), "position ", position + t,
              " is beyond the cache of ", cache.keys.front().size(2));
  const at::Tensor pos = torch::arange(
      position, position + t, torch::dtype(torch::kLong).device(tokens.device()));
  at::Tensor x = wte(tokens) + wpe(pos);  // (B, T, d)
  for (size_t i = 0; i < h->size(); ++i) {
    x = h[i]->as<GPT2Block>()->forward(x, &cache.keys[i], &cache.values[i], position);
  }
  return Logits(x.select(1, t - 1));  // (B, V): only the last position is needed
}

KVCache GPT2LMImpl::MakeCache(int64_t batch, int64_t positions) const {
  const int64_t hs = options_.d_model() / options_.num_heads();
  const auto opts = wte->weight.options();
  KVCache cache;
  for (int64_t i = 0; i < options_.num_layers(); ++i) {
    cache.keys.push_back(
        torch::empty({batch, options_.num_heads(), positions, hs}, opts));
    cache.values.push_back(
        torch::empty({batch, options_.num_heads(), positions, hs}, opts));
  }
  return cache;
}

// ----------------------------------------------------------------- family

WeightNames GPT2CheckpointNames() {
  WeightNames names;
  names.candidates = [](const std::string& name) {
    return std::vector<std::string>{name, "transformer." + name};
  };
  names.transposed = [](const std::string& name) {
    return absl::EndsWith(name, ".c_attn.weight") ||
           absl::EndsWith(name, ".c_proj.weight") || absl::EndsWith(name, ".c_fc.weight");
  };
  names.ignored = [](const std::string& name) {
    return absl::EndsWith(name, ".attn.bias") ||
           absl::EndsWith(name, ".attn.masked_bias") || name == "lm_head.weight";
  };
  return names;
}

namespace {

absl::StatusOr<Plan> PlanGPT2(const BenchSpec& s) {
  absl::StatusOr<GPT2Options> o = GPT2SizeOptions(s.size);
  if (!o.ok()) return o.status();
  Plan plan;
  plan.params = GPT2ParamCount(*o);
  const int64_t d = o->d_model(), v = o->vocab_size(), layers = o->num_layers();
  MemoryEstimate& m = plan.memory;
  if (s.phase == kGenerate) {
    if (absl::Status shape = CheckGenerateShape(s, o->max_positions(), "GPT2 has");
        !shape.ok()) {
      return shape;
    }
    plan.tokens_per_step = s.batch * s.new_tokens;
    plan.flops_per_step = GPT2GenerateFlops(*o, s.batch, s.prompt, s.new_tokens, s.depth);
    plan.reports_weight_bandwidth = true;
    const int64_t e = DtypeBytes(s.dtype);
    m.weights = plan.params * e;
    // The cache; the widest of the prompt's and the depth's chunks, with
    // their attention scores; the logits.
    const int64_t chunk = std::max(s.prompt, std::min(s.depth, kDepthChunk));
    m.activations = 2 * layers * s.batch * (s.depth + s.prompt + s.new_tokens) * d * e +
                    s.batch * chunk * 8 * d * e +
                    s.batch * o->num_heads() * chunk * (s.depth + s.prompt) * 4 +
                    s.batch * v * 4;
    return plan;
  }
  if (s.batch <= 0 || s.seq <= 0) {
    return absl::InvalidArgumentError("batch and seq must be positive");
  }
  if (s.seq > o->max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat("seq ", s.seq, " exceeds GPT2's ",
                                                   o->max_positions(), " positions"));
  }
  const double fwd = GPT2ForwardFlops(*o, s.batch, s.seq);
  plan.flops_per_step = s.training() ? 3 * fwd : fwd;
  plan.tokens_per_step = s.batch * s.seq;
  const int64_t tokens = s.batch * s.seq;
  if (!s.training()) {
    const int64_t e = DtypeBytes(s.dtype);
    m.weights = plan.params * e;
    m.activations = tokens * (8 * d + 2 * v) * e;
    return plan;
  }
  const int64_t e = s.dtype == c10::kFloat ? 4 : 2;
  m.weights = plan.params * 4 + (s.dtype == c10::kFloat ? 0 : plan.params * 2);
  m.gradients = plan.params * 4;
  m.optimizer = s.phase == kTrainStep ? 2 * plan.params * 4 : 0;
  // Saved per layer and token: norms, qkv, attention output, MLP in and out.
  m.activations = layers * tokens * 20 * d * e + tokens * v * 4 * 4;
  return plan;
}

std::unique_ptr<Workload> BuildGPT2(const BenchSpec& s) {
  const GPT2Options o = GPT2SizeOptions(s.size).value();
  GPT2LM model(o);
  LoadSpecWeights(*model, s, GPT2CheckpointNames());
  if (s.phase == kGenerate) {
    // A decode step reads every weight once, except wpe: one row of it.
    const double weight_bytes =
        static_cast<double>(GPT2ParamCount(o) - o.max_positions() * o.d_model()) *
        DtypeBytes(s.dtype);
    return MakeDecoderGenerateWorkload(s, model, o.vocab_size(), weight_bytes);
  }

  return BuildLanguageModel(
      s, model.ptr(), [model](const at::Tensor& x) mutable { return model(x); },
      o.vocab_size());
}

// The size table as `bench --list_families` prints it: every option.
std::string GPT2SizeCards() {
  return SizeCards(GPT2Sizes(), [](const GPT2Options& o) {
    return nlohmann::ordered_json{
        {"vocab_size", o.vocab_size()},       {"d_model", o.d_model()},
        {"num_layers", o.num_layers()},       {"num_heads", o.num_heads()},
        {"max_positions", o.max_positions()}, {"eps", o.eps()}};
  });
}

}  // namespace

Family GPT2Family() {
  std::vector<std::string> sizes;
  for (const GPT2Size& s : GPT2Sizes()) sizes.push_back(s.name);
  Family f = DecoderFamily("GPT2", sizes);
  f.suite = {"small/"};
  f.default_seqs = {512};
  f.suite_cpu_seqs = {64};
  f.suite_cpu_new_tokens = 32;
  f.plan = PlanGPT2;
  f.build = BuildGPT2;
  f.size_cards = GPT2SizeCards;
  return f;
}
LTB_REGISTER_FAMILY(GPT2Family, 30);

}  // namespace ltb
