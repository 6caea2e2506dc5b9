#include "measure/accuracy.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "device/backend.h"
#include "device/device.h"
#include "spec_for.h"

namespace ltb {
namespace {

// A workload whose one output is fixed: logits where `logits` says so.
class Fixed final : public Workload {
 public:
  explicit Fixed(at::Tensor out, bool logits = false)
      : out_(std::move(out)), logits_(logits) {}
  void Step() override {}
  at::Tensor Evaluate() override { return out_; }
  bool EvaluatesLogits() const override { return logits_; }

 private:
  at::Tensor out_;
  bool logits_;
};

// A family that records the specs it builds, and plans `weights` bytes; its
// workloads' output is `out`, logits where `logits` says so.
Family Recording(std::vector<BenchSpec>* built, int64_t weights,
                 at::Tensor out = at::tensor({1.0f, 2.0f, 4.0f}), bool logits = false) {
  Family f;
  f.name = "Recorded";
  f.sizes = {"one"};
  Phase forward;
  forward.name = "forward";
  forward.shape = Shape::kNone;
  f.phases = {forward};
  f.plan = [weights](const BenchSpec&) -> absl::StatusOr<Plan> {
    Plan p;
    p.memory.weights = weights;
    return p;
  };
  f.build = [built, out, logits](const BenchSpec& spec) -> std::unique_ptr<Workload> {
    built->push_back(spec);
    return std::make_unique<Fixed>(out, logits);
  };
  return f;
}

BenchSpec Bf16(const Family& f) {
  BenchSpec spec;
  spec.family = f.name;
  spec.size = "one";
  SetPhase(f.phases[0], &spec);
  spec.device = c10::Device(c10::kCPU);
  spec.dtype = c10::kBFloat16;
  return spec;
}

TEST(Accuracy, TheReferenceIsEagerPlainFp32) {
  std::vector<BenchSpec> built;
  const Family f = Recording(&built, 1 << 20);
  BenchSpec spec = Bf16(f);
  spec.graph = true;  // a graphed run is checked against an eager one
  spec.tf32 = true;
  Fixed mine(at::tensor({1.0f, 2.0f, 3.0f}));
  std::string absent;
  const auto drift = Accuracy(f, spec, 0, mine, at::Tensor(), &absent);
  ASSERT_EQ(built.size(), 1u);
  EXPECT_EQ(built[0].dtype, c10::kFloat);
  EXPECT_FALSE(built[0].graph);
  EXPECT_FALSE(built[0].tf32);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].first, "rel_err");
  EXPECT_DOUBLE_EQ(drift[0].second, 0.25);  // |3 - 4| / 4
  EXPECT_TRUE(absent.empty()) << absent;
}

TEST(Accuracy, AReferenceThatDoesNotFitIsNotBuiltAndTheCheckSaysWhy) {
  std::vector<BenchSpec> built;
  const Family f = Recording(&built, std::numeric_limits<int64_t>::max() / 4);
  Fixed mine(at::tensor({1.0f}));
  std::string absent;
  EXPECT_TRUE(Accuracy(f, Bf16(f), 0, mine, at::Tensor(), &absent).empty());
  EXPECT_TRUE(built.empty());
  EXPECT_TRUE(absl::StartsWith(
      absent, "no accuracy check: the fp32 reference does not fit beside the model ("))
      << absent;
}

TEST(Accuracy, NoneIsDueInFp32AndNoneIsSaidMissing) {
  std::vector<BenchSpec> built;
  const Family f = Recording(&built, 1 << 20);
  BenchSpec spec = Bf16(f);
  spec.dtype = c10::kFloat;
  Fixed mine(at::tensor({1.0f}));
  std::string absent = "left over";
  EXPECT_TRUE(Accuracy(f, spec, 0, mine, at::Tensor(), &absent).empty());
  EXPECT_TRUE(built.empty());
  EXPECT_TRUE(absent.empty());
}

// torch.nn.functional.kl_div(log Q, P, reduction='none') summed over the
// vocabulary: KL(P || Q) of each position, the definition PositionKL must
// equal.
at::Tensor TorchKL(const at::Tensor& logits, const at::Tensor& ref) {
  const int64_t vocab = logits.size(-1);
  const at::Tensor log_q = logits.to(at::kDouble).reshape({-1, vocab}).log_softmax(-1);
  const at::Tensor p = ref.to(at::kDouble).reshape({-1, vocab}).softmax(-1);
  return torch::nn::functional::kl_div(
             log_q, p, torch::nn::functional::KLDivFuncOptions().reduction(torch::kNone))
      .sum(-1);
}

