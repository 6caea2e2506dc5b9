#include "models/whisper.h"

#include <c10/core/InferenceMode.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "layers/prepare.h"
#include "models/attention.h"
#include "models/size_table.h"
#include "workloads/generation.h"
#include "workloads/phases.h"

namespace ltb {

const std::vector<WhisperSize>& WhisperSizes() {
  static const auto* sizes = new std::vector<WhisperSize>{
      {"nano", WhisperOptions(64, 4, 2, 2).vocab(1000), 353'792},
      {"tiny", WhisperOptions(384, 6, 4, 4), 37'184'640},
      {"base", WhisperOptions(512, 8, 6, 6), 71'825'920},
  };
  return *sizes;
}

absl::StatusOr<WhisperOptions> WhisperSizeOptions(const std::string& size) {
  return FindSize("Whisper", WhisperSizes(), size, &WhisperSize::options);
}

namespace {

// Attention: 4 w^2 weights and 3 biases (no key bias); MLP 8 w^2 + 5 w;
// LayerNorm 2 w.
int64_t AttentionParams(int64_t w) { return 4 * w * w + 3 * w; }
int64_t MlpParams(int64_t w) { return 8 * w * w + 5 * w; }
int64_t NormParams(int64_t w) { return 2 * w; }

int64_t DecoderParamCount(const WhisperOptions& o) {
  const int64_t w = o.width();
  return o.vocab() * w + o.text_ctx() * w +
         o.decoder_layers() *
             (2 * AttentionParams(w) + MlpParams(w) + 3 * NormParams(w)) +
         NormParams(w);
}

}  // namespace

int64_t WhisperParamCount(const WhisperOptions& o) {
  const int64_t w = o.width();
  const int64_t convs = o.mels() * w * 3 + w + w * w * 3 + w;
  const int64_t encoder =
      convs +
      o.encoder_layers() * (AttentionParams(w) + MlpParams(w) + 2 * NormParams(w)) +
      NormParams(w);
  return encoder + DecoderParamCount(o);
}

double WhisperEncodeFlops(const WhisperOptions& o, int64_t batch) {
  const double b = batch, w = o.width(), t = o.audio_ctx();
  const double convs = 2 * o.mels() * w * 3 * o.frames() + 2 * w * w * 3 * t;
  return b * (convs + o.encoder_layers() * (24 * t * w * w + 4 * t * t * w));
}

namespace {

// One decoder layer over `q` new tokens attending to `k` cached ones: self
// q, k, v, o (8 q w^2), cross q and o (4 q w^2), MLP (16 q w^2), and the
// two attentions.
double DecoderLayerFlops(const WhisperOptions& o, double q, double k) {
  const double w = o.width();
  return 28 * q * w * w + 4 * q * k * w + 4 * q * o.audio_ctx() * w;
}

}  // namespace

double WhisperGenerateFlops(const WhisperOptions& o, int64_t batch, int64_t prompt,
                            int64_t new_tokens) {
  const double w = o.width(), layers = o.decoder_layers();
  const double cross_kv = layers * 4.0 * o.audio_ctx() * w * w;
  const double logits = 2.0 * w * o.vocab();
  double flops = cross_kv + layers * DecoderLayerFlops(o, prompt, prompt) + logits;
  for (int64_t i = 1; i < new_tokens; ++i) {
    flops += layers * DecoderLayerFlops(o, 1, prompt + i) + logits;
  }
  return batch * flops;
}

int64_t WhisperDecodeWeightCount(const WhisperOptions& o) {
  const int64_t w = o.width();
  const int64_t cross_key_value =
      o.decoder_layers() * (2 * w * w + w);  // used once per utterance
  return DecoderParamCount(o) - o.text_ctx() * w - cross_key_value;
}

// ---------------------------------------------------------------- modules

WhisperAttentionImpl::WhisperAttentionImpl(int64_t width, int64_t heads, bool fused)
    : query(register_module("query", PackableLinear(width, width))),
      key(register_module(
          "key", PackableLinear(torch::nn::LinearOptions(width, width).bias(false)))),
      value(register_module("value", PackableLinear(width, width))),
      out(register_module("out", PackableLinear(width, width))),
      heads_(heads),
      fused_(fused) {
  TORCH_CHECK(width % heads == 0, "heads (", heads, ") must divide the width (", width,
              ")");
}

at::Tensor WhisperAttentionImpl::Heads(const at::Tensor& y) const {
  return y.view({y.size(0), y.size(1), heads_, y.size(2) / heads_}).transpose(1, 2);
}

at::Tensor WhisperAttentionImpl::Merge(const at::Tensor& y) const {
  return y.transpose(1, 2).reshape({y.size(0), y.size(2), y.size(1) * y.size(3)});
}

at::Tensor WhisperAttentionImpl::forward(const at::Tensor& x, bool causal) {
  return out(
      Merge(Attention(Heads(query(x)), Heads(key(x)), Heads(value(x)), causal, fused_)));
}

at::Tensor WhisperAttentionImpl::forward_cached(const at::Tensor& x, at::Tensor& cache_k,
                                                at::Tensor& cache_v, int64_t position) {
  const int64_t t = x.size(1);
  TORCH_CHECK(t == 1 || position == 0,
              "a chunk of several tokens must start at position 0");
  cache_k.narrow(2, position, t).copy_(Heads(key(x)));
  cache_v.narrow(2, position, t).copy_(Heads(value(x)));
  const at::Tensor k = cache_k.narrow(2, 0, position + t);  // (B, nh, position + T, hs)
  const at::Tensor v = cache_v.narrow(2, 0, position + t);
  return out(Merge(Attention(Heads(query(x)), k, v, /*causal=*/t > 1, fused_)));
}

std::pair<at::Tensor, at::Tensor> WhisperAttentionImpl::KeysValues(const at::Tensor& xa) {
  return {Heads(key(xa)), Heads(value(xa))};
}

at::Tensor WhisperAttentionImpl::Cross(const at::Tensor& x, const at::Tensor& k,
                                       const at::Tensor& v) {
  return out(Merge(Attention(Heads(query(x)), k, v, /*causal=*/false, fused_)));
}

WhisperBlockImpl::WhisperBlockImpl(int64_t width, int64_t heads, bool cross, bool fused) {
  const auto norm = [&] {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}));
  };
  attn = register_module("attn", WhisperAttention(width, heads, fused));
  attn_ln = register_module("attn_ln", norm());
  if (cross) {
    cross_attn = register_module("cross_attn", WhisperAttention(width, heads, fused));
    cross_attn_ln = register_module("cross_attn_ln", norm());
  }
  // Drawn in order (a function's arguments are constructed in any order),
  // as the Python model draws them, so that one seed gives the same weights.
  PackableLinear up(width, 4 * width);
  PackableLinear down(4 * width, width);
  mlp = register_module("mlp", torch::nn::Sequential(up, torch::nn::GELU(), down));
  mlp_ln = register_module("mlp_ln", norm());
}

