#include "models/decoder_family.h"

#include <ATen/ops/randint.h>
#include <c10/core/InferenceMode.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/backend.h"
#include "family/registry.h"
#include "layers/prepare.h"
#include "models/size_table.h"
#include "workloads/epoch.h"
#include "workloads/generation.h"
#include "workloads/optimizers.h"
#include "workloads/phases.h"

namespace ltb {

namespace {

// ------------------------------------------------------------------- rows

// A pre-norm RMSNorm, rotary (adjacent pairs), SwiGLU decoder with an untied
// head, drawn by LibTorch's initialisers (shared/MODELS.md, "Transformer").
DecoderRow TransformerRow() {
  const auto size = [](int64_t v, int64_t d, int64_t f, int64_t l, int64_t h) {
    return DecoderOptions(v, d, f, l, h).max_positions(512);
  };
  DecoderRow r;
  r.family = "Transformer";
  r.sizes = {
      {"nano", size(1000, 64, 256, 2, 4), 259'392},
      {"small", size(10000, 768, 3072, 12, 12), 128'625'408},
      {"medium", size(10000, 1024, 4096, 24, 16), 423'183'360},
      {"large", size(10000, 1280, 5120, 36, 20), 969'411'840},
      {"xl", size(10000, 1600, 6400, 48, 25), 1'998'235'200},
      {"2.7B", size(10000, 2560, 10240, 32, 32), 3'406'809'600},
  };
  DecoderNames& n = r.names;
  n.embed = "token_embeddings", n.layers = "layers", n.final_norm = "ln_final";
  n.head = "lm_head", n.rope = "rope";
  n.norm1 = "ln1", n.norm2 = "ln2", n.attn = "attn", n.mlp = "ffn";
  n.q = "q_proj", n.k = "k_proj", n.v = "v_proj", n.o = "output_proj";
  n.gate = "w1", n.up = "w3", n.down = "w2", n.down_before_up = true;
  n.hf_init = false;
  // Its RoPE tables are computed for the benchmark's seq, never loaded.
  r.checkpoint.ignored = [](const std::string& name) {
    return absl::EndsWith(name, ".rope.cos") || absl::EndsWith(name, ".rope.sin");
  };
  r.generates = false;
  r.seq_sets_positions = true;
  return r;
}

// GPT-2 (shared/MODELS.md, "GPT2"): learned positions, LayerNorm, GELU
// (tanh), biases, one q/k/v projection and a head tied to wte, under
// Hugging Face's names.
DecoderRow GPT2Row() {
  const auto size = [](int64_t v, int64_t d, int64_t l, int64_t h) {
    return DecoderOptions(v, d, 4 * d, l, h)
        .max_positions(1024)
        .norm(NormKind::kLayer)
        .positions(PositionKind::kLearned)
        .mlp(MlpKind::kGeluTanh)
        .bias(true)
        .fused_qkv(true)
        .tied(true);
  };
  DecoderRow r;
  r.family = "GPT2";
  r.sizes = {
      {"nano", size(1000, 64, 2, 4), 229'632},
      {"small", size(50257, 768, 12, 12), 124'439'808},
      {"medium", size(50257, 1024, 24, 16), 354'823'168},
      {"large", size(50257, 1280, 36, 20), 774'030'080},
      {"xl", size(50257, 1600, 48, 25), 1'557'611'200},
  };
  DecoderNames& n = r.names;
  n.embed = "wte", n.pos_embed = "wpe", n.layers = "h", n.final_norm = "ln_f";
  n.head = "lm_head";  // tied: a checkpoint's copy is passed over
  n.norm1 = "ln_1", n.norm2 = "ln_2", n.attn = "attn", n.mlp = "mlp";
  n.qkv = "c_attn", n.o = "c_proj", n.up = "c_fc", n.down = "c_proj";
  n.residual_scaled = {"c_proj.weight"};  // GPT2Config's initializer_range, scaled
  // Hugging Face's checkpoints: bare names or under "transformer."
  // (GPT2LMHeadModel's), Conv1D weights stored (in, out), the attention
  // masks old files keep as buffers, and the head tied to wte.
  r.checkpoint.candidates = [](const std::string& name) {
    return std::vector<std::string>{name, "transformer." + name};
  };
  r.checkpoint.transposed = [](const std::string& name) {
    return absl::EndsWith(name, ".c_attn.weight") ||
           absl::EndsWith(name, ".c_proj.weight") || absl::EndsWith(name, ".c_fc.weight");
  };
  r.checkpoint.ignored = [](const std::string& name) {
    return absl::EndsWith(name, ".attn.bias") ||
           absl::EndsWith(name, ".attn.masked_bias");
  };
  return r;
}

// A Llama-3-class decoder (shared/MODELS.md, "Llama"): grouped-query
// attention, Llama 3's RoPE scaling, RMSNorm and SwiGLU under Hugging Face's
// LlamaForCausalLM names; 1B and 3B tie the head, 8B does not.
DecoderRow LlamaRow() {
  const auto size = [](int64_t v, int64_t d, int64_t f, int64_t l, int64_t h, int64_t kv,
                       int64_t hs, bool tied, double factor) {
    return DecoderOptions(v, d, f, l, h)
        .num_kv_heads(kv)
        .head_dim(hs)
        .max_positions(131072)  // max_position_embeddings
        .positions(PositionKind::kRopeHalf)
        .rope_theta(500000.0)
        .rope_factor(factor)
        .tied(tied);
  };
  DecoderRow r;
  r.family = "Llama";
  r.sizes = {
      {"nano", size(1000, 64, 256, 2, 4, 2, 16, true, 32.0), 187'200},
      {"1B", size(128256, 2048, 8192, 16, 32, 8, 64, true, 32.0), 1'235'814'400},
      {"3B", size(128256, 3072, 8192, 28, 24, 8, 128, true, 32.0), 3'212'749'824},
      {"8B", size(128256, 4096, 14336, 32, 32, 8, 128, false, 8.0), 8'030'261'248},
  };
  DecoderNames& n = r.names;
  n.trunk = "model", n.embed = "embed_tokens", n.layers = "layers", n.final_norm = "norm";
  n.rope = "rotary_emb", n.head = "lm_head";
  n.norm1 = "input_layernorm", n.norm2 = "post_attention_layernorm";
  n.attn = "self_attn", n.mlp = "mlp";
  n.q = "q_proj", n.k = "k_proj", n.v = "v_proj", n.o = "o_proj";
  n.gate = "gate_proj", n.up = "up_proj", n.down = "down_proj", n.v_first = true;
  // Older checkpoints keep each layer's inv_freq, which the model computes.
  r.checkpoint.ignored = [](const std::string& name) {
    return absl::EndsWith(name, "rotary_emb.inv_freq");
  };
  return r;
}

// --------------------------------------------------------------- the plan

// What one benchmark holds, by kind: weights and, training, their fp32
// gradients, AdamW's moments and the saved activations; inference, the
// widest live tensors of a layer and the logits; generation, the cache, the
// widest chunk with its scores, and the last logits; `held`: the bytes of
// the copies preparation holds beside the weights (PlanPrepare).
MemoryEstimate DecoderMemory(const DecoderOptions& o, const BenchSpec& s, int64_t params,
                             int64_t held) {
  const int64_t d = o.d_model(), f = o.d_ff(), v = o.vocab_size(),
                layers = o.num_layers();
  const int64_t q = o.num_heads() * o.head_dim(), k = o.num_kv_heads() * o.head_dim();
  const int64_t mlp = (o.mlp() == MlpKind::kSwiGLU ? 3 : 2) * f;
  MemoryEstimate m;
  if (s.phase == kGenerate) {
    const int64_t e = DtypeBytes(s.dtype);
    const int64_t chunk = std::max(s.prompt, std::min(s.depth, kDepthChunk));
    const int64_t keys = s.depth + s.prompt;
    m.weights = params * e + held;
    m.activations = 2 * layers * s.batch * (keys + s.new_tokens) * k * e +
                    s.batch * chunk * (2 * d + 2 * q + mlp) * e +
                    (k != q ? 2 * s.batch * keys * q * e : 0) +
                    s.batch * o.num_heads() * chunk * keys * 4 + s.batch * v * 4;
    return m;
  }
  const int64_t tokens = s.batch * s.seq;
  const int64_t scores =
      o.fused_attention() ? 0 : s.batch * o.num_heads() * s.seq * s.seq;
  if (!s.training()) {
    const int64_t e = DtypeBytes(s.dtype);
    m.weights = params * e + held;
    m.activations = (tokens * (2 * d + 2 * q + mlp + 2 * v) + scores) * e;
    return m;
  }
  const int64_t e = s.dtype == c10::kFloat ? 4 : 2;
  m = TrainingState(params, s.dtype, s.phase != kForwardBackward ? 2 : 0);  // AdamW
  // Saved per layer and token: norms, q/k/v, attention output, projections
  // and the MLP's tensors; then the logits (fp32, with their gradient).
  m.activations = layers * (tokens * (8 * d + 4 * q + 4 * k + mlp) + 2 * scores) * e +
                  tokens * v * 4 * 4;
  if (s.phase != kForwardBackward) {
    // The embedding or head, the positions' table, an MLP matrix, or a
    // fused q/k/v projection.
    const int64_t positions =
        o.positions() == PositionKind::kLearned ? o.max_positions() : 0;
    const int64_t largest = d * std::max({v, positions, f, q + 2 * k});
    m.activations = std::max(
        m.activations,
        AdamWStepBytes(params, largest, BackendOf(s.device).Caps().foreach_optimizers));
  }
  return m;
}

absl::Status CheckGenerateShape(const BenchSpec& s, const std::string& family,
                                int64_t positions) {
  if (s.batch <= 0 || s.prompt <= 0 || s.new_tokens <= 0) {
    return absl::InvalidArgumentError("batch, prompt and new tokens must be positive");
  }
  if (s.depth + s.prompt + s.new_tokens > positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "depth ", s.depth, " + prompt ", s.prompt, " + new tokens ", s.new_tokens, " = ",
        s.depth + s.prompt + s.new_tokens, " positions, but ", family, " has ", positions,
        ": lower --depth, --prompt or --new_tokens"));
  }
  return absl::OkStatus();
}

// Bytes a forward or a decode step reads of the weights: every weight once,
// except the positions' table and an untied embedding, of which it reads
// rows (a tied embedding is read whole, as the head).
double ReadWeightBytes(const DecoderOptions& o, int64_t params, c10::ScalarType dtype) {
  int64_t read = params;
  if (o.positions() == PositionKind::kLearned) read -= o.max_positions() * o.d_model();
  if (!o.tied()) read -= o.vocab_size() * o.d_model();
  return static_cast<double>(read) * DtypeBytes(dtype);
}

// Causal attention runs in LibTorch's fused kernel, which skips the masked
// scores that DecoderLayerFlops counts.
bool CausalKernel(const DecoderOptions& o) { return o.causal() && o.fused_attention(); }

absl::StatusOr<Plan> PlanDecoder(const DecoderRow& row, const BenchSpec& s) {
  absl::StatusOr<DecoderOptions> o = DecoderSizeOptions(row.family, s.size);
  if (!o.ok()) return o.status();
  Plan plan;
  plan.params = DecoderParamCount(*o);
  if (!s.training()) plan.weight_bytes = ReadWeightBytes(*o, plan.params, s.dtype);
  absl::StatusOr<PrepareCost> prepared = PlanPrepare(s, plan.params);
  if (!prepared.ok()) return prepared.status();
  plan.mfu_left_out = prepared->mfu_left_out;
  const auto memory = [&] {
    MemoryEstimate m = DecoderMemory(*o, s, plan.params, prepared->held_bytes);
    // Built undrawn, a checkpoint's model holds its weights in the dtype
    // they load in, never as fp32 first.
    if (!s.weights.empty()) {
      m.host_build = plan.params * DtypeBytes(s.training() ? c10::kFloat : s.dtype);
    }
    return m;
  };
  if (s.phase == kGenerate) {
    if (absl::Status shape = CheckGenerateShape(s, row.family, o->max_positions());
        !shape.ok()) {
      return shape;
    }
    plan.tokens_per_step = s.batch * s.new_tokens;
    plan.flops_per_step =
        DecoderGenerateFlops(*o, s.batch, s.prompt, s.new_tokens, s.depth);
    // A prompt from position 0 is causal over itself (after a depth, its
    // mask is given, and every score is computed).
    if (CausalKernel(*o) && s.prompt > 1 && s.depth == 0) {
      plan.count_beyond_arithmetic = CausalCountReason(
          DecoderMaskedFlops(*o, s.batch, s.prompt), plan.flops_per_step);
    }
    plan.reports_weight_bandwidth = true;
    plan.memory = memory();
    return plan;
  }
  if (s.batch <= 0 || s.seq <= 0) {
    return absl::InvalidArgumentError("batch and seq must be positive");
  }
  if (!row.seq_sets_positions && s.seq > o->max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq ", s.seq, " exceeds ", row.family, "'s ", o->max_positions(), " positions"));
  }
  const double fwd = DecoderForwardFlops(*o, s.batch, s.seq);
  plan.flops_per_step = s.training() ? 3 * fwd : fwd;
  if (CausalKernel(*o) && s.seq > 1) {  // training's backward skips as much again
    plan.count_beyond_arithmetic =
        CausalCountReason(DecoderMaskedFlops(*o, s.batch, s.seq), fwd);
  }
  plan.tokens_per_step = s.batch * s.seq;
  if (s.phase == kTrainEpoch) {  // every rank's whole batches of the dataset
    const int64_t samples = EpochSamples(s);
    plan.flops_per_step *= static_cast<double>(samples) / s.batch;
    plan.tokens_per_step = samples * s.seq;
    plan.samples_per_step = samples;
  }
  plan.memory = memory();
  AddEpochData(s, s.seq + 1, plan.params, &plan.memory);
  return plan;
}

// -------------------------------------------------------------- the build

// forward, forward_backward, train_step and train_epoch over next-token
// batches of random ids (samples of seq + 1 tokens: the inputs and their
// next-token targets).
std::unique_ptr<Workload> MakeLanguageModelWorkload(const BenchSpec& s, DecoderLM model,
                                                    double weight_bytes) {
  // A step reads the bytes preparation made (quantised layers) in place of
  // those it removed.
  const WeightChange change = PrepareModel(*model, s);
  const int64_t vocab = model->options().vocab_size();
  // Cross-entropy of the logits of each position against the next token.
  const auto loss = [model, vocab](const at::Tensor& batch) mutable {
    const int64_t t = batch.size(1) - 1;
    const at::Tensor logits = model(batch.narrow(1, 0, t));  // (B, T, V)
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(at::kFloat), batch.narrow(1, 1, t).reshape({-1}));
  };
  const auto adamw = [module = model.ptr(), device = s.device]() {
    return MakeAdamW(device, module->parameters(), torch::optim::AdamWOptions(1e-4));
  };
  const at::Tensor ids = torch::randint(0, vocab, {s.batch, s.seq + 1},
                                        torch::dtype(torch::kLong).device(s.device));
  if (s.data_parallel) {  // train_step, train_epoch
    TrainFns train;
    train.module = model.ptr();
    train.loss = loss;
    train.make_optimizer = adamw;
    if (s.iterations == Iterations::kEpochs) {
      return MakeEpochWorkload(s, std::move(train), DatasetShape{s.seq + 1, vocab});
    }
    return MakeTrainStepWorkload(s, std::move(train), ids);
  }
  ModelFns fns;
  fns.module = model.ptr();
  const at::Tensor inputs = ids.narrow(1, 0, s.seq).contiguous();
  const at::Tensor targets = ids.narrow(1, 1, s.seq).contiguous();
  fns.forward = [model, inputs]() mutable { return model(inputs); };
  fns.logits = true;
  fns.inputs = inputs;
  fns.forward_on = [model](const at::Tensor& batch) mutable { return model(batch); };
  fns.score = fns.forward_on;
  fns.loss = [targets, vocab](const at::Tensor& logits) {
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(at::kFloat), targets.reshape({-1}));
  };
  fns.make_optimizer = adamw;
  if (!s.training()) {
    fns.weight_bytes = weight_bytes + static_cast<double>(change.added - change.removed);
  }
  return MakePhaseWorkload(s, std::move(fns));
}

// The decoder in slots over a generate workload's cache: one slot a row.
class DecoderSlots final : public SlotDecoder {
 public:
  DecoderSlots(DecoderLM model, std::shared_ptr<KVCache> cache)
      : model_(std::move(model)), cache_(std::move(cache)) {}
  int64_t slots() const override { return cache_->keys.front().size(0); }
  int64_t context() const override { return cache_->keys.front().size(2); }
  int64_t vocab() const override { return model_->options().vocab_size(); }
  at::Tensor Prefill(const at::Tensor& tokens, int64_t slot, int64_t position) override {
    KVCache rows = CacheRows(*cache_, slot, tokens.size(0));
    return model_->forward_cached(tokens, position, rows).argmax(-1, true);  // (B, 1)
  }
  at::Tensor Decode(const at::Tensor& tokens,
                    const std::vector<int64_t>& positions) override {
    return model_->forward_slots(tokens, positions, *cache_).argmax(-1, true);  // (S, 1)
  }
  at::Tensor DecodeOver(const at::Tensor& tokens, const at::Tensor& positions,
                        int64_t keys) override {
    return model_->forward_slots_over(tokens, positions, keys, *cache_)
        .argmax(-1, true);  // (S, 1)
  }
  void Move(int64_t from, int64_t to, int64_t length) override {
    MoveCacheRow(*cache_, from, to, length);
  }
  void Clear() override {
    for (auto* list : {&cache_->keys, &cache_->values}) {
      for (at::Tensor& t : *list) t.zero_();
    }
  }

 private:
  DecoderLM model_;
  std::shared_ptr<KVCache> cache_;
};

// The generate phase: a random prompt of spec.batch x spec.prompt ids, a
// cache for depth + prompt + new tokens whose first spec.depth positions are
// filled once here from random tokens (outside the timed steps; every step's
// prompt then starts at that depth), and `weight_bytes` read a decode step.
std::unique_ptr<Workload> MakeDecodeWorkload(const BenchSpec& s, DecoderLM model,
                                             double weight_bytes) {
  // A step reads the bytes preparation made (quantised layers) in place of
  // those it removed.
  const WeightChange change = PrepareModel(*model, s);
  weight_bytes += static_cast<double>(change.added - change.removed);
  const int64_t vocab = model->options().vocab_size();
  const auto ids = at::TensorOptions().dtype(at::kLong).device(s.device);
  const at::Tensor prompt = at::randint(0, vocab, {s.batch, s.prompt}, ids);
  auto cache = std::make_shared<KVCache>(
      model->MakeCache(s.batch, s.depth + s.prompt + s.new_tokens));
  {
    c10::InferenceMode guard;
    for (int64_t at = 0; at < s.depth; at += kDepthChunk) {
      const int64_t n = std::min(kDepthChunk, s.depth - at);
      model->forward_cached(at::randint(0, vocab, {s.batch, n}, ids), at, *cache);
    }
  }
  const int64_t depth = s.depth;
  GenerateFns fns;
  fns.module = model.ptr();
  fns.prompt = prompt;
  fns.prefill = [model, prompt, cache, depth]() mutable {
    return model->forward_cached(prompt, depth, *cache).argmax(-1, true);
  };
  fns.decode = [model, cache](const at::Tensor& token, int64_t position) mutable {
    return model->forward_cached(token, position, *cache).argmax(-1, true);
  };
  fns.score = [model](const at::Tensor& tokens) mutable {
    return model->forward(tokens);
  };
  fns.slots = MakeDecoderSlots(model, cache);
  fns.cache = [cache]() { return cache->tensors(); };
  // Keys and values are (B, kv heads, positions, head size) in every layer.
  double per_position = 0;
  for (const at::Tensor& t : cache->tensors()) {
    per_position += static_cast<double>(t.nbytes()) / static_cast<double>(t.size(2));
  }
  fns.cache_read_bytes = [per_position](int64_t positions) {
    return per_position * static_cast<double>(positions);
  };
  return MakeGenerateWorkload(s, std::move(fns), weight_bytes);
}

}  // namespace

WeightNames DecoderWeightNames(const DecoderRow& row, const DecoderOptions& o) {
  // A tied model's checkpoint may keep the head (the embedding again).
  WeightNames names = row.checkpoint;
  if (o.tied()) {
    names.ignored = [ignored = row.checkpoint.ignored,
                     head = row.names.head + ".weight"](const std::string& name) {
      return name == head || (ignored && ignored(name));
    };
  }
  return names;
}

namespace {

std::unique_ptr<Workload> BuildDecoder(const DecoderRow& row, const BenchSpec& s) {
  DecoderOptions o = DecoderSizeOptions(row.family, s.size).value();
  if (row.seq_sets_positions) o.max_positions(s.seq);
  // A checkpoint replaces every weight: none is drawn first.
  DecoderNames names = row.names;
  names.draw = s.weights.empty();
  DecoderLM model(o, names);
  LoadSpecWeights(*model, s, DecoderWeightNames(row, o));
  const double weight_bytes = ReadWeightBytes(o, DecoderParamCount(o), s.dtype);
  if (s.phase == kGenerate) return MakeDecodeWorkload(s, model, weight_bytes);
  return MakeLanguageModelWorkload(s, model, weight_bytes);
}

// The size table as `bench --list_families` prints it: every option.
std::string DecoderSizeCards(const DecoderRow& row) {
  return SizeCards(row.sizes, [](const DecoderOptions& o) {
    return nlohmann::ordered_json{
        {"vocab_size", o.vocab_size()},
        {"d_model", o.d_model()},
        {"d_ff", o.d_ff()},
        {"num_layers", o.num_layers()},
        {"num_heads", o.num_heads()},
        {"num_kv_heads", o.num_kv_heads()},
        {"head_dim", o.head_dim()},
        {"max_positions", o.max_positions()},
        {"norm", kNormNames[static_cast<int>(o.norm())]},
        {"eps", o.eps()},
        {"positions", kPositionNames[static_cast<int>(o.positions())]},
        {"rope_theta", o.rope_theta()},
        {"rope_factor", o.rope_factor()},
        {"low_freq_factor", o.low_freq_factor()},
        {"high_freq_factor", o.high_freq_factor()},
        {"original_context", o.original_context()},
        {"mlp", kMlpNames[static_cast<int>(o.mlp())]},
        {"bias", o.bias()},
        {"qkv_bias", o.qkv_bias()},
        {"k_bias", o.k_bias()},
        {"fused_qkv", o.fused_qkv()},
        {"tied", o.tied()},
        {"causal", o.causal()},
        {"cross_positions", o.cross_positions()},
        {"fused_attention", o.fused_attention()}};
  });
}

}  // namespace

std::shared_ptr<SlotDecoder> MakeDecoderSlots(DecoderLM model,
                                              std::shared_ptr<KVCache> cache) {
  return std::make_shared<DecoderSlots>(std::move(model), std::move(cache));
}

const std::vector<DecoderRow>& DecoderRows() {
  static const auto* rows =
      new std::vector<DecoderRow>{TransformerRow(), GPT2Row(), LlamaRow()};
  return *rows;
}

absl::StatusOr<const DecoderRow*> FindDecoderRow(const std::string& family) {
  std::vector<std::string> names;
  for (const DecoderRow& row : DecoderRows()) {
    if (row.family == family) return &row;
    names.push_back(row.family);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", family, "' is not a decoder family; valid: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<DecoderOptions> DecoderSizeOptions(const std::string& family,
                                                  const std::string& size) {
  absl::StatusOr<const DecoderRow*> row = FindDecoderRow(family);
  if (!row.ok()) return row.status();
  return FindSize(family, (*row)->sizes, size, &DecoderSize::options);
}

DecoderLM MakeDecoder(const std::string& family, const DecoderOptions& o) {
  return DecoderLM(o, FindDecoderRow(family).value()->names);
}

Family DecoderFamily(const DecoderRow& row) {
  Family f;
  f.name = row.family;
  f.serves = true;
  if (row.generates) f.serve_phases = {kForward, kGenerate};
  for (const DecoderSize& s : row.sizes) f.sizes.push_back(s.name);
  f.phases = {ForwardPhase(), ForwardBackwardPhase(), TrainStepPhase(),
              row.generates ? GeneratePhase() : TrainEpochPhase()};
  f.packs_cpu_linears = true;
  f.quantizes = true;
  f.loads_weights = true;
  if (row.generates) {
    f.default_batch = 1;
    f.generates_at_depth = true;
    f.constants = {{"depth_chunk", static_cast<double>(kDepthChunk)}};
  }
  f.plan = [&row](const BenchSpec& s) { return PlanDecoder(row, s); };
  f.build = [&row](const BenchSpec& s) { return BuildDecoder(row, s); };
  f.size_cards = [&row] { return DecoderSizeCards(row); };
  return f;
}

Family TransformerFamily() {
  Family f = DecoderFamily(DecoderRows()[0]);
  // An epoch of the small model takes minutes on a CPU: the default suite
  // covers train_epoch with EncDec/tiny instead.
  f.suite = {"small/[^/]+/(forward|forward_backward|train_step)/"};
  f.default_batch = 4;
  f.default_seqs = {512};
  f.suite_cpu_batch = 1;
  f.suite_cpu_seqs = {64};
  return f;
}
LTB_REGISTER_FAMILY(TransformerFamily, 20);

Family GPT2Family() {
  Family f = DecoderFamily(DecoderRows()[1]);
  f.suite = {"small/"};
  f.default_seqs = {512};
  f.suite_cpu_seqs = {64};
  f.suite_cpu_new_tokens = 32;
  return f;
}
LTB_REGISTER_FAMILY(GPT2Family, 30);

Family LlamaFamily() {
  Family f = DecoderFamily(DecoderRows()[2]);
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
  f.constants.emplace_back(
      "context", static_cast<double>(DecoderRows()[2].sizes[0].options.max_positions()));
  return f;
}
LTB_REGISTER_FAMILY(LlamaFamily, 35);

}  // namespace ltb