TEST(Divergence, PositionKLIsTorchsKlDivOfTheSoftmaxes) {
  at::manual_seed(3);
  // (batch, positions, vocabulary) of logits, some confident (scaled up),
  // and a drifted copy as a lower precision would give.
  const at::Tensor ref = at::randn({2, 5, 11}) *
                         at::tensor({0.1f, 1.0f, 8.0f, 30.0f, 2.0f}).reshape({1, 5, 1});
  const at::Tensor logits = ref + 0.3 * at::randn({2, 5, 11});
  const at::Tensor kl = PositionKL(logits, ref);
  ASSERT_EQ(kl.sizes(), (at::IntArrayRef{10}));
  EXPECT_EQ(kl.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::allclose(kl, TorchKL(logits, ref), 1e-12, 1e-15)) << kl;
  // In fp64 whatever the logits' dtype: bf16 logits are read as they are.
  const at::Tensor half = logits.to(at::kBFloat16);
  EXPECT_TRUE(at::allclose(PositionKL(half, ref), TorchKL(half, ref), 1e-12, 1e-15));
  // Not symmetric: KL(P || Q) is the reference's P against the run's Q.
  EXPECT_FALSE(at::allclose(kl, TorchKL(ref, logits), 1e-6, 0));
}

TEST(Divergence, AKnownPairOfDistributions) {
  // P = (1/2, 1/2), Q = (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3).
  const at::Tensor ref = at::zeros({1, 2});
  const at::Tensor logits = at::tensor({std::log(3.0f), 0.0f}).reshape({1, 2});
  EXPECT_NEAR(PositionKL(logits, ref).item<double>(), 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_EQ(PositionKL(ref, ref).item<double>(), 0);
}

TEST(Divergence, ALargeVocabularyIsWorkedThroughInChunks) {
  // 2^21 tokens a position: two positions a chunk, three positions.
  at::manual_seed(4);
  const at::Tensor ref = at::randn({3, 1 << 21});
  const at::Tensor logits = ref + 0.5 * at::randn({3, 1 << 21});
  EXPECT_TRUE(at::allclose(PositionKL(logits, ref), TorchKL(logits, ref), 1e-9, 1e-12));
}

TEST(Divergence, TheCountersAreTheKLsMeanP99MaxAndTheSameTopTokens) {
  at::manual_seed(5);
  const at::Tensor ref = 3 * at::randn({4, 50, 7});
  at::Tensor logits = ref + 0.5 * at::randn({4, 50, 7});
  const Divergence d = Diverge(logits, ref);
  const at::Tensor kl = TorchKL(logits, ref);
  EXPECT_EQ(d.positions, 200);
  EXPECT_EQ(d.non_finite, 0);
  EXPECT_NEAR(d.kld_mean, kl.mean().item<double>(), 1e-12);
  EXPECT_NEAR(d.kld_max, kl.max().item<double>(), 1e-12);
  // numpy's default percentile: linear between the ranks 197 and 198 of 200.
  const at::Tensor sorted = std::get<0>(kl.sort());
  const double rank = 0.99 * 199;
  const double lo = sorted[197].item<double>(), hi = sorted[198].item<double>();
  EXPECT_NEAR(d.kld_p99, lo + (rank - 197) * (hi - lo), 1e-12);
  const double same =
      logits.argmax(-1).eq(ref.argmax(-1)).to(at::kDouble).mean().item<double>() * 100;
  EXPECT_DOUBLE_EQ(d.same_top1, same);
  EXPECT_GT(same, 0);
  EXPECT_LT(same, 100);
  const auto counters = DivergenceCounters(d);
  ASSERT_EQ(counters.size(), 4u);
  EXPECT_EQ(counters[0], std::make_pair(std::string("kld_mean"), d.kld_mean));
  EXPECT_EQ(counters[1], std::make_pair(std::string("kld_p99"), d.kld_p99));
  EXPECT_EQ(counters[2], std::make_pair(std::string("kld_max"), d.kld_max));
  EXPECT_EQ(counters[3], std::make_pair(std::string("same_top1_%"), same));
}

TEST(Divergence, LogitsThatAreNotFiniteLeaveTheKLOut) {
  const at::Tensor ref = at::zeros({3, 4});
  at::Tensor logits = at::zeros({3, 4});
  logits[1][2] = std::numeric_limits<float>::infinity();
  const Divergence d = Diverge(logits, ref);
  EXPECT_EQ(d.positions, 3);
  EXPECT_EQ(d.non_finite, 1);
  // Nor a top token: argmax takes a NaN or an infinity as the largest.
  EXPECT_TRUE(DivergenceCounters(d).empty());
}

TEST(Accuracy, AQuantisedRunsDivergenceIsAgainstFp32Unquantised) {
  // bf16 with int8 weights: its other counters against bf16 unquantised,
  // its KL against fp32 unquantised (a second reference, built after the
  // first is let go).
  std::vector<BenchSpec> built;
  const at::Tensor ref = at::tensor({0.0f, 1.0f, 2.0f, 2.0f, 1.0f, 0.0f}).reshape({2, 3});
  const Family f = Recording(&built, 1 << 20, ref, /*logits=*/true);
  BenchSpec spec = Bf16(f);
  spec.quant.kind = QuantKind::kInt8;
  const at::Tensor mine =
      at::tensor({0.0f, 1.0f, 2.5f, 0.0f, 1.0f, 2.0f}).reshape({2, 3});
  Fixed run(mine, /*logits=*/true);
  std::string absent;
  const auto counters = Accuracy(f, spec, 0, run, at::Tensor(), &absent);
  EXPECT_TRUE(absent.empty()) << absent;
  ASSERT_EQ(built.size(), 2u);
  EXPECT_EQ(built[0].dtype, c10::kBFloat16);
  EXPECT_TRUE(built[0].quant.none());
  EXPECT_EQ(built[1].dtype, c10::kFloat);
  EXPECT_TRUE(built[1].quant.none());
  std::vector<std::string> names;
  for (const auto& [name, value] : counters) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"kld_mean", "kld_p99", "kld_max",
                                             "same_top1_%", "top1_agree_%", "rel_err"}));
  const at::Tensor kl = TorchKL(mine, ref);
  EXPECT_NEAR(counters[0].second, kl.mean().item<double>(), 1e-12);
  EXPECT_NEAR(counters[2].second, kl.max().item<double>(), 1e-12);
  EXPECT_EQ(counters[3].second, 50);  // the second position's top token moved
}

