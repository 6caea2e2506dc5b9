#include "models/transformer.h"

#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "models/attention.h"
#include "models/language_model.h"
#include "models/size_table.h"
#include "models/weights.h"
#include "workloads/epoch.h"
#include "workloads/phases.h"

namespace ltb {

const std::vector<TransformerSize>& TransformerSizes() {
  static const auto* sizes = new std::vector<TransformerSize>{
      {"nano", TransformerOptions(1000, 64, 256, 2, 4), 259'392},
      {"small", TransformerOptions(10000, 768, 3072, 12, 12), 128'625'408},
      {"medium", TransformerOptions(10000, 1024, 4096, 24, 16), 423'183'360},
      {"large", TransformerOptions(10000, 1280, 5120, 36, 20), 969'411'840},
      {"xl", TransformerOptions(10000, 1600, 6400, 48, 25), 1'998'235'200},
      {"2.7B", TransformerOptions(10000, 2560, 10240, 32, 32), 3'406'809'600},
  };
  return *sizes;
}

absl::StatusOr<TransformerOptions> TransformerSizeOptions(const std::string& size) {
  return FindSize("Transformer", TransformerSizes(), size, &TransformerSize::options);
}

int64_t TransformerParamCount(const TransformerOptions& o) {
  const int64_t d = o.d_model(), f = o.d_ff(), v = o.vocab_size();
  return o.num_layers() * (4 * d * d + 3 * d * f + 2 * d) + 2 * v * d + d;
}

double TransformerForwardFlops(const TransformerOptions& o, int64_t batch, int64_t seq) {
  const double b = batch, t = seq, d = o.d_model(), f = o.d_ff(), v = o.vocab_size(),
               layers = o.num_layers();
  const double projections = 2 * b * t * d * d * 4;  // q, k, v, o
  const double attention = 2 * b * t * t * d * 2;    // QK^T and AV
  const double ffn = 2 * b * t * d * f * 3;          // w1, w3, w2
  const double head = 2 * b * t * d * v;
  return layers * (projections + attention + ffn) + head;
}

// ---------------------------------------------------------------- modules

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  // Normalise in fp32 whatever the activation dtype, as the reference does.
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor rms = xf.pow(2).mean(-1, /*keepdim=*/true).add(eps_).rsqrt();
  return (xf * rms).to(x.scalar_type()) * weight;
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(int64_t head_dim, int64_t max_positions,
                                         double theta) {
  TORCH_CHECK(head_dim % 2 == 0, "RoPE needs an even head size, got ", head_dim);
  const at::Tensor inv_freq =
      torch::pow(theta, -torch::arange(0, head_dim, 2, torch::kDouble) / head_dim);
  const at::Tensor angles =
      torch::outer(torch::arange(max_positions, torch::kDouble), inv_freq);
  cos_ = register_buffer("cos", angles.cos().to(torch::kFloat));  // (P, hd/2)
  sin_ = register_buffer("sin", angles.sin().to(torch::kFloat));
}

at::Tensor RotaryEmbeddingImpl::forward(const at::Tensor& x,
                                        const at::Tensor& positions) {
  const at::Tensor cos = cos_.index_select(0, positions).to(x.scalar_type());
  const at::Tensor sin = sin_.index_select(0, positions).to(x.scalar_type());
  auto shape = x.sizes().vec();
  shape.back() /= 2;
  shape.push_back(2);
  const at::Tensor pairs = x.reshape(shape);  // (..., T, hd/2, 2)
  const at::Tensor x0 = pairs.select(-1, 0);  // (..., T, hd/2)
  const at::Tensor x1 = pairs.select(-1, 1);
  const at::Tensor r0 = x0 * cos - x1 * sin;
  const at::Tensor r1 = x0 * sin + x1 * cos;
  return torch::stack({r0, r1}, -1).flatten(-2);  // (..., T, hd)
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const TransformerOptions& o)
    : num_heads_(o.num_heads()), fused_(o.fused_attention()) {
  TORCH_CHECK(o.d_model() % o.num_heads() == 0, "heads (", o.num_heads(),
              ") must divide d_model (", o.d_model(), ")");
  const auto linear = [&] {
    return PackableLinear(torch::nn::LinearOptions(o.d_model(), o.d_model()).bias(false));
  };
  q_proj = register_module("q_proj", linear());
  k_proj = register_module("k_proj", linear());
  v_proj = register_module("v_proj", linear());
  output_proj = register_module("output_proj", linear());
  rope = register_module("rope", RotaryEmbedding(o.d_model() / o.num_heads(),
                                                 o.context_length(), o.rope_theta()));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x,
                                            const at::Tensor& positions) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  const int64_t hs = d / num_heads_;
  const auto heads = [&](const at::Tensor& y) {
    return y.view({b, t, num_heads_, hs}).transpose(1, 2);  // (B, nh, T, hs)
  };
  const at::Tensor q = rope(heads(q_proj(x)), positions);
  const at::Tensor k = rope(heads(k_proj(x)), positions);
  const at::Tensor v = heads(v_proj(x));
  const at::Tensor y = Attention(q, k, v, /*causal=*/true, fused_);  // (B, nh, T, hs)
  return output_proj(y.transpose(1, 2).reshape({b, t, d}));          // (B, T, d)
}

SwiGLUImpl::SwiGLUImpl(int64_t d_model, int64_t d_ff) {
  const auto linear = [](int64_t in, int64_t out) {
    return PackableLinear(torch::nn::LinearOptions(in, out).bias(false));
  };
  w1 = register_module("w1", linear(d_model, d_ff));
  w2 = register_module("w2", linear(d_ff, d_model));
  w3 = register_module("w3", linear(d_model, d_ff));
}

at::Tensor SwiGLUImpl::forward(const at::Tensor& x) {
  return w2(torch::silu(w1(x)) * w3(x));
}

TransformerBlockImpl::TransformerBlockImpl(const TransformerOptions& o)
    : ln1(register_module("ln1", RMSNorm(o.d_model(), o.eps()))),
      ln2(register_module("ln2", RMSNorm(o.d_model(), o.eps()))),
      attn(register_module("attn", CausalSelfAttention(o))),
      ffn(register_module("ffn", SwiGLU(o.d_model(), o.d_ff()))) {}

at::Tensor TransformerBlockImpl::forward(const at::Tensor& x,
                                         const at::Tensor& positions) {
  at::Tensor h = x + attn(ln1(x), positions);
  return h + ffn(ln2(h));
}

TransformerLMImpl::TransformerLMImpl(const TransformerOptions& o)
    : token_embeddings(register_module(
          "token_embeddings", torch::nn::Embedding(o.vocab_size(), o.d_model()))),
      layers(register_module("layers", torch::nn::ModuleList())),
      ln_final(register_module("ln_final", RMSNorm(o.d_model(), o.eps()))),
      lm_head(register_module(
          "lm_head",
          PackableLinear(
              torch::nn::LinearOptions(o.d_model(), o.vocab_size()).bias(false)))),
      options_(o) {
  for (int64_t i = 0; i < o.num_layers(); ++i) layers->push_back(TransformerBlock(o));
}

at::Tensor TransformerLMImpl::forward(const at::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= options_.context_length(), "sequence of ", t,
              " tokens is longer than the context length ", options_.context_length());
  const at::Tensor positions =
      torch::arange(t, torch::dtype(torch::kLong).device(tokens.device()));
  at::Tensor x = token_embeddings(tokens);  // (B, T, d)
  for (const auto& layer : *layers) {
    x = layer->as<TransformerBlock>()->forward(x, positions);
  }
  return lm_head(ln_final(x));  // (B, T, V)
}

// ----------------------------------------------------------------- family

namespace {

MemoryEstimate TransformerMemory(const TransformerOptions& o, const BenchSpec& s) {
  const int64_t p = TransformerParamCount(o);
  const int64_t tokens = s.batch * s.seq;
  const int64_t d = o.d_model(), f = o.d_ff(), v = o.vocab_size();
  MemoryEstimate m;
  if (!s.training()) {
    const int64_t e = DtypeBytes(s.dtype);
    m.weights = p * e;
    // The widest live tensors of one layer, plus logits and their softmax.
    m.activations = tokens * (4 * d + 3 * f + 2 * v) * e;
    if (!o.fused_attention())
      m.activations += s.batch * o.num_heads() * s.seq * s.seq * e;
    return m;
  }
  const int64_t e = s.dtype == c10::kFloat ? 4 : 2;
  m.weights = p * 4 + (s.dtype == c10::kFloat ? 0 : p * 2);  // + autocast copies
  m.gradients = p * 4;
  m.optimizer = s.phase != kForwardBackward ? 2 * p * 4 : 0;  // AdamW moments
  // Saved for backward per layer and token: norms, q/k/v, attention output,
  // projections and the FFN's three d_ff-wide tensors; then the logits.
  m.activations = o.num_layers() * tokens * (16 * d + 3 * f) * e + tokens * v * 4 * 4;
  if (!o.fused_attention()) {
    m.activations += o.num_layers() * s.batch * o.num_heads() * s.seq * s.seq * e * 2;
  }
  return m;
}

absl::StatusOr<Plan> PlanTransformer(const BenchSpec& s) {
  absl::StatusOr<TransformerOptions> o = TransformerSizeOptions(s.size);
  if (!o.ok()) return o.status();
  if (s.batch <= 0 || s.seq <= 0) {
    return absl::InvalidArgumentError("batch and seq must be positive");
  }
  Plan plan;
  plan.params = TransformerParamCount(*o);
  const double fwd = TransformerForwardFlops(*o, s.batch, s.seq);
  plan.flops_per_step = s.training() ? 3 * fwd : fwd;
  plan.tokens_per_step = s.batch * s.seq;
  if (s.phase == kTrainEpoch) {  // every rank's whole batches of the dataset
    const int64_t samples = EpochSamples(s);
    plan.flops_per_step *= static_cast<double>(samples) / s.batch;
    plan.tokens_per_step = samples * s.seq;
    plan.samples_per_step = samples;
  }
  plan.memory = TransformerMemory(*o, s);
  return plan;
}

std::unique_ptr<Workload> BuildTransformer(const BenchSpec& s) {
  TransformerOptions o = TransformerSizeOptions(s.size).value();
  o.context_length(s.seq);
  TransformerLM model(o);
  // Its RoPE tables are computed for the benchmark's seq, never loaded.
  WeightNames names;
  names.ignored = [](const std::string& name) {
    return absl::EndsWith(name, ".rope.cos") || absl::EndsWith(name, ".rope.sin");
  };
  LoadSpecWeights(*model, s, names);
  return BuildLanguageModel(
      s, model.ptr(), [model](const at::Tensor& x) mutable { return model(x); },
      o.vocab_size());
}

// The size table as `bench --list_families` prints it: every option.
std::string TransformerSizeCards() {
  return SizeCards(TransformerSizes(), [](const TransformerOptions& o) {
    return nlohmann::ordered_json{{"vocab_size", o.vocab_size()},
                                  {"d_model", o.d_model()},
                                  {"d_ff", o.d_ff()},
                                  {"num_layers", o.num_layers()},
                                  {"num_heads", o.num_heads()},
                                  {"context_length", o.context_length()},
                                  {"rope_theta", o.rope_theta()},
                                  {"eps", o.eps()},
                                  {"fused_attention", o.fused_attention()}};
  });
}

}  // namespace

Family TransformerFamily() {
  Family f;
  f.name = "Transformer";
  for (const TransformerSize& s : TransformerSizes()) f.sizes.push_back(s.name);
  f.phases = {ForwardPhase(), ForwardBackwardPhase(), TrainStepPhase(),
              TrainEpochPhase()};
  // An epoch of the small model takes minutes on a CPU: the default suite
  // covers train_epoch with EncDec/tiny instead.
  f.suite = {"small/[^/]+/(forward|forward_backward|train_step)/"};
  f.packs_cpu_linears = true;
  f.quantizes = true;
  f.default_batch = 4;
  f.default_seqs = {512};
  f.suite_cpu_batch = 1;
  f.suite_cpu_seqs = {64};
  f.loads_weights = true;
  f.plan = PlanTransformer;
  f.build = BuildTransformer;
  f.size_cards = TransformerSizeCards;
  return f;
}
LTB_REGISTER_FAMILY(TransformerFamily, 20);

}  // namespace ltb