at::Tensor WhisperBlockImpl::Mlp(const at::Tensor& x) {
  return x + mlp->forward(mlp_ln(x));
}

namespace {

// The fixed sinusoidal positions of the encoder: sin then cos of position
// times log-spaced timescales up to 10000.
at::Tensor Sinusoids(int64_t length, int64_t channels) {
  const double increment = std::log(10000.0) / (channels / 2 - 1);
  const at::Tensor inv =
      torch::exp(-increment * torch::arange(channels / 2, torch::kFloat));
  const at::Tensor t =
      torch::arange(length, torch::kFloat).unsqueeze(1) * inv.unsqueeze(0);
  return torch::cat({t.sin(), t.cos()}, 1);  // (length, channels)
}

WhisperBlock Block(const torch::nn::ModuleList& list, size_t i) {
  return WhisperBlock(list->ptr<WhisperBlockImpl>(i));
}

}  // namespace

WhisperEncoderImpl::WhisperEncoderImpl(const WhisperOptions& o) {
  const int64_t w = o.width();
  conv1 = register_module(
      "conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(o.mels(), w, 3).padding(1)));
  conv2 = register_module(
      "conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(w, w, 3).stride(2).padding(1)));
  positional_embedding_ =
      register_buffer("positional_embedding", Sinusoids(o.audio_ctx(), w));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.encoder_layers(); ++i) {
    blocks->push_back(WhisperBlock(w, o.heads(), /*cross=*/false, o.fused_attention()));
  }
  ln_post =
      register_module("ln_post", torch::nn::LayerNorm(torch::nn::LayerNormOptions({w})));
}

at::Tensor WhisperEncoderImpl::forward(const at::Tensor& mel) {
  at::Tensor x = torch::gelu(conv1(mel));             // (B, w, frames)
  x = torch::gelu(conv2(x)).transpose(1, 2);          // (B, frames / 2, w)
  x = x + positional_embedding_.to(x.scalar_type());  // (B, T, w)
  for (size_t i = 0; i < blocks->size(); ++i) {
    WhisperBlock b = Block(blocks, i);
    x = x + b->attn(b->attn_ln(x), /*causal=*/false);
    x = b->Mlp(x);
  }
  return ln_post(x);
}

WhisperDecoderImpl::WhisperDecoderImpl(const WhisperOptions& o) {
  token_embedding =
      register_module("token_embedding", torch::nn::Embedding(o.vocab(), o.width()));
  positional_embedding = register_parameter(
      "positional_embedding", torch::randn({o.text_ctx(), o.width()}) * 0.01);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.decoder_layers(); ++i) {
    blocks->push_back(
        WhisperBlock(o.width(), o.heads(), /*cross=*/true, o.fused_attention()));
  }
  ln = register_module("ln",
                       torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.width()})));
}