TEST(Accuracy, LogitsThatAreNotFiniteAgreeOnNothing) {
  // fp16 overflowing to NaN everywhere, quantised and not: both "predicted"
  // token 0 at every position, which top1_agree_% read as 100% agreement.
  std::vector<BenchSpec> built;
  const at::Tensor nan = at::full({2, 3}, std::numeric_limits<float>::quiet_NaN());
  const Family f = Recording(&built, 1 << 20, nan, /*logits=*/true);
  BenchSpec spec = Bf16(f);
  spec.quant.kind = QuantKind::kInt8;
  Fixed run(nan, /*logits=*/true);
  std::string absent;
  const auto counters = Accuracy(f, spec, 0, run, at::Tensor(), &absent);
  EXPECT_TRUE(counters.empty());
  EXPECT_EQ(
      absent,
      "top1_agree_% and rel_err left out: the logits of 2 of 2 positions are not "
      "finite; kld and same_top1_% left out: the logits of 2 of 2 positions are not "
      "finite");
  // Unquantised: its output against fp32's.
  spec.quant = Quant{};
  built.clear();
  const auto plain = Accuracy(f, spec, 0, run, at::Tensor(), &absent);
  for (const auto& [name, value] : plain) EXPECT_NE(name, "rel_err");
  EXPECT_TRUE(absl::StrContains(absent,
                                "rel_err left out: 6 of the output's 6 values are "
                                "not finite"))
      << absent;
}

TEST(Accuracy, AQuantisedTf32RunsDivergenceIsAgainstPlainFp32) {
  // fp32 with int8 weights, run as TF32: its other counters against the
  // same weights unquantised as TF32, its KL and ppl_ratio against plain
  // fp32, a second reference.
  std::vector<BenchSpec> built;
  const at::Tensor ref = at::tensor({0.0f, 1.0f, 2.0f, 2.0f, 1.0f, 0.0f}).reshape({2, 3});
  const Family f = Recording(&built, 1 << 20, ref, /*logits=*/true);
  BenchSpec spec = Bf16(f);
  spec.dtype = c10::kFloat;
  spec.tf32 = true;
  spec.quant.kind = QuantKind::kInt8;
  Fixed run(ref + 0.5 * at::eye(2, 3), /*logits=*/true);
  std::string absent;
  const auto counters = Accuracy(f, spec, 0, run, at::Tensor(), &absent);
  EXPECT_TRUE(absent.empty()) << absent;
  ASSERT_EQ(built.size(), 2u);
  EXPECT_EQ(built[0].dtype, c10::kFloat);
  EXPECT_TRUE(built[0].tf32);
  EXPECT_TRUE(built[0].quant.none());
  EXPECT_EQ(built[1].dtype, c10::kFloat);
  EXPECT_FALSE(built[1].tf32);
  EXPECT_TRUE(built[1].quant.none());
  std::vector<std::string> names;
  for (const auto& [name, value] : counters) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"kld_mean", "kld_p99", "kld_max",
                                             "same_top1_%", "top1_agree_%", "rel_err"}));
}

