#include "measure/accuracy.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "device/backend.h"
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

namespace {

// What went wrong, in the sentence LibTorch's checks give, without their
// stack trace.
std::string Why(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  return error != nullptr ? error->what_without_backtrace() : e.what();
}

// Positions (all but the last dimension) whose logits are not all finite.
int64_t NonFinite(const at::Tensor& logits) {
  return logits.numel() / std::max<int64_t>(1, logits.size(-1)) -
         logits.isfinite().all(-1).sum().to(HostDevice()).item<int64_t>();
}

// Positions whose argmax agree.
int64_t SameTop1(const at::Tensor& logits, const at::Tensor& ref) {
  return logits.to(HostDevice())
      .argmax(-1)
      .eq(ref.to(HostDevice()).argmax(-1))
      .sum()
      .item<int64_t>();
}

// The Divergence of positions whose KL is `kl`, of which `non_finite` had
// logits that are not finite and `same` the same top token.
Divergence Summarise(const at::Tensor& kl, int64_t non_finite, int64_t same) {
  Divergence d;
  d.positions = kl.numel();
  if (d.positions == 0) return d;
  d.non_finite = non_finite;
  if (d.non_finite == 0) {
    d.kld_mean = kl.mean().item<double>();
    d.kld_p99 = at::quantile(kl, 0.99).item<double>();
    d.kld_max = kl.max().item<double>();
  }
  d.same_top1 = static_cast<double>(same) / static_cast<double>(d.positions) * 100;
  return d;
}

}  // namespace

Divergence Diverge(const at::Tensor& logits, const at::Tensor& ref) {
  const at::Tensor kl = PositionKL(logits, ref);
  if (kl.numel() == 0) return {};
  return Summarise(kl, NonFinite(logits), SameTop1(logits, ref));
}

std::vector<std::pair<std::string, double>> DivergenceCounters(const Divergence& d) {
  if (d.positions == 0) return {};
  std::vector<std::pair<std::string, double>> out;
  // Where a position's logits are not finite, neither its KL nor its top
  // token (argmax takes a NaN as the largest) means anything.
  if (d.non_finite == 0) {
    out = {{"kld_mean", d.kld_mean},
           {"kld_p99", d.kld_p99},
           {"kld_max", d.kld_max},
           {"same_top1_%", d.same_top1}};
  }
  return out;
}

absl::StatusOr<at::Tensor> ReadEvalTokens(const std::string& path) {
  // A directory opens as a stream and fails only when read, which would be
  // reported as a failing disk.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        " is a directory; valid: a text file of token ids, one sequence a line "
        "(tools/train-nano writes one)"));
  }
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        path,
        ": cannot open it; valid: a text file of token ids, one sequence a line "
        "(tools/train-nano writes one)"));
  }
  std::vector<int64_t> ids;
  int64_t rows = 0, width = 0, number = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++number;
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    int64_t n = 0;
    for (const absl::string_view word :
         absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(word, &id) || id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, " line ", number, ": '", word,
            "' is not a token id; valid: integers >= 0 separated by spaces"));
      }
      ids.push_back(id);
      ++n;
    }
    if (rows > 0 && n != width) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " line ", number, " holds ", n, " ids, but the first sequence ", width,
          ": every sequence must be as long"));
    }
    width = n;
    ++rows;
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(path, ": reading it failed"));
  }
  if (rows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " holds no sequence of token ids (lines of ids, '#' comments)"));
  }
  if (width < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": its sequences have ", width,
                     " id; scoring needs at least 2 (a token and the one it predicts)"));
  }
  return at::from_blob(ids.data(), {rows, width}, at::TensorOptions().dtype(at::kLong))
      .clone();
}

