#include "models/whisper.h"

#include <c10/core/InferenceMode.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "layers/prepare.h"
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

DecoderOptions WhisperBlocks(const WhisperOptions& o, bool decoder) {
  return DecoderOptions(decoder ? o.vocab() : 0, o.width(), 4 * o.width(),
                        decoder ? o.decoder_layers() : o.encoder_layers(), o.heads())
      .max_positions(o.text_ctx())
      .norm(NormKind::kLayer)
      .positions(decoder ? PositionKind::kLearned : PositionKind::kNone)
      .mlp(MlpKind::kGelu)
      .bias(true)
      .k_bias(false)
      .tied(true)
      .causal(decoder)
      .cross_positions(decoder ? o.audio_ctx() : 0)
      .fused_attention(o.fused_attention());
}

int64_t WhisperParamCount(const WhisperOptions& o) {
  const int64_t w = o.width();
  const int64_t convs = o.mels() * w * 3 + w + w * w * 3 + w;
  return convs + DecoderParamCount(WhisperBlocks(o, false)) +
         DecoderParamCount(WhisperBlocks(o, true));
}

double WhisperEncodeFlops(const WhisperOptions& o, int64_t batch) {
  const double b = batch, w = o.width(), t = o.audio_ctx();
  const double convs = 2 * o.mels() * w * 3 * o.frames() + 2 * w * w * 3 * t;
  return b * convs +
         o.encoder_layers() * DecoderLayerFlops(WhisperBlocks(o, false), b, t, t);
}

double WhisperGenerateFlops(const WhisperOptions& o, int64_t batch, int64_t prompt,
                            int64_t new_tokens) {
  const double cross_kv = 4.0 * batch * o.audio_ctx() * o.width() * o.width();
  return o.decoder_layers() * cross_kv +
         DecoderGenerateFlops(WhisperBlocks(o, true), batch, prompt, new_tokens);
}

int64_t WhisperDecodeWeightCount(const WhisperOptions& o) {
  const int64_t w = o.width();
  const int64_t cross_key_value =
      o.decoder_layers() * (2 * w * w + w);  // used once per utterance
  return DecoderParamCount(WhisperBlocks(o, true)) - o.text_ctx() * w - cross_key_value;
}

// ---------------------------------------------------------------- modules

namespace {

// The reference's module names; its weights drawn by LibTorch's initialisers.
const DecoderNames& WhisperNames() {
  static const auto* names = [] {
    auto* n = new DecoderNames;
    n->norm1 = "attn_ln", n->norm2 = "mlp_ln", n->cross_norm = "cross_attn_ln";
    n->attn = "attn", n->cross = "cross_attn", n->mlp = "mlp";
    n->q = "query", n->k = "key", n->v = "value", n->o = "out";
    n->up = "0", n->down = "2";  // mlp: Sequential(Linear, GELU, Linear)
    n->hf_init = false;
    return n;
  }();
  return *names;
}

torch::nn::ModuleList Blocks(const DecoderOptions& o) {
  torch::nn::ModuleList blocks;
  for (int64_t i = 0; i < o.num_layers(); ++i) {
    blocks->push_back(DecoderBlock(o, WhisperNames()));
  }
  return blocks;
}

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

}  // namespace