WhisperImpl::WhisperImpl(const WhisperOptions& o)
    : encoder(register_module("encoder", WhisperEncoder(o))),
      decoder(register_module("decoder", WhisperDecoder(o))),
      options_(o) {}

at::Tensor WhisperImpl::Encode(const at::Tensor& mel) { return encoder(mel); }

at::Tensor WhisperImpl::Embed(const at::Tensor& tokens, int64_t position) {
  TORCH_CHECK(position + tokens.size(1) <= options_.text_ctx(), "position ",
              position + tokens.size(1), " is beyond the decoder's ",
              options_.text_ctx());
  return decoder->token_embedding(tokens) +
         decoder->positional_embedding.narrow(0, position, tokens.size(1));  // (B, T, w)
}

at::Tensor WhisperImpl::Logits(const at::Tensor& x) {
  return at::linear(decoder->ln(x), decoder->token_embedding->weight);
}

at::Tensor WhisperImpl::Decode(const at::Tensor& tokens, const at::Tensor& xa) {
  at::Tensor x = Embed(tokens, 0);
  for (size_t i = 0; i < decoder->blocks->size(); ++i) {
    WhisperBlock b = Block(decoder->blocks, i);
    x = x + b->attn(b->attn_ln(x), /*causal=*/true);
    const auto [k, v] = b->cross_attn->KeysValues(xa);
    x = x + b->cross_attn->Cross(b->cross_attn_ln(x), k, v);
    x = b->Mlp(x);
  }
  return Logits(x);  // (B, T, V)
}

WhisperState WhisperImpl::Start(const at::Tensor& xa, int64_t positions) {
  WhisperState s;
  const int64_t hs = options_.width() / options_.heads();
  for (size_t i = 0; i < decoder->blocks->size(); ++i) {
    s.self_k.push_back(
        torch::empty({xa.size(0), options_.heads(), positions, hs}, xa.options()));
    s.self_v.push_back(
        torch::empty({xa.size(0), options_.heads(), positions, hs}, xa.options()));
  }
  ComputeCross(xa, s);
  return s;
}

void WhisperImpl::ComputeCross(const at::Tensor& xa, WhisperState& state) {
  // Once allocated, the keys and values are written in place: a decode step
  // captured as a graph reads the same tensors at every replay.
  state.cross_k.resize(decoder->blocks->size());
  state.cross_v.resize(decoder->blocks->size());
  for (size_t i = 0; i < decoder->blocks->size(); ++i) {
    auto [k, v] = Block(decoder->blocks, i)->cross_attn->KeysValues(xa);
    const bool same = state.cross_k[i].defined() &&
                      state.cross_k[i].sizes() == k.sizes() &&
                      state.cross_k[i].dtype() == k.dtype();
    if (same) {
      state.cross_k[i].copy_(k);
      state.cross_v[i].copy_(v);
    } else {
      state.cross_k[i] = k;
      state.cross_v[i] = v;
    }
  }
}

at::Tensor WhisperImpl::DecodeCached(const at::Tensor& tokens, int64_t position,
                                     WhisperState& state) {
  at::Tensor x = Embed(tokens, position);
  for (size_t i = 0; i < decoder->blocks->size(); ++i) {
    WhisperBlock b = Block(decoder->blocks, i);
    x = x + b->attn->forward_cached(b->attn_ln(x), state.self_k[i], state.self_v[i],
                                    position);
    x = x + b->cross_attn->Cross(b->cross_attn_ln(x), state.cross_k[i], state.cross_v[i]);
    x = b->Mlp(x);
  }
  return Logits(x.select(1, x.size(1) - 1));  // (B, V)
}