TEST(Accuracy, AnUnquantisedTf32RunIsCheckedAgainstPlainFp32) {
  std::vector<BenchSpec> built;
  const at::Tensor ref = at::tensor({0.0f, 1.0f, 2.0f, 2.0f, 1.0f, 0.0f}).reshape({2, 3});
  const Family f = Recording(&built, 1 << 20, ref, /*logits=*/true);
  BenchSpec spec = Bf16(f);
  spec.dtype = c10::kFloat;
  spec.tf32 = true;
  const at::Tensor mine = ref + 0.5 * at::eye(2, 3);
  Fixed run(mine, /*logits=*/true);
  std::string absent;
  const auto counters = Accuracy(f, spec, 0, run, at::Tensor(), &absent);
  EXPECT_TRUE(absent.empty()) << absent;
  ASSERT_EQ(built.size(), 1u);
  EXPECT_EQ(built[0].dtype, c10::kFloat);
  EXPECT_FALSE(built[0].tf32);
  const std::map<std::string, double> c(counters.begin(), counters.end());
  ASSERT_EQ(c.count("kld_mean"), 1u);
  EXPECT_NEAR(c.at("kld_mean"), TorchKL(mine, ref).mean().item<double>(), 1e-12);
  ASSERT_EQ(c.count("rel_err"), 1u);
  EXPECT_DOUBLE_EQ(c.at("rel_err"), 0.25);  // 0.5 / 2
}

// A workload that records whether TF32 was on for each of its computations.
class Tf32Recorder final : public Workload {
 public:
  Tf32Recorder(std::vector<bool>* seen, at::Tensor out)
      : seen_(seen), out_(std::move(out)) {}
  void Step() override {}
  at::Tensor Evaluate() override {
    seen_->push_back(at::globalContext().allowTF32CuBLAS());
    return out_;
  }
  bool EvaluatesLogits() const override { return true; }

 private:
  std::vector<bool>* seen_;
  at::Tensor out_;
};

TEST(Accuracy, ThePlainFp32ReferenceOfATf32RunComputesWithoutTf32) {
  // The runner keeps TF32 on for the whole of a /tf32 benchmark, its
  // accuracy check included (Tf32Scope); TF32 is a CUDA setting.
  const c10::Device cuda(c10::kCUDA);
  std::string why;
  if (!DeviceAvailable(cuda, &why)) GTEST_SKIP() << why;
  std::vector<bool> seen;
  const at::Tensor ref = at::tensor({0.0f, 1.0f, 2.0f, 2.0f, 1.0f, 0.0f}).reshape({2, 3});
  std::vector<BenchSpec> built;
  Family f = Recording(&built, 1 << 20, ref, /*logits=*/true);
  f.build = [&](const BenchSpec& spec) -> std::unique_ptr<Workload> {
    built.push_back(spec);
    return std::make_unique<Tf32Recorder>(&seen, ref.to(spec.device));
  };
  BenchSpec spec = Bf16(f);
  spec.device = cuda;
  spec.dtype = c10::kFloat;
  spec.tf32 = true;
  const DeviceBackend& backend = BackendOf(cuda);
  for (const bool quantised : {false, true}) {
    spec.quant.kind = quantised ? QuantKind::kInt8 : QuantKind::kNone;
    seen.clear();
    built.clear();
    backend.SetTf32(true);
    Fixed run(ref.to(cuda), /*logits=*/true);
    std::string absent;
    Accuracy(f, spec, 0, run, at::Tensor(), &absent);
    EXPECT_TRUE(at::globalContext().allowTF32CuBLAS());  // the benchmark's, back
    backend.SetTf32(false);
    ASSERT_EQ(seen.size(), built.size());
    for (size_t i = 0; i < built.size(); ++i) {
      EXPECT_EQ(seen[i], built[i].tf32)
          << "reference " << i << ", quantised " << quantised;
    }
    EXPECT_FALSE(built.back().tf32);
  }
}

TEST(Accuracy, OutputsThatAreNotLogitsHaveNoDivergence) {
  std::vector<BenchSpec> built;
  const Family f = Recording(&built, 1 << 20);
  Fixed mine(at::tensor({1.0f, 2.0f, 3.0f}));
  std::string absent;
  const auto drift = Accuracy(f, Bf16(f), 0, mine, at::Tensor(), &absent);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].first, "rel_err");
}

// A real decoder, generating: what the benchmark would build.
BenchSpec NanoGenerate(const std::string& family, c10::ScalarType dtype) {
  BenchSpec spec = SpecFor(family, "nano", "generate", 2);
  spec.dtype = dtype;
  spec.prompt = 6;
  spec.new_tokens = 5;
  return spec;
}

const Family& FamilyNamed(const std::string& name) {
  static const auto* families =
      new std::vector<Family>(RegisteredFamilies(/*include_test_only=*/true).value());
  return *FindFamily(*families, name).value();
}

std::map<std::string, double> AccuracyOf(const BenchSpec& spec) {
  const Family& family = FamilyNamed(spec.family);
  at::manual_seed(7);
  const std::unique_ptr<Workload> workload = family.build(spec);
  std::string absent;
  const auto counters = Accuracy(family, spec, 7, *workload, at::Tensor(), &absent);
  EXPECT_TRUE(absent.empty()) << absent;
  return {counters.begin(), counters.end()};
}