at::Tensor NextTokenNll(const at::Tensor& logits, const at::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && logits.dim() == 3 &&
                  logits.size(0) == tokens.size(0) && logits.size(1) == tokens.size(1),
              "logits (B, T, V) of tokens (B, T), not ", logits.sizes(), " and ",
              tokens.sizes());
  const int64_t t = tokens.size(1) - 1;
  const at::Tensor log_q =
      logits.narrow(1, 0, t).to(HostDevice(), at::kDouble).log_softmax(-1);  // (B, t, V)
  const at::Tensor next =
      tokens.narrow(1, 1, t).to(HostDevice(), at::kLong).unsqueeze(-1);  // (B, t, 1)
  return log_q.gather(-1, next).neg().reshape({-1});
}

double TextScore::Ppl() const { return std::exp(nll); }
double TextScore::RefPpl() const { return std::exp(ref_nll); }

TextScore ScoreText(Workload& run, Workload* reference, const at::Tensor& tokens,
                    const c10::Device& device) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(0) > 0 && tokens.size(1) >= 2,
              "a text of (sequences, T >= 2) token ids, not ", tokens.sizes());
  const int64_t rows = tokens.size(0), width = tokens.size(1);
  const at::Tensor ids = tokens.to(device, at::kLong);
  // The vocabulary, from the logits of one token, before any id beyond it
  // indexes outside the embedding (on a GPU, an assert that ends the
  // process's use of the device).
  const at::Tensor probe = run.Score(at::zeros({1, 1}, ids.options()));
  if (!probe.defined()) {
    throw std::runtime_error("the benchmark's workload does not score token sequences");
  }
  const int64_t vocab = probe.size(-1);
  const int64_t largest = tokens.max().item<int64_t>();
  if (largest >= vocab) {
    throw std::runtime_error(absl::StrCat("the text holds token id ", largest,
                                          ", outside the model's vocabulary of ", vocab));
  }
  const int64_t chunk = std::max<int64_t>(1, kChunkValues / (width * vocab));
  std::vector<at::Tensor> nll, ref_nll, kl;
  int64_t non_finite = 0, same = 0;
  for (int64_t start = 0; start < rows; start += chunk) {
    const at::Tensor part = ids.narrow(0, start, std::min(chunk, rows - start));
    const at::Tensor logits = run.Score(part);  // (n, T, V)
    nll.push_back(NextTokenNll(logits, part));
    if (reference == nullptr) continue;
    const at::Tensor ref_logits = reference->Score(part);
    if (!ref_logits.defined()) {
      throw std::runtime_error("the reference's workload does not score token sequences");
    }
    ref_nll.push_back(NextTokenNll(ref_logits, part));
    // The positions that predict a token of the text.
    const at::Tensor q = logits.narrow(1, 0, width - 1),
                     p = ref_logits.narrow(1, 0, width - 1);
    kl.push_back(PositionKL(q, p));
    non_finite += NonFinite(q);
    same += SameTop1(q, p);
  }
  TextScore score;
  score.predictions = rows * (width - 1);
  score.nll = at::cat(nll).mean().item<double>();
  if (reference != nullptr) {
    score.ref_nll = at::cat(ref_nll).mean().item<double>();
    score.divergence = Summarise(at::cat(kl), non_finite, same);
  }
  return score;
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

namespace {

// TF32 as a reference's spec says for as long as one lives: the runner turns
// TF32 on for the whole of a /tf32 benchmark, its accuracy check included,
// and a plain fp32 reference computed as TF32 would measure TF32 against
// itself.
class Tf32As {
 public:
  Tf32As(const BenchSpec& ref, const BenchSpec& run)
      : backend_(BackendOf(run.device)), ref_(ref.tf32), run_(run.tf32) {
    if (ref_ != run_) backend_.SetTf32(ref_);
  }
  ~Tf32As() {
    if (ref_ != run_) backend_.SetTf32(run_);
  }
  Tf32As(const Tf32As&) = delete;
  Tf32As& operator=(const Tf32As&) = delete;