at::Tensor WhisperGenerateWithCache(Whisper& model, const at::Tensor& xa,
                                    const at::Tensor& prompt, int64_t new_tokens) {
  WhisperState state = model->Start(xa, prompt.size(1) + new_tokens);
  std::vector<at::Tensor> out;
  at::Tensor token = model->DecodeCached(prompt, 0, state).argmax(-1, true);  // (B, 1)
  out.push_back(token);
  for (int64_t i = 1; i < new_tokens; ++i) {
    token = model->DecodeCached(token, prompt.size(1) + i - 1, state).argmax(-1, true);
    out.push_back(token);
  }
  return torch::cat(out, 1);
}

at::Tensor WhisperGenerateByRecompute(Whisper& model, const at::Tensor& xa,
                                      const at::Tensor& prompt, int64_t new_tokens) {
  at::Tensor seq = prompt;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const at::Tensor next =
        model->Decode(seq, xa).select(1, seq.size(1) - 1).argmax(-1, true);
    seq = torch::cat({seq, next}, 1);
  }
  return seq.narrow(1, prompt.size(1), new_tokens);
}

// ----------------------------------------------------------------- family

namespace {

constexpr int64_t kStartTokens = 4;  // the start-of-transcript prompt
constexpr double kWindowSeconds = 30.0;
constexpr char kEncode[] = "encode";
constexpr char kTranscribe[] = "transcribe";
// Every Whisper phase is inference: encode one window, generate from an
// encoded window, transcribe (encode, then generate).
const Phase kEncodePhase{kEncode, PhaseKind::kInference, Shape::kBatch};
const Phase kTranscribePhase{kTranscribe, PhaseKind::kInference, Shape::kGenerate};

absl::StatusOr<Plan> PlanWhisper(const BenchSpec& s) {
  absl::StatusOr<WhisperOptions> o = WhisperSizeOptions(s.size);
  if (!o.ok()) return o.status();
  if (s.batch <= 0) return absl::InvalidArgumentError("batch must be positive");
  Plan plan;
  plan.params = WhisperParamCount(*o);
  const int64_t e = DtypeBytes(s.dtype), w = o->width(), b = s.batch;
  MemoryEstimate& m = plan.memory;
  m.weights = plan.params * e;
  // Encoder: a few (B, T, 4w)-sized tensors, and attention scores when explicit.
  const int64_t encode_activations =
      b * o->audio_ctx() * w * 12 * e + b * o->mels() * o->frames() * e;
  if (s.phase == kEncode) {
    plan.flops_per_step = WhisperEncodeFlops(*o, b);
    plan.samples_per_step = b;
    plan.audio_seconds_per_step = kWindowSeconds * b;
    m.activations = encode_activations;
    return plan;
  }
  if (s.prompt + s.new_tokens > o->text_ctx() || s.new_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt ", s.prompt, " + new tokens ", s.new_tokens, " = ",
        s.prompt + s.new_tokens, " positions, but the Whisper decoder has ",
        o->text_ctx(), ": --new_tokens must be 1 to ", o->text_ctx() - s.prompt));
  }
  const double generate = WhisperGenerateFlops(*o, b, s.prompt, s.new_tokens);
  const int64_t layers = o->decoder_layers();
  m.activations = 2 * layers * b * (o->text_ctx() + o->audio_ctx()) * w * e +  // caches
                  b * o->audio_ctx() * w * e + b * o->vocab() * 4;
  plan.tokens_per_step = b * s.new_tokens;
  if (s.phase == kGenerate) {
    plan.flops_per_step = generate;
    plan.reports_weight_bandwidth = true;
    return plan;
  }
  plan.flops_per_step = WhisperEncodeFlops(*o, b) + generate;
  plan.samples_per_step = b;
  plan.audio_seconds_per_step = kWindowSeconds * b;
  m.activations += encode_activations;
  return plan;
}