TEST(TeacherForced, AnFp32GenerationAgainstItselfHasNoDivergence) {
  for (const std::string family : {"Llama", "GPT2"}) {
    const BenchSpec spec = NanoGenerate(family, c10::kFloat);
    std::unique_ptr<Workload> runs[2];
    at::Tensor outs[2];
    for (int i = 0; i < 2; ++i) {
      at::manual_seed(7);
      runs[i] = FamilyNamed(family).build(spec);
      outs[i] = runs[i]->Evaluate();
    }
    const Divergence d = TeacherForced(*runs[0], outs[0], *runs[1], outs[1]);
    EXPECT_EQ(d.positions, 2 * (6 + 5)) << family;  // the prompt and the new tokens
    EXPECT_EQ(d.non_finite, 0) << family;
    EXPECT_EQ(d.kld_max, 0) << family;
    EXPECT_EQ(d.kld_mean, 0) << family;
    EXPECT_EQ(d.same_top1, 100) << family;
  }
}

TEST(TeacherForced, ScoringIsTheLogitsOfEveryPositionOfTheTokensGiven) {
  const BenchSpec spec = NanoGenerate("Llama", c10::kFloat);
  at::manual_seed(7);
  const std::unique_ptr<Workload> run = FamilyNamed("Llama").build(spec);
  const at::Tensor tokens = at::cat({run->Prompt(), run->Evaluate()}, 1);
  const at::Tensor logits = run->Score(tokens);
  ASSERT_EQ(logits.sizes(), (at::IntArrayRef{2, 11, 1000}));
  // Each greedy token is the top one of the position before it, as the
  // cached decoding chose it (within rounding: the two paths multiply in
  // different shapes, and a random model's top two can be close).
  const at::Tensor before = logits.narrow(1, 5, 5);  // (B, N, V)
  const at::Tensor chosen = before.gather(-1, tokens.narrow(1, 6, 5).unsqueeze(-1));
  EXPECT_TRUE(
      (std::get<0>(before.max(-1)) - chosen.squeeze(-1)).le(1e-4).all().item<bool>());
  // The prompt's logits are its positions' of the same forward.
  EXPECT_TRUE(at::allclose(run->Logits(), logits.narrow(1, 0, 6), 1e-4, 1e-5));
}

TEST(TeacherForced, Bf16AndInt8RunsOfANanoDecoderDivergeALittle) {
  for (const std::string family : {"Llama", "GPT2"}) {
    BenchSpec int8 = NanoGenerate(family, c10::kFloat);
    int8.quant.kind = QuantKind::kInt8;
    for (const BenchSpec& spec : {NanoGenerate(family, c10::kBFloat16), int8}) {
      const std::map<std::string, double> c = AccuracyOf(spec);
      const std::string name = spec.Name();
      ASSERT_EQ(c.count("kld_mean"), 1u) << name;
      EXPECT_GT(c.at("kld_mean"), 0) << name;
      EXPECT_LT(c.at("kld_mean"), 0.01) << name;
      EXPECT_LE(c.at("kld_mean"), c.at("kld_max")) << name;
      EXPECT_LE(c.at("kld_p99"), c.at("kld_max")) << name;
      EXPECT_LT(c.at("kld_max"), 0.1) << name;
      EXPECT_GE(c.at("same_top1_%"), 0) << name;
      EXPECT_LE(c.at("same_top1_%"), 100) << name;
      EXPECT_EQ(c.count("token_match_%"), 1u) << name;
    }
  }
}

TEST(TeacherForced, AReducedPrecisionForwardOfALanguageModelIsScoredOnItsLogits) {
  BenchSpec spec = SpecFor("Transformer", "nano", "forward", 2, 16);
  spec.dtype = c10::kBFloat16;
  const std::map<std::string, double> c = AccuracyOf(spec);
  ASSERT_EQ(c.count("kld_mean"), 1u);
  EXPECT_GT(c.at("kld_mean"), 0);
  EXPECT_LT(c.at("kld_max"), 0.1);
  EXPECT_EQ(c.count("rel_err"), 1u);
}

// ------------------------------------------------------ a held-out text

// A file in the test's temporary folder holding `text`; removed at the end.
class TokenFile {
 public:
  explicit TokenFile(const std::string& text)
      : path_((std::filesystem::temp_directory_path() /
               ("ltb_tokens_" + std::to_string(::getpid()) + "_" +
                std::to_string(counter_++) + ".txt"))
                  .string()) {
    std::ofstream(path_) << text;
  }
  ~TokenFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

TEST(EvalTokens, ALineIsASequenceAndCommentsAreSkipped) {
  const TokenFile file("# from a held-out text\n3 1 4 1\n\n5  9\t2 6\n# end\n");
  absl::StatusOr<at::Tensor> tokens = ReadEvalTokens(file.path());
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(*tokens,
                        at::tensor({3, 1, 4, 1, 5, 9, 2, 6}, at::kLong).reshape({2, 4})));
}