 private:
  const DeviceBackend& backend_;
  bool ref_, run_;
};

// A reference workload that computes under its own spec's TF32 setting,
// wherever its calls fall among the benchmark's (ScoreText and
// TeacherForced interleave them).
class Tf32Pinned final : public Workload {
 public:
  Tf32Pinned(std::unique_ptr<Workload> inner, const BenchSpec& ref, const BenchSpec& run)
      : inner_(std::move(inner)), ref_(ref), run_(run) {}
  void Step() override {
    Tf32As tf32(ref_, run_);
    inner_->Step();
  }
  at::Tensor Evaluate() override {
    Tf32As tf32(ref_, run_);
    return inner_->Evaluate();
  }
  at::Tensor Prompt() const override { return inner_->Prompt(); }
  at::Tensor Logits() override {
    Tf32As tf32(ref_, run_);
    return inner_->Logits();
  }
  at::Tensor Score(const at::Tensor& tokens) override {
    Tf32As tf32(ref_, run_);
    return inner_->Score(tokens);
  }
  bool EvaluatesLogits() const override { return inner_->EvaluatesLogits(); }

 private:
  std::unique_ptr<Workload> inner_;
  BenchSpec ref_, run_;
};

}  // namespace

std::vector<std::pair<std::string, double>> Accuracy(const Family& family,
                                                     const BenchSpec& spec, uint64_t seed,
                                                     Workload& workload,
                                                     const at::Tensor& text,
                                                     std::string* absent) {
  absent->clear();
  // Compiled models report their own drift, against the eager outputs.
  if (spec.training() || !spec.backend.empty()) return {};
  const bool quantised = !spec.quant.none();
  // The language models that read checkpoints score a text: the others
  // either predict no tokens or predict them from audio the text lacks.
  const bool scores_text = text.defined() && family.loads_weights &&
                           (workload.Prompt().defined() || workload.EvaluatesLogits());
  std::vector<std::string> missing;
  const auto done = [&](std::vector<std::pair<std::string, double>> result) {
    *absent = absl::StrJoin(missing, "; ");
    if (!absent->empty()) std::cerr << spec.Name() << ": " << *absent << "\n";
    return result;
  };
  // The run's own perplexity of the text, which needs no reference: first
  // in `result` where a text is scored.
  const auto with_own_ppl = [&](std::vector<std::pair<std::string, double>> result) {
    if (!scores_text) return done(std::move(result));
    try {
      const TextScore score = ScoreText(workload, nullptr, text, spec.device);
      if (std::isfinite(score.Ppl())) {
        result.insert(result.begin(), {"ppl", score.Ppl()});
      } else {
        missing.push_back("ppl left out: the text's cross-entropy is not finite");
      }
    } catch (const std::exception& e) {
      missing.push_back(absl::StrCat("no perplexity: ", Why(e)));
    }
    return done(std::move(result));
  };
  if (!quantised && spec.dtype == c10::kFloat && !spec.tf32) {
    // The model as trained: its perplexity alone, what the others' ratio is to.
    if (!scores_text) return {};
    return with_own_ppl({});
  }
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
    std::unique_ptr<Workload> built;
    {
      Tf32As tf32(ref, spec);  // building may compute (a generation's depth)
      built = family.build(ref);
    }
    if (built == nullptr) return nullptr;
    return std::make_unique<Tf32Pinned>(std::move(built), ref, spec);
  };
  std::vector<std::pair<std::string, double>> result;
  const std::string what = quantised ? "unquantised" : "fp32";
  std::unique_ptr<Workload> ref;
  at::Tensor expected;
  try {
    ref = build(reference, what, "accuracy check");
    if (ref == nullptr) return with_own_ppl({});
    expected = ref->Evaluate();
    if (!quantised) {
      if (at::isFloatingType(out.scalar_type()) && !out.isfinite().all().item<bool>()) {
        missing.push_back(absl::StrCat(
            "rel_err left out: ", out.numel() - out.isfinite().sum().item<int64_t>(),
            " of the output's ", out.numel(), " values are not finite"));
      } else {
        result.push_back(Drift(out, expected));
      }
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
        // Logits that are not finite agree on nothing: two all-NaN models
        // both "predict" token 0 everywhere.
        const int64_t positions = logits.numel() / std::max<int64_t>(1, logits.size(-1));
        if (const int64_t bad = std::max(NonFinite(logits), NonFinite(ref_logits));
            bad > 0) {
          missing.push_back(absl::StrCat("top1_agree_% and rel_err left out: the ",
                                         NonFinite(logits) > 0 ? "" : "reference's ",
                                         "logits of ", bad, " of ", positions,
                                         " positions are not finite"));
        } else {
          result.emplace_back("top1_agree_%", Top1Agreement(logits, ref_logits));
          result.emplace_back("rel_err", RelativeError(logits, ref_logits));
        }
      }
      if (!at::isFloatingType(out.scalar_type())) result.push_back(Drift(out, expected));
    }
  } catch (const std::exception& e) {
    missing.push_back(
        absl::StrCat("no accuracy check: the ", what, " reference failed: ", Why(e)));
    return with_own_ppl({});
  }
  if (!workload.Prompt().defined() && !workload.EvaluatesLogits()) return done(result);
  try {
    // A quantised TF32 run's unquantised reference is TF32 too: the KL's is
    // plain fp32.
    if (reference.dtype != c10::kFloat || reference.tf32) {
      ref.reset();  // the fp32 one takes its place
      expected = at::Tensor();
      ref = build(fp32, "fp32 unquantised", "KL divergence");
      if (ref == nullptr) return with_own_ppl(result);
      // Scoring a text needs no greedy tokens of the reference.
      if (!scores_text) expected = ref->Evaluate();
    }
    // First: what a reader should look at before token_match_%.
    std::vector<std::pair<std::string, double>> counters;
    Divergence d;
    bool scored = false;
    if (scores_text) {
      try {
        const TextScore score = ScoreText(workload, ref.get(), text, spec.device);
        d = score.divergence;
        scored = true;
        if (std::isfinite(score.Ppl()) && std::isfinite(score.RefPpl())) {
          counters = {{"ppl", score.Ppl()}, {"ppl_ratio", score.Ppl() / score.RefPpl()}};
        } else {
          missing.push_back("ppl left out: the text's cross-entropy is not finite");
        }
      } catch (const std::exception& e) {
        // The divergence falls back to the prompt and the greedy tokens.
        missing.push_back(absl::StrCat("no perplexity: ", Why(e)));
        if (!expected.defined()) expected = ref->Evaluate();
      }
    }
    if (!scored) d = TeacherForced(workload, out, *ref, expected);
    if (d.positions > 0) {
      if (d.non_finite > 0) {
        missing.push_back(absl::StrCat("kld and same_top1_% left out: the logits of ",
                                       d.non_finite, " of ", d.positions,
                                       " positions are not finite"));
        // Greedy tokens that follow them are no prediction either.
        const auto match = std::find_if(result.begin(), result.end(), [](const auto& c) {
          return c.first == "token_match_%";
        });
        if (match != result.end()) {
          result.erase(match);
          missing.push_back(
              "token_match_% left out: its greedy tokens follow logits that are not "
              "finite");
        }
      }
      const std::vector<std::pair<std::string, double>> kl = DivergenceCounters(d);
      counters.insert(counters.end(), kl.begin(), kl.end());
    }
    counters.insert(counters.end(), result.begin(), result.end());
    result = std::move(counters);
  } catch (const std::exception& e) {
    missing.push_back(absl::StrCat(
        "no KL divergence: the fp32 unquantised reference failed: ", Why(e)));
    return with_own_ppl(result);
  }
  return done(result);
}

}  // namespace ltb