class TranscribeWorkload final : public Workload {
 public:
  TranscribeWorkload(Whisper model, at::Tensor mel, at::Tensor prompt, int64_t new_tokens)
      : model_(std::move(model)),
        mel_(std::move(mel)),
        prompt_(std::move(prompt)),
        new_tokens_(new_tokens) {}
  void Step() override { Evaluate(); }
  at::Tensor Evaluate() override {
    c10::InferenceMode guard;
    return WhisperGenerateWithCache(model_, model_->Encode(mel_), prompt_, new_tokens_);
  }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(*model_);
  }

 private:
  Whisper model_;
  at::Tensor mel_, prompt_;
  int64_t new_tokens_;
};

std::unique_ptr<Workload> BuildWhisper(const BenchSpec& s) {
  const WhisperOptions o = WhisperSizeOptions(s.size).value();
  Whisper model(o);
  PrepareModel(*model, s);
  const at::Tensor mel = RandomInput({s.batch, o.mels(), o.frames()}, s);
  if (s.phase == kEncode) {
    ModelFns fns;
    fns.module = model.ptr();
    fns.forward = [model, mel]() mutable { return model->Encode(mel); };
    return MakePhaseWorkload(s, std::move(fns));
  }
  const at::Tensor prompt = torch::randint(0, o.vocab(), {s.batch, s.prompt},
                                           torch::dtype(torch::kLong).device(s.device));
  if (s.phase == kTranscribe) {
    return std::make_unique<TranscribeWorkload>(model, mel, prompt, s.new_tokens);
  }
  c10::InferenceMode guard;
  const at::Tensor xa = model->Encode(mel);  // generation starts from an encoded window
  // The self-attention cache is allocated once; each generation computes the
  // cross-attention keys and values from the encoder output, then decodes.
  auto state = std::make_shared<WhisperState>(model->Start(xa, s.prompt + s.new_tokens));
  GenerateFns fns;
  fns.module = model.ptr();
  fns.prompt = prompt;
  fns.prefill = [model, xa, prompt, state]() mutable {
    model->ComputeCross(xa, *state);
    return model->DecodeCached(prompt, 0, *state).argmax(-1, true);
  };
  fns.decode = [model, state](const at::Tensor& token, int64_t position) mutable {
    return model->DecodeCached(token, position, *state).argmax(-1, true);
  };
  fns.score = [model, xa](const at::Tensor& tokens) mutable {
    return model->Decode(tokens, xa);
  };
  fns.cache = [state]() {
    std::vector<at::Tensor> tensors;
    for (const auto* part :
         {&state->self_k, &state->self_v, &state->cross_k, &state->cross_v}) {
      tensors.insert(tensors.end(), part->begin(), part->end());
    }
    return tensors;
  };
  return MakeGenerateWorkload(
      s, std::move(fns),
      static_cast<double>(WhisperDecodeWeightCount(o)) * DtypeBytes(s.dtype));
}

// The size table as `bench --list_families` prints it: every option.
std::string WhisperSizeCards() {
  return SizeCards(WhisperSizes(), [](const WhisperOptions& o) {
    return nlohmann::ordered_json{{"width", o.width()},
                                  {"heads", o.heads()},
                                  {"encoder_layers", o.encoder_layers()},
                                  {"decoder_layers", o.decoder_layers()},
                                  {"vocab", o.vocab()},
                                  {"mels", o.mels()},
                                  {"frames", o.frames()},
                                  {"audio_ctx", o.audio_ctx()},
                                  {"text_ctx", o.text_ctx()},
                                  {"fused_attention", o.fused_attention()}};
  });
}

}  // namespace

Family WhisperFamily() {
  Family f;
  f.name = "Whisper";
  f.phases = {kEncodePhase, GeneratePhase(), kTranscribePhase};
  for (const WhisperSize& s : WhisperSizes()) {
    f.sizes.push_back(s.name);
    for (const Phase& phase : f.phases) {
      Case c{s.name, phase};
      // The prompt is the start-of-transcript tokens, not --prompt.
      if (phase.shape == Shape::kGenerate) c.fixed_prompt = kStartTokens;
      // Transcription stops when every sequence has ended, which the host
      // must read.
      c.graphs = phase.name != kTranscribe;
      f.cases.push_back(c);
    }
  }
  f.suite = {"tiny/"};
  f.packs_cpu_linears = true;
  f.default_batch = 1;
  f.suite_cpu_new_tokens = 32;
  f.plan = PlanWhisper;
  f.build = BuildWhisper;
  f.size_cards = WhisperSizeCards;
  f.constants = {{"window_seconds", kWindowSeconds}};
  return f;
}
LTB_REGISTER_FAMILY(WhisperFamily, 70);

}  // namespace ltb