TEST(EvalTokens, BadFilesSayWhatIsWrongAndWhere) {
  const std::pair<const char*, const char*> cases[] = {
      {"1 2 3\n4 5\n", "line 2 holds 2 ids, but the first sequence 3"},
      {"1 2\n3 x\n", "line 2: 'x' is not a token id; valid: integers >= 0"},
      {"1 -2\n", "line 1: '-2' is not a token id"},
      {"# nothing\n\n", "holds no sequence of token ids"},
      {"7\n8\n", "its sequences have 1 id; scoring needs at least 2"},
  };
  for (const auto& [text, message] : cases) {
    const TokenFile file(text);
    const absl::StatusOr<at::Tensor> tokens = ReadEvalTokens(file.path());
    ASSERT_FALSE(tokens.ok()) << text;
    EXPECT_TRUE(absl::StrContains(tokens.status().message(), message))
        << tokens.status().message();
    EXPECT_TRUE(absl::StartsWith(tokens.status().message(), file.path()));
  }
  const absl::StatusOr<at::Tensor> none = ReadEvalTokens("/nonexistent/tokens.txt");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::StrContains(none.status().message(), "cannot open it; valid: a text"))
      << none.status().message();
}

TEST(EvalTokens, ADirectoryIsNamedAsOne) {
  // A directory opens as a stream on Linux and fails only on reading, where
  // "reading it failed" would send the user looking for a disk error.
  const std::string dir = std::filesystem::temp_directory_path().string();
  const absl::StatusOr<at::Tensor> tokens = ReadEvalTokens(dir);
  ASSERT_FALSE(tokens.ok());
  EXPECT_TRUE(absl::StartsWith(tokens.status().message(), dir));
  EXPECT_TRUE(absl::StrContains(tokens.status().message(),
                                "is a directory; valid: a text file of token ids"))
      << tokens.status().message();
}

TEST(Perplexity, UniformLogitsGiveTheVocabularySize) {
  // Every token equally likely among 7: each prediction costs ln 7 nats.
  const at::Tensor tokens = at::tensor({1, 2, 3, 4, 5, 6}, at::kLong).reshape({2, 3});
  const at::Tensor nll = NextTokenNll(at::zeros({2, 3, 7}), tokens);
  ASSERT_EQ(nll.sizes(), (at::IntArrayRef{4}));  // T - 1 predictions a sequence
  EXPECT_TRUE(at::allclose(nll, at::full({4}, std::log(7.0), at::kDouble), 0, 1e-15));
  EXPECT_NEAR(std::exp(nll.mean().item<double>()), 7.0, 1e-12);
}

TEST(Perplexity, NextTokenNllIsTorchsCrossEntropyOfTheShiftedTokens) {
  at::manual_seed(6);
  const at::Tensor logits = 4 * at::randn({3, 9, 13});
  const at::Tensor tokens = at::randint(0, 13, {3, 9}, at::kLong);
  const at::Tensor nll = NextTokenNll(logits, tokens);
  const at::Tensor expected = torch::nn::functional::cross_entropy(
      logits.narrow(1, 0, 8).reshape({-1, 13}).to(at::kDouble),
      tokens.narrow(1, 1, 8).reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  EXPECT_TRUE(at::allclose(nll, expected, 1e-12, 1e-15));
  // A position that predicts the next token surely costs nothing.
  at::Tensor sure = at::zeros({1, 2, 3});
  sure[0][0][2] = 1000;
  EXPECT_EQ(
      NextTokenNll(sure, at::tensor({0, 2}, at::kLong).reshape({1, 2})).item<double>(),
      0);
}

// A language model's stand-in: the logits of tokens are a fixed function of
// them (each position's row of `table` by its token), so that two of them
// with different tables give known distributions.
class TableModel final : public Workload {
 public:
  explicit TableModel(at::Tensor table) : table_(std::move(table)) {}
  void Step() override {}
  at::Tensor Score(const at::Tensor& tokens) override {
    ++calls;
    return at::embedding(table_, tokens);  // (B, T, V)
  }
  int calls = 0;

 private:
  at::Tensor table_;
};

TEST(ScoreText, ChunksOfSequencesGiveWhatTheWholeTextGives) {
  at::manual_seed(8);
  // A vocabulary of 2^14: 64 sequences of 8 ids take two chunks of 2^22
  // logits. The text uses its first 100 ids.
  const int64_t vocab = 1 << 14;
  const at::Tensor table = 3 * at::randn({100, vocab});
  const at::Tensor near = table + 0.3 * at::randn({100, vocab});
  const at::Tensor tokens = at::randint(0, 100, {64, 8}, at::kLong);
  TableModel run(near), reference(table);
  const TextScore score = ScoreText(run, &reference, tokens, c10::Device(c10::kCPU));
  EXPECT_EQ(run.calls, 3);  // the probe and two chunks
  EXPECT_EQ(score.predictions, 64 * 7);
  const at::Tensor whole = at::embedding(near, tokens);
  const at::Tensor whole_ref = at::embedding(table, tokens);
  EXPECT_NEAR(score.nll, NextTokenNll(whole, tokens).mean().item<double>(), 1e-9);
  EXPECT_NEAR(score.ref_nll, NextTokenNll(whole_ref, tokens).mean().item<double>(), 1e-9);
  EXPECT_NEAR(score.Ppl(), std::exp(score.nll), 1e-9);
  // The divergence of the positions that predict a token of the text.
  const Divergence d = Diverge(whole.narrow(1, 0, 7), whole_ref.narrow(1, 0, 7));
  EXPECT_EQ(score.divergence.positions, 64 * 7);
  EXPECT_NEAR(score.divergence.kld_mean, d.kld_mean, 1e-12);
  EXPECT_NEAR(score.divergence.kld_max, d.kld_max, 1e-12);
  EXPECT_EQ(score.divergence.same_top1, d.same_top1);
}

TEST(ScoreText, AnIdOutsideTheVocabularyIsRefusedBeforeItIsScored) {
  TableModel run(at::zeros({10, 10}));
  const at::Tensor tokens = at::tensor({1, 2, 10, 3}, at::kLong).reshape({2, 2});
  try {
    ScoreText(run, nullptr, tokens, c10::Device(c10::kCPU));
    FAIL() << "scored an id outside the vocabulary";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(),
                 "the text holds token id 10, outside the model's vocabulary of 10");
  }
  EXPECT_EQ(run.calls, 1);  // the probe alone
}

