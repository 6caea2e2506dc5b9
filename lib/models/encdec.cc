#include "models/encdec.h"

#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "device/backend.h"
#include "family/registry.h"
#include "layers/prepare.h"
#include "models/size_table.h"
#include "workloads/epoch.h"
#include "workloads/optimizers.h"
#include "workloads/phases.h"

namespace ltb {

const std::vector<EncDecSize>& EncDecSizes() {
  static const auto* sizes = new std::vector<EncDecSize>{
      {"nano", EncDecOptions(64, 4, 2, 2, 256).vocab(1000), 362'728},
      {"tiny", EncDecOptions(128, 4, 3, 3, 512), 3'494'400},
      {"small", EncDecOptions(512, 8, 6, 6, 2048), 52'537'344},
      {"base", EncDecOptions(768, 12, 12, 12, 3072), 211'069'952},
      {"xl", EncDecOptions(2048, 32, 24, 24, 8192), 2'853'715'968},
  };
  return *sizes;
}

std::string CustomName(const EncDecOptions& o) {
  std::string name =
      absl::StrFormat("custom_d%d_h%d_e%d_d%d_ff%d", o.d_model(), o.heads(),
                      o.encoder_layers(), o.decoder_layers(), o.d_ff());
  if (o.vocab() != EncDecOptions::kDefaultVocab) absl::StrAppend(&name, "_v", o.vocab());
  return name;
}

absl::StatusOr<EncDecOptions> EncDecSizeOptions(const std::string& size) {
  const absl::StatusOr<EncDecOptions> known =
      FindSize("EncDec", EncDecSizes(), size, &EncDecSize::options,
               ", or custom_d<d>_h<h>_e<layers>_d<layers>_ff<d_ff>[_v<vocab>]");
  if (known.ok()) return known;
  int d = 0, h = 0, e = 0, dd = 0, ff = 0, v = 0;
  const int n = std::sscanf(size.c_str(), "custom_d%d_h%d_e%d_d%d_ff%d_v%d", &d, &h, &e,
                            &dd, &ff, &v);
  if (n >= 5) {
    EncDecOptions o(d, h, e, dd, ff);
    if (n == 6) o.vocab(v);
    if (CustomName(o) == size && d > 0 && h > 0 && d % h == 0 && ff > 0 && o.vocab() > 0)
      return o;
  }
  return known.status();
}

absl::StatusOr<std::vector<std::string>> EncDecSizeNames(
    const EncDecOverrides& overrides) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const EncDecSize& s : EncDecSizes()) {
    if (!overrides.any()) {
      names.push_back(s.name);
      continue;
    }
    EncDecOptions o = s.options;
    o.d_model(overrides.d_model.value_or(o.d_model()));
    o.heads(overrides.heads.value_or(o.heads()));
    o.encoder_layers(overrides.encoder_layers.value_or(o.encoder_layers()));
    o.decoder_layers(overrides.decoder_layers.value_or(o.decoder_layers()));
    o.d_ff(overrides.d_ff.value_or(o.d_ff()));
    if (o.d_model() % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--d_model=", o.d_model(),
                       " must be even (sinusoidal positions pair channels)"));
    }
    if (o.d_model() % o.heads() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nhead=", o.heads(), " must divide --d_model=", o.d_model(),
                       " (for EncDec/", s.name, "); choose heads that divide d_model"));
    }
    if (seen.insert(CustomName(o)).second) names.push_back(CustomName(o));
  }
  return names;
}

int64_t EncDecParamCount(const EncDecOptions& o) {
  const int64_t d = o.d_model(), f = o.d_ff(), v = o.vocab();
  const int64_t encoder_layer = 4 * d * d + 2 * d * f + 9 * d + f;
  const int64_t decoder_layer = 8 * d * d + 2 * d * f + 15 * d + f;
  return v * d + d * v + v + o.encoder_layers() * encoder_layer + 2 * d +
         o.decoder_layers() * decoder_layer + 2 * d;
}

double EncDecForwardFlops(const EncDecOptions& o, int64_t batch, int64_t src,
                          int64_t tgt) {
  const double b = batch, s = src, t = tgt, d = o.d_model(), f = o.d_ff();
  const double encoder = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f;
  // Self-attention (8 T d^2 + 4 T^2 d), cross-attention (q and o 4 T d^2,
  // k and v 4 S d^2, scores 4 T S d), FFN.
  const double decoder = 8 * b * t * d * d + 4 * b * t * t * d + 4 * b * t * d * d +
                         4 * b * s * d * d + 4 * b * t * s * d + 4 * b * t * d * f;
  return o.encoder_layers() * encoder + o.decoder_layers() * decoder +
         2 * b * t * d * o.vocab();
}

