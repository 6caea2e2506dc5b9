#include "models/encoder.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "layers/prepare.h"
#include "models/size_table.h"
#include "workloads/phases.h"

namespace ltb {

const std::vector<EncoderSize>& EncoderSizes() {
  static const auto* sizes = new std::vector<EncoderSize>{
      {"nano", EncoderOptions(64, 4, 256, 2), 99'968},
      {"default", EncoderOptions(512, 8, 2048, 6), 18'914'304},
  };
  return *sizes;
}

absl::StatusOr<EncoderOptions> EncoderSizeOptions(const std::string& size) {
  return FindSize("Encoder", EncoderSizes(), size, &EncoderSize::options);
}

int64_t EncoderParamCount(const EncoderOptions& o) {
  const int64_t d = o.d_model(), f = o.d_ff();
  return o.layers() * (4 * d * d + 2 * d * f + 9 * d + f);
}

double EncoderForwardFlops(const EncoderOptions& o, int64_t batch, int64_t seq) {
  const double b = batch, t = seq, d = o.d_model(), f = o.d_ff();
  return o.layers() * (8 * b * t * d * d + 4 * b * t * t * d + 4 * b * t * d * f);
}

// No final norm: the layers are the whole model.
EncoderImpl::EncoderImpl(const EncoderOptions& o)
    : encoder_(torch::nn::TransformerEncoderOptions(
          torch::nn::TransformerEncoderLayerOptions(o.d_model(), o.heads())
              .dim_feedforward(o.d_ff()),
          o.layers())) {
  layers = register_module("layers", encoder_->layers);
}

at::Tensor EncoderImpl::forward(const at::Tensor& x) { return encoder_(x); }

namespace {

absl::StatusOr<Plan> PlanEncoder(const BenchSpec& s) {
  absl::StatusOr<EncoderOptions> o = EncoderSizeOptions(s.size);
  if (!o.ok()) return o.status();
  if (s.batch <= 0 || s.seq <= 0)
    return absl::InvalidArgumentError("batch and seq must be positive");
  Plan plan;
  plan.params = EncoderParamCount(*o);
  plan.tokens_per_step = s.batch * s.seq;
  const double fwd = EncoderForwardFlops(*o, s.batch, s.seq);
  const int64_t tokens = s.batch * s.seq, d = o->d_model();
  // LibTorch's encoder layer materialises the seq x seq attention of every head.
  const int64_t scores = s.batch * o->heads() * s.seq * s.seq;
  MemoryEstimate& m = plan.memory;
  if (!s.training()) {
    const int64_t e = DtypeBytes(s.dtype);
    plan.flops_per_step = fwd;
    m.weights = plan.params * e;
    m.activations = (2 * scores + tokens * (6 * d + 2 * o->d_ff())) * e;
    return plan;
  }
  const int64_t e = s.dtype == c10::kFloat ? 4 : 2;
  plan.flops_per_step = 3 * fwd;
  m = TrainingState(plan.params, s.dtype, 0);  // forward_backward
  // What a layer keeps for backward. LibTorch's C++ attention is bmm,
  // softmax, dropout, bmm, and on the CPU dropout multiplies by a noise
  // tensor of its input's size, which it keeps: per score the
  // probabilities, the noise and the dropped-out probabilities. Per token:
  // the layer's input, q, k, v, the heads' output, both dropouts' noise,
  // norm1's input and output and norm2's input (10 d); the ReLU's output, the
  // FFN dropout's noise and output (3 d_ff).
  const int64_t kept = 3 * scores + tokens * (10 * d + 3 * o->d_ff());
  // The last layer's backward holds one score-sized tensor more than it
  // keeps: the gradients of the dropped-out probabilities and of the
  // probabilities, beside the noise and the probabilities.
  m.activations = (o->layers() * kept + scores) * e;
  m.overhead = TrainingOverhead(m);
  return plan;
}

// The phase's workload; `served`, with the batch-first copy of its inputs
// that serve's batcher gathers samples from (a copy a plain run does not hold).
std::unique_ptr<Workload> BuildEncoder(const BenchSpec& s, bool served) {
  const EncoderOptions o = EncoderSizeOptions(s.size).value();
  Encoder model(o);
  PrepareModel(*model, s);
  // LibTorch's encoder takes (T, B, d).
  const at::Tensor x = RandomInput({s.seq, s.batch, o.d_model()}, s);
  ModelFns fns;
  fns.module = model.ptr();
  fns.forward = [model, x]() mutable { return model(x); };
  fns.loss = [](const at::Tensor& y) { return y.to(at::kFloat).pow(2).mean(); };
  if (served) {                                   // a batch-first buffer, read transposed
    fns.inputs = x.transpose(0, 1).contiguous();  // (B, T, d)
    fns.forward_on = [model](const at::Tensor& batch) mutable {
      return model(batch.transpose(0, 1)).transpose(0, 1);  // (B, T, d)
    };
  }
  return MakePhaseWorkload(s, std::move(fns));
}

// The size table as `bench --list_families` prints it: every option.
std::string EncoderSizeCards() {
  return SizeCards(EncoderSizes(), [](const EncoderOptions& o) {
    return nlohmann::ordered_json{{"d_model", o.d_model()},
                                  {"heads", o.heads()},
                                  {"d_ff", o.d_ff()},
                                  {"layers", o.layers()}};
  });
}

}  // namespace

Family EncoderFamily() {
  Family f;
  f.name = "Encoder";
  for (const EncoderSize& s : EncoderSizes()) f.sizes.push_back(s.name);
  f.phases = {ForwardPhase(), ForwardBackwardPhase()};
  // The default suite runs the shortest length; the whole curve (128 to
  // 4096) runs with a filter naming Encoder.
  f.suite = {"default/[^/]+/[^/]+/batch:[0-9]+/seq:128/"};
  f.default_batch = 8;
  f.suite_cpu_batch = 4;
  f.default_seqs = {128, 256, 512, 1024, 2048, 4096};
  f.plan = PlanEncoder;
  f.build = [](const BenchSpec& s) { return BuildEncoder(s, /*served=*/false); };
  f.serves = true;
  f.build_served = [](const BenchSpec& s) { return BuildEncoder(s, /*served=*/true); };
  f.size_cards = EncoderSizeCards;
  return f;
}
LTB_REGISTER_FAMILY(EncoderFamily, 60);

}  // namespace ltb