TEST(Accuracy, AnFp32RunReportsTheTextsPerplexityAlone) {
  const BenchSpec spec = SpecFor("GPT2", "nano", "forward", 2, 16);
  const Family& family = FamilyNamed("GPT2");
  at::manual_seed(7);
  const std::unique_ptr<Workload> run = family.build(spec);
  at::manual_seed(9);
  const at::Tensor text = at::randint(0, 1000, {5, 40}, at::kLong);
  std::string absent;
  const auto counters = Accuracy(family, spec, 7, *run, text, &absent);
  EXPECT_TRUE(absent.empty()) << absent;
  ASSERT_EQ(counters.size(), 1u);
  EXPECT_EQ(counters[0].first, "ppl");
  // exp of torch's mean cross-entropy of the model's logits of the text.
  const at::Tensor logits = run->Score(text);
  const double loss = torch::nn::functional::cross_entropy(
                          logits.narrow(1, 0, 39).reshape({-1, 1000}).to(at::kDouble),
                          text.narrow(1, 1, 39).reshape({-1}))
                          .item<double>();
  EXPECT_NEAR(counters[0].second, std::exp(loss), 1e-9 * std::exp(loss));
}

TEST(Accuracy, AReducedPrecisionScoresTheTextAgainstFp32) {
  for (const std::string phase : {"forward", "generate"}) {
    BenchSpec spec = phase == "forward" ? SpecFor("Llama", "nano", "forward", 2, 16)
                                        : NanoGenerate("Llama", c10::kFloat);
    spec.dtype = c10::kBFloat16;
    const Family& family = FamilyNamed("Llama");
    at::manual_seed(7);
    const std::unique_ptr<Workload> run = family.build(spec);
    const at::Tensor text = at::randint(0, 1000, {3, 30}, at::kLong);
    std::string absent;
    const auto counters = Accuracy(family, spec, 7, *run, text, &absent);
    EXPECT_TRUE(absent.empty()) << absent;
    std::vector<std::string> names;
    for (const auto& [name, value] : counters) names.push_back(name);
    std::vector<std::string> expected = {"ppl",     "ppl_ratio",   "kld_mean", "kld_p99",
                                         "kld_max", "same_top1_%", "rel_err"};
    if (phase == "generate") expected.back() = "token_match_%";
    EXPECT_EQ(names, expected) << phase;
    const std::map<std::string, double> c(counters.begin(), counters.end());
    // The ratio is to fp32's perplexity of the same text.
    at::manual_seed(7);
    BenchSpec fp32 = spec;
    fp32.dtype = c10::kFloat;
    const std::unique_ptr<Workload> ref = family.build(fp32);
    const double ref_ppl =
        std::exp(NextTokenNll(ref->Score(text), text).mean().item<double>());
    EXPECT_NEAR(c.at("ppl") / c.at("ppl_ratio"), ref_ppl, 1e-9 * ref_ppl) << phase;
    EXPECT_NEAR(c.at("ppl_ratio"), 1, 0.05) << phase;
    // Over the text's 3 x 29 predicting positions, not the prompt's.
    const Divergence d =
        Diverge(run->Score(text).narrow(1, 0, 29), ref->Score(text).narrow(1, 0, 29));
    EXPECT_NEAR(c.at("kld_mean"), d.kld_mean, 1e-12) << phase;
    EXPECT_EQ(c.at("same_top1_%"), d.same_top1) << phase;
  }
}