EncDecImpl::EncDecImpl(const EncDecOptions& o)
    : embedding(
          register_module("embedding", torch::nn::Embedding(o.vocab(), o.d_model()))),
      transformer(register_module(
          "transformer",
          torch::nn::Transformer(torch::nn::TransformerOptions(o.d_model(), o.heads())
                                     .num_encoder_layers(o.encoder_layers())
                                     .num_decoder_layers(o.decoder_layers())
                                     .dim_feedforward(o.d_ff())))),
      output(register_module("output", torch::nn::Linear(o.d_model(), o.vocab()))),
      options_(o) {}

at::Tensor EncDecImpl::Positions(int64_t len, const c10::TensorOptions& options) {
  // Fixed sinusoidal positions: sin on even channels, cos on odd ones,
  // computed in fp32, kept in the weights' dtype.
  if (!positions_.defined() || positions_.size(0) < len ||
      positions_.device() != options.device() ||
      positions_.scalar_type() != options.dtype().toScalarType()) {
    const int64_t d = options_.d_model();
    const auto opts = torch::dtype(torch::kFloat).device(options.device());
    const at::Tensor pos = torch::arange(len, opts).unsqueeze(1);
    const at::Tensor div =
        torch::exp(torch::arange(0, d, 2, opts) * (-std::log(10000.0) / d));
    at::Tensor positions = torch::zeros({len, d}, opts);
    positions.slice(1, 0, d, 2) = torch::sin(pos * div);
    positions.slice(1, 1, d, 2) = torch::cos(pos * div);
    positions_ = positions.to(options.dtype());
  }
  return positions_.narrow(0, 0, len);  // (L, d)
}

at::Tensor EncDecImpl::CausalMask(int64_t len, const c10::TensorOptions& options) {
  if (!mask_.defined() || mask_.size(0) != len || mask_.device() != options.device() ||
      mask_.scalar_type() != options.dtype().toScalarType()) {
    mask_ = torch::nn::TransformerImpl::generate_square_subsequent_mask(len).to(options);
  }
  return mask_;
}

at::Tensor EncDecImpl::Embed(const at::Tensor& tokens) {
  const int64_t d = options_.d_model();
  const at::Tensor x =
      embedding(tokens) * std::sqrt(static_cast<double>(d)) +
      Positions(tokens.size(1), embedding->weight.options());  // (B, L, d)
  return x.transpose(0, 1);  // (L, B, d), LibTorch's Transformer layout
}

at::Tensor EncDecImpl::forward(const at::Tensor& src, const at::Tensor& tgt) {
  const at::Tensor mask = CausalMask(tgt.size(1), embedding->weight.options());
  const at::Tensor y = transformer->forward(
      Embed(src), Embed(tgt), /*src_mask=*/at::Tensor(), mask);  // (T, B, d)
  return output(y.transpose(0, 1));                              // (B, T, V)
}

at::Tensor EncDecLoss(EncDec& model, const at::Tensor& pairs, int64_t src_len) {
  const at::Tensor src = pairs.narrow(1, 0, src_len);
  const at::Tensor tgt = pairs.narrow(1, src_len, pairs.size(1) - src_len);
  const int64_t t = tgt.size(1) - 1;
  const at::Tensor logits = model(src, tgt.narrow(1, 0, t));  // predicts tgt[1:]
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
      tgt.narrow(1, 1, t).reshape({-1}));
}

