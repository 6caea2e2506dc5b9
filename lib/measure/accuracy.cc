#include "measure/accuracy.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/device.h"
#include "measure/guard.h"

namespace ltb {

std::pair<std::string, double> Drift(const at::Tensor& out, const at::Tensor& ref) {
  if (at::isFloatingType(ref.scalar_type())) return {"rel_err", RelativeError(out, ref)};
  const at::Tensor a = out.to(HostDevice()), b = ref.to(HostDevice());
  TORCH_CHECK(a.sizes() == b.sizes(), "tokens of shape ", a.sizes(), " and ", b.sizes());
  return {"token_match_%", a.eq(b).to(c10::kDouble).mean().item<double>() * 100};
}

double Top1Agreement(const at::Tensor& out, const at::Tensor& ref) {
  const at::Tensor a = out.to(HostDevice()).argmax(-1),
                   b = ref.to(HostDevice()).argmax(-1);
  TORCH_CHECK(a.sizes() == b.sizes(), "logits of shape ", out.sizes(), " and ",
              ref.sizes());
  return a.eq(b).to(c10::kDouble).mean().item<double>() * 100;
}

namespace {

// Values of one fp64 temporary of PositionKL: it works through the
// positions in chunks of this many logits, whatever the batch, sequence and
// vocabulary (Llama's 128,256 tokens at a few hundred positions would
// otherwise take gigabytes of fp64 on the host).
constexpr int64_t kChunkValues = int64_t{1} << 22;

}  // namespace

at::Tensor PositionKL(const at::Tensor& logits, const at::Tensor& ref) {
  TORCH_CHECK(logits.sizes() == ref.sizes(), "logits of shape ", logits.sizes(), " and ",
              ref.sizes());
  TORCH_CHECK(logits.dim() >= 1 && logits.size(-1) > 0,
              "logits need a last dimension of at least one token, not shape ",
              logits.sizes());
  const int64_t vocab = logits.size(-1);
  const at::Tensor q = logits.reshape({-1, vocab}), p = ref.reshape({-1, vocab});
  const int64_t rows = q.size(0);
  const int64_t chunk = std::max<int64_t>(1, kChunkValues / vocab);
  std::vector<at::Tensor> parts;
  for (int64_t start = 0; start < rows; start += chunk) {
    const int64_t n = std::min(chunk, rows - start);
    const at::Tensor log_q =
        q.narrow(0, start, n).to(HostDevice(), at::kDouble).log_softmax(-1);
    const at::Tensor log_p =
        p.narrow(0, start, n).to(HostDevice(), at::kDouble).log_softmax(-1);
    // sum p (log p - log q), where a token the reference gives no
    // probability adds nothing (torch's kl_div: xlogy).
    parts.push_back(
        at::where(log_p.isneginf(), 0.0, log_p.exp() * (log_p - log_q)).sum(-1));
  }
  if (parts.empty()) return at::empty({0}, at::TensorOptions().dtype(at::kDouble));
  return at::cat(parts);
}

Divergence Diverge(const at::Tensor& logits, const at::Tensor& ref) {
  Divergence d;
  const at::Tensor kl = PositionKL(logits, ref);
  d.positions = kl.numel();
  if (d.positions == 0) return d;
  d.non_finite =
      d.positions - logits.isfinite().all(-1).sum().to(HostDevice()).item<int64_t>();
  if (d.non_finite == 0) {
    d.kld_mean = kl.mean().item<double>();
    d.kld_p99 = at::quantile(kl, 0.99).item<double>();
    d.kld_max = kl.max().item<double>();
  }
  d.same_top1 = Top1Agreement(logits, ref);
  return d;
}

std::vector<std::pair<std::string, double>> DivergenceCounters(const Divergence& d) {
  if (d.positions == 0) return {};
  std::vector<std::pair<std::string, double>> out;
  if (d.non_finite == 0) {
    out = {{"kld_mean", d.kld_mean}, {"kld_p99", d.kld_p99}, {"kld_max", d.kld_max}};
  }
  out.emplace_back("same_top1_%", d.same_top1);
  return out;
}

Divergence TeacherForced(Workload& run, const at::Tensor& out, Workload& reference,
                         const at::Tensor& ref_out) {
  at::Tensor logits, ref_logits;
  if (const at::Tensor prompt = reference.Prompt(); prompt.defined()) {
    const at::Tensor tokens =
        at::cat({prompt, ref_out.to(prompt.device())}, 1);  // (B, P + N)
    logits = run.Score(tokens);
    ref_logits = reference.Score(tokens);
  } else if (run.EvaluatesLogits()) {
    logits = out;
    ref_logits = ref_out;
  }
  if (!logits.defined() || !ref_logits.defined()) return {};
  return Diverge(logits, ref_logits);
}

std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload,
                                                     std::string* absent) {
  absent->clear();
  // Compiled models report their own drift, against the eager outputs.
  if (spec.training() || !spec.backend.empty()) return {};
  const bool quantised = !spec.quant.none();
  if (!quantised && spec.dtype == c10::kFloat) return {};
  const at::Tensor out = workload.Evaluate();
  if (!out.defined()) return {};
  // Quantised weights against the same weights unquantised, in the same
  // dtype; a reduced precision against fp32. Eager either way (a graphed or
  // TF32 run is checked against the plain one).
  BenchSpec reference = spec;
  if (quantised) {
    reference.quant = Quant{};
  } else {
    reference.dtype = c10::kFloat;
    reference.tf32 = false;
  }
  reference.graph = false;
  // The divergence's reference is fp32 unquantised whatever the run: the
  // model as trained.
  BenchSpec fp32 = reference;
  fp32.dtype = c10::kFloat;
  fp32.tf32 = false;
  std::vector<std::string> missing;
  // Builds `ref` beside the benchmark's model where the memory guard says
  // it fits; else says why there is no check in `missing`.
  const auto build = [&](const BenchSpec& ref, const std::string& what,
                         const std::string& check) -> std::unique_ptr<Workload> {
    if (absl::StatusOr<Plan> plan = family.PlanFor(ref); plan.ok()) {
      if (absl::Status fits = CheckFits(plan->memory, spec.device); !fits.ok()) {
        missing.push_back(absl::StrCat("no ", check, ": the ", what,
                                       " reference does not fit beside the model (",
                                       fits.message(), ")"));
        return nullptr;
      }
    }
    at::manual_seed(seed);
    return family.build(ref);
  };
  const auto done = [&](std::vector<std::pair<std::string, double>> result) {
    *absent = absl::StrJoin(missing, "; ");
    if (!absent->empty()) std::cerr << spec.Name() << ": " << *absent << "\n";
    return result;
  };
  std::vector<std::pair<std::string, double>> result;
  const std::string what = quantised ? "unquantised" : "fp32";
  std::unique_ptr<Workload> ref;
  at::Tensor expected;
  try {
    ref = build(reference, what, "accuracy check");
    if (ref == nullptr) return done({});
    expected = ref->Evaluate();
    if (!quantised) {
      result.push_back(Drift(out, expected));
    } else {
      // Quantised: the predictions (logits of the prompt, or the forward's
      // output) and, for generation, the greedy tokens.
      at::Tensor logits = workload.Logits(), ref_logits;
      if (logits.defined()) {
        ref_logits = ref->Logits();
      } else if (at::isFloatingType(out.scalar_type())) {
        logits = out;
        ref_logits = expected;
      }
      if (logits.defined()) {
        result.emplace_back("top1_agree_%", Top1Agreement(logits, ref_logits));
        result.emplace_back("rel_err", RelativeError(logits, ref_logits));
      }
      if (!at::isFloatingType(out.scalar_type())) result.push_back(Drift(out, expected));
    }
  } catch (const std::exception& e) {
    missing.push_back(
        absl::StrCat("no accuracy check: the ", what, " reference failed: ", e.what()));
    return done({});
  }
  if (!workload.Prompt().defined() && !workload.EvaluatesLogits()) return done(result);
  try {
    if (reference.dtype != c10::kFloat) {
      ref.reset();  // the fp32 one takes its place
      expected = at::Tensor();
      ref = build(fp32, "fp32 unquantised", "KL divergence");
      if (ref == nullptr) return done(result);
      expected = ref->Evaluate();
    }
    const Divergence d = TeacherForced(workload, out, *ref, expected);
    if (d.positions > 0) {
      if (d.non_finite > 0) {
        missing.push_back(absl::StrCat("kld left out: the logits of ", d.non_finite,
                                       " of ", d.positions, " positions are not finite"));
      }
      // First: what a reader should look at before token_match_%.
      std::vector<std::pair<std::string, double>> counters = DivergenceCounters(d);
      counters.insert(counters.end(), result.begin(), result.end());
      result = std::move(counters);
    }
  } catch (const std::exception& e) {
    missing.push_back(absl::StrCat(
        "no KL divergence: the fp32 unquantised reference failed: ", e.what()));
  }
  return done(result);
}

}  // namespace ltb