TEST(Accuracy, AReferenceThatDoesNotFitLeavesTheRunsOwnPerplexity) {
  // bf16 beside its fp32 reference, and int8 beside its unquantised one:
  // the ratio and the divergence need the reference; ppl does not.
  for (const std::string quant : {"none", "int8"}) {
    BenchSpec spec = SpecFor("GPT2", "nano", "forward", 2, 16);
    if (quant == "none") spec.dtype = c10::kBFloat16;
    if (quant == "int8") spec.quant.kind = QuantKind::kInt8;
    Family family = FamilyNamed("GPT2");
    family.plan = [](const BenchSpec&) -> absl::StatusOr<Plan> {
      Plan p;
      p.memory.weights = std::numeric_limits<int64_t>::max() / 4;
      return p;
    };
    at::manual_seed(7);
    const std::unique_ptr<Workload> run = family.build(spec);
    const at::Tensor text = at::randint(0, 1000, {3, 30}, at::kLong);
    std::string absent;
    const auto counters = Accuracy(family, spec, 7, *run, text, &absent);
    ASSERT_EQ(counters.size(), 1u) << quant;
    EXPECT_EQ(counters[0].first, "ppl") << quant;
    const double ppl =
        std::exp(NextTokenNll(run->Score(text), text).mean().item<double>());
    EXPECT_NEAR(counters[0].second, ppl, 1e-3 * ppl) << quant;
    EXPECT_TRUE(absl::StartsWith(absent, "no accuracy check: the "))
        << quant << ": " << absent;
    EXPECT_TRUE(absl::StrContains(absent, "reference does not fit beside the model ("))
        << absent;
  }
}

TEST(Accuracy, ATextLongerThanTheModelsPositionsSaysSoInOneSentence) {
  // The Transformer's positions are its seq: an fp32 run has nothing else
  // to report, and says why in LibTorch's sentence, without its stack trace.
  const BenchSpec spec = SpecFor("Transformer", "nano", "forward", 1, 16);
  const Family& family = FamilyNamed("Transformer");
  at::manual_seed(7);
  const std::unique_ptr<Workload> run = family.build(spec);
  std::string absent;
  const auto counters =
      Accuracy(family, spec, 7, *run, at::randint(0, 1000, {2, 30}, at::kLong), &absent);
  EXPECT_TRUE(counters.empty());
  EXPECT_EQ(absent,
            "no perplexity: sequence of 30 positions is longer than the model's 16");
}

TEST(Accuracy, ASpeechModelDoesNotScoreAText) {
  // Whisper's decoder predicts tokens from audio: a text alone is not what
  // it models.
  BenchSpec spec = SpecFor("Whisper", "nano", "generate", 1);
  spec.dtype = c10::kBFloat16;
  spec.prompt = 4;
  spec.new_tokens = 3;
  const Family& family = FamilyNamed("Whisper");
  at::manual_seed(7);
  const std::unique_ptr<Workload> run = family.build(spec);
  std::string absent;
  const auto counters =
      Accuracy(family, spec, 7, *run, at::randint(0, 256, {2, 8}, at::kLong), &absent);
  EXPECT_TRUE(absent.empty()) << absent;
  const std::map<std::string, double> c(counters.begin(), counters.end());
  EXPECT_EQ(c.count("ppl"), 0u);
  EXPECT_EQ(c.count("kld_mean"), 1u);  // over the prompt and the greedy tokens
}

TEST(Accuracy, ATextTheModelCannotReadFallsBackToThePromptAndSaysWhy) {
  BenchSpec spec = NanoGenerate("Llama", c10::kBFloat16);
  const Family& family = FamilyNamed("Llama");
  at::manual_seed(7);
  const std::unique_ptr<Workload> run = family.build(spec);
  const at::Tensor text = at::full({2, 5}, 1000, at::kLong);  // Llama/nano's V is 1000
  std::string absent;
  const auto counters = Accuracy(family, spec, 7, *run, text, &absent);
  EXPECT_EQ(absent,
            "no perplexity: the text holds token id 1000, outside the model's vocabulary "
            "of 1000");
  const std::map<std::string, double> c(counters.begin(), counters.end());
  EXPECT_EQ(c.count("ppl"), 0u);
  EXPECT_EQ(c.count("kld_mean"), 1u);
  EXPECT_EQ(c.count("token_match_%"), 1u);
}

}  // namespace
}  // namespace ltb