namespace {

absl::StatusOr<Plan> PlanEncDec(const BenchSpec& s) {
  absl::StatusOr<EncDecOptions> o = EncDecSizeOptions(s.size);
  if (!o.ok()) return o.status();
  if (s.batch <= 0 || s.seq <= 1) {
    return absl::InvalidArgumentError("batch must be positive and seq at least 2");
  }
  Plan plan;
  plan.params = EncDecParamCount(*o);
  const double fwd = EncDecForwardFlops(*o, s.batch, s.seq, s.seq - 1);
  const int64_t tokens = s.batch * (2 * s.seq - 1), d = o->d_model();
  MemoryEstimate& m = plan.memory;
  if (!s.training()) {
    const int64_t e = DtypeBytes(s.dtype);
    plan.flops_per_step = fwd;
    plan.tokens_per_step = tokens;
    plan.samples_per_step = s.batch;
    m.weights = plan.params * e;
    m.activations = s.batch * s.seq * (6 * d + 2 * o->d_ff() + 2 * o->vocab()) * e +
                    2 * s.batch * o->heads() * s.seq * s.seq * e;
    return plan;
  }
  const int64_t e = s.dtype == c10::kFloat ? 4 : 2;
  m = TrainingState(plan.params, s.dtype, 2);  // AdamW
  // Per attention (the encoder's, the decoder's self- and cross-attention),
  // as the Encoder family counts it: LibTorch's C++ attention keeps three
  // score-sized tensors (probabilities, dropout's noise, its output), and the
  // last one's backward holds one more.
  const int64_t layers = o->encoder_layers() + 2 * o->decoder_layers();
  const int64_t scores = s.batch * o->heads() * s.seq * s.seq;
  m.activations =
      (layers * (tokens / 2 * (12 * d + 3 * o->d_ff()) + 3 * scores) + scores) * e +
      s.batch * s.seq * o->vocab() * 4 * 4;
  // The largest parameter: the embedding or output, an FFN matrix, or an
  // attention's packed q/k/v projection.
  const int64_t largest = d * std::max({o->vocab(), o->d_ff(), 3 * d});
  m.activations = std::max(m.activations,
                           AdamWStepBytes(plan.params, largest,
                                          BackendOf(s.device).Caps().foreach_optimizers));
  m.overhead = TrainingOverhead(m);
  AddEpochData(s, 2 * s.seq, plan.params, &m);  // source then target tokens
  if (s.iterations == Iterations::kTimed) {     // train_step
    plan.flops_per_step = 3 * fwd;
    plan.tokens_per_step = tokens;
    plan.samples_per_step = s.batch;
  } else {  // an epoch: every rank's whole batches of the dataset
    const int64_t samples = EpochSamples(s);
    plan.flops_per_step = 3 * fwd * samples / s.batch;
    plan.tokens_per_step = tokens * samples / s.batch;
    plan.samples_per_step = samples;
  }
  return plan;
}

std::unique_ptr<Workload> BuildEncDec(const BenchSpec& s) {
  const EncDecOptions o = EncDecSizeOptions(s.size).value();
  EncDec model(o);
  PrepareModel(*model, s);
  const int64_t src_len = s.seq;
  TrainFns train;
  train.module = model.ptr();
  train.loss = [model, src_len](const at::Tensor& pairs) mutable {
    return EncDecLoss(model, pairs, src_len);
  };
  train.make_optimizer = [model, device = s.device]() {
    return MakeAdamW(device, model->parameters(), torch::optim::AdamWOptions(1e-4));
  };
  DatasetShape data{s.seq + s.seq, o.vocab()};  // source then target tokens
  if (s.iterations == Iterations::kEpochs) {
    return MakeEpochWorkload(s, std::move(train), data);
  }
  const at::Tensor pairs = torch::randint(0, o.vocab(), {s.batch, data.sample_tokens},
                                          torch::dtype(torch::kLong).device(s.device));
  if (s.training()) return MakeTrainStepWorkload(s, std::move(train), pairs);
  // A sample is its source then its target, batch first: serve gathers them.
  auto forward_on = [model, src_len](const at::Tensor& batch) mutable {
    return model(batch.narrow(1, 0, src_len),
                 batch.narrow(1, src_len, src_len - 1));  // (B, T, V)
  };
  ModelFns fns;
  fns.module = model.ptr();
  fns.forward = [forward_on, pairs]() mutable { return forward_on(pairs); };
  fns.logits = true;
  fns.inputs = pairs;
  fns.forward_on = forward_on;
  return MakePhaseWorkload(s, std::move(fns));
}

// The size table as `bench --list_families` prints it: every option.
std::string EncDecSizeCards() {
  return SizeCards(EncDecSizes(), [](const EncDecOptions& o) {
    return nlohmann::ordered_json{{"d_model", o.d_model()},
                                  {"heads", o.heads()},
                                  {"encoder_layers", o.encoder_layers()},
                                  {"decoder_layers", o.decoder_layers()},
                                  {"d_ff", o.d_ff()},
                                  {"vocab", o.vocab()}};
  });
}

}  // namespace

Family EncDecFamily(const EncDecOverrides& overrides) {
  Family f;
  f.name = "EncDec";
  f.sizes = EncDecSizeNames(overrides).value_or(std::vector<std::string>{});
  f.phases = {ForwardPhase(), TrainStepPhase(), TrainEpochPhase()};
  f.suite = {"tiny/"};
  f.default_batch = 64;
  f.suite_cpu_batch = 16;
  f.default_seqs = {128};
  f.serves = true;
  f.plan = PlanEncDec;
  f.build = BuildEncDec;
  f.size_cards = EncDecSizeCards;
  return f;
}

absl::StatusOr<Family> EncDecFamilyFromOptions(const FamilyOptions& options) {
  EncDecOverrides o;
  const auto given = [](int64_t v) -> std::optional<int64_t> {
    if (v == 0) return std::nullopt;
    return v;
  };
  o.d_model = given(options.d_model);
  o.heads = given(options.heads);
  o.encoder_layers = given(options.encoder_layers);
  o.decoder_layers = given(options.decoder_layers);
  o.d_ff = given(options.d_ff);
  absl::StatusOr<std::vector<std::string>> names = EncDecSizeNames(o);
  if (!names.ok()) return names.status();  // heads must divide d_model
  return EncDecFamily(o);
}
LTB_REGISTER_FAMILY(EncDecFamilyFromOptions, 80);

}  // namespace ltb