WhisperEncoderImpl::WhisperEncoderImpl(const WhisperOptions& o) {
  const int64_t w = o.width();
  conv1 = register_module(
      "conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(o.mels(), w, 3).padding(1)));
  conv2 = register_module(
      "conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(w, w, 3).stride(2).padding(1)));
  positional_embedding_ =
      register_buffer("positional_embedding", Sinusoids(o.audio_ctx(), w));
  blocks = register_module("blocks", Blocks(WhisperBlocks(o, false)));
  ln_post = register_module("ln_post", Norm(NormKind::kLayer, w, 1e-5));
}

at::Tensor WhisperEncoderImpl::forward(const at::Tensor& mel) {
  at::Tensor x = torch::gelu(conv1(mel));             // (B, w, frames)
  x = torch::gelu(conv2(x)).transpose(1, 2);          // (B, frames / 2, w)
  x = x + positional_embedding_.to(x.scalar_type());  // (B, T, w)
  for (size_t i = 0; i < blocks->size(); ++i) {
    x = blocks[i]->as<DecoderBlock>()->forward(x, LayerInput());
  }
  return ln_post(x);
}

WhisperDecoderImpl::WhisperDecoderImpl(const WhisperOptions& o) {
  token_embedding =
      register_module("token_embedding", torch::nn::Embedding(o.vocab(), o.width()));
  positional_embedding = register_parameter(
      "positional_embedding", torch::randn({o.text_ctx(), o.width()}) * 0.01);
  blocks = register_module("blocks", Blocks(WhisperBlocks(o, true)));
  ln = register_module("ln", Norm(NormKind::kLayer, o.width(), 1e-5));
}

WhisperImpl::WhisperImpl(const WhisperOptions& o)
    : encoder(register_module("encoder", WhisperEncoder(o))),
      decoder(register_module("decoder", WhisperDecoder(o))),
      options_(o) {}

at::Tensor WhisperImpl::Encode(const at::Tensor& mel) { return encoder(mel); }

at::Tensor WhisperImpl::Hidden(const at::Tensor& tokens, int64_t position,
                               KVCache& cache) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(position + t <= options_.text_ctx(), "position ", position + t,
              " is beyond the decoder's ", options_.text_ctx());
  at::Tensor x = decoder->token_embedding(tokens) +
                 decoder->positional_embedding.narrow(0, position, t);  // (B, T, w)
  LayerInput in;
  in.position = position;
  for (size_t i = 0; i < decoder->blocks->size(); ++i) {
    if (!cache.keys.empty()) in.cache_k = &cache.keys[i], in.cache_v = &cache.values[i];
    in.cross_k = cache.cross_keys[i], in.cross_v = cache.cross_values[i];
    x = decoder->blocks[i]->as<DecoderBlock>()->forward(x, in);
  }
  return x;
}

at::Tensor WhisperImpl::Logits(const at::Tensor& x) {
  return at::linear(decoder->ln(x), decoder->token_embedding->weight);
}

at::Tensor WhisperImpl::Decode(const at::Tensor& tokens, const at::Tensor& xa) {
  KVCache cross;
  ComputeCross(xa, cross);
  return Logits(Hidden(tokens, 0, cross));  // (B, T, V)
}

KVCache WhisperImpl::Start(const at::Tensor& xa, int64_t positions) {
  KVCache cache;
  const int64_t hs = options_.width() / options_.heads();
  for (size_t i = 0; i < decoder->blocks->size(); ++i) {
    for (auto* list : {&cache.keys, &cache.values}) {
      list->push_back(
          torch::empty({xa.size(0), options_.heads(), positions, hs}, xa.options()));
    }
  }
  ComputeCross(xa, cache);
  return cache;
}

void WhisperImpl::ComputeCross(const at::Tensor& xa, KVCache& cache) {
  // Once allocated, the keys and values are written in place: a decode step
  // captured as a graph reads the same tensors at every replay.
  cache.cross_keys.resize(decoder->blocks->size());
  cache.cross_values.resize(decoder->blocks->size());
  for (size_t i = 0; i < decoder->blocks->size(); ++i) {
    auto [k, v] = decoder->blocks[i]->as<DecoderBlock>()->cross->KeysValues(xa);
    at::Tensor& old_k = cache.cross_keys[i];
    if (old_k.defined() && old_k.sizes() == k.sizes() && old_k.dtype() == k.dtype()) {
      old_k.copy_(k);
      cache.cross_values[i].copy_(v);
    } else {
      old_k = k;
      cache.cross_values[i] = v;
    }
  }
}

at::Tensor WhisperImpl::DecodeCached(const at::Tensor& tokens, int64_t position,
                                     KVCache& cache) {
  const at::Tensor x = Hidden(tokens, position, cache);
  return Logits(x.select(1, x.size(1) - 1));  // (B, V)
}

at::Tensor WhisperGenerateWithCache(Whisper& model, const at::Tensor& xa,
                                    const at::Tensor& prompt, int64_t new_tokens) {
  KVCache cache = model->Start(xa, prompt.size(1) + new_tokens);
  return GreedyWithCache(
      [&](const at::Tensor& tokens, int64_t position) {
        return model->DecodeCached(tokens, position, cache);
      },
      prompt, new_tokens);
}

at::Tensor WhisperGenerateByRecompute(Whisper& model, const at::Tensor& xa,
                                      const at::Tensor& prompt, int64_t new_tokens) {
  return GreedyByRecompute(
      [&](const at::Tensor& tokens) { return model->Decode(tokens, xa); }, prompt,
      new_tokens);
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
  // The caches; the encoder's output, and a layer's cross keys and values
  // in projection while the cache fills; the last logits.
  m.activations = 2 * layers * b * (o->text_ctx() + o->audio_ctx()) * w * e +
                  3 * b * o->audio_ctx() * w * e + b * o->vocab() * 4;
  plan.tokens_per_step = b * s.new_tokens;
  // The start tokens are causal over themselves, in the fused kernel.
  const auto causal = [&] {
    if (s.prompt > 1 && o->fused_attention()) {
      plan.count_beyond_arithmetic = CausalCountReason(
          DecoderMaskedFlops(WhisperBlocks(*o, true), b, s.prompt), plan.flops_per_step);
    }
  };
  if (s.phase == kGenerate) {
    plan.flops_per_step = generate;
    plan.reports_weight_bandwidth = true;
    causal();
    return plan;
  }
  plan.flops_per_step = WhisperEncodeFlops(*o, b) + generate;
  causal();
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
    fns.inputs = mel;  // (B, mels, frames): serve gathers its samples
    fns.forward_on = [model](const at::Tensor& batch) mutable {
      return model->Encode(batch);  // (B, audio_ctx, width)
    };
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
  auto state = std::make_shared<KVCache>(model->Start(xa, s.prompt + s.new_tokens));
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
  fns.cache = [state]() { return state->tensors(); };
  // A decode step reads the self-attention keys and values up to its
  // position, (B, heads, positions, hs) in every layer, and all of the
  // cross-attention's, over the encoder's audio_ctx positions.
  double per_position = 0, cross = 0;
  for (const auto* list : {&state->keys, &state->values}) {
    for (const at::Tensor& t : *list) {
      per_position += static_cast<double>(t.nbytes()) / static_cast<double>(t.size(2));
    }
  }
  for (const auto* list : {&state->cross_keys, &state->cross_values}) {
    for (const at::Tensor& t : *list) cross += static_cast<double>(t.nbytes());
  }
  fns.cache_read_bytes = [per_position, cross](int64_t positions) {
    return per_position * static_cast<double>(positions) + cross;
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
      // Transcription runs as one workload of its own (encode, then the
      // cached generation), with no decode steps for graphs to replay.
      c.graphs = phase.name != kTranscribe;
      f.cases.push_back(c);
    }
  }
  f.suite = {"tiny/"};
  // Encoding serves; its generation has no slots to batch continuously.
  f.serves = true;
  f.serve_phases = {kEncode};
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
