#include "models/gpt2.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "profiled_flops.h"
#include "random_weights.h"
#include "spec_for.h"
#include "workloads/generation.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

GPT2Options GPT2Nano() { return GPT2SizeOptions("nano").value(); }

TEST(GPT2Sizes, AnalyticCountEqualsTheCardForEverySize) {
  const std::map<std::string, int64_t> card = {{"nano", 229'632},
                                               {"small", 124'439'808},
                                               {"medium", 354'823'168},
                                               {"large", 774'030'080},
                                               {"xl", 1'557'611'200}};
  ASSERT_EQ(GPT2Sizes().size(), card.size());
  for (const GPT2Size& s : GPT2Sizes()) {
    EXPECT_EQ(GPT2ParamCount(s.options), card.at(s.name)) << s.name;
    EXPECT_EQ(s.card_params, card.at(s.name)) << s.name;
  }
}

TEST(GPT2Sizes, BuiltModelsHaveTheCardsParameterCount) {
  for (const auto& [size, count] : std::vector<std::pair<std::string, int64_t>>{
           {"nano", 229'632}, {"small", 124'439'808}, {"medium", 354'823'168}}) {
    GPT2LM model(GPT2SizeOptions(size).value());
    EXPECT_EQ(CountParameters(*model), count) << size;
  }
}

TEST(GPT2LM, ParameterNamesMatchTheReferenceAndTheHeadIsTied) {
  GPT2LM model(GPT2Nano());
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
  for (const char* name :
       {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
        "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight",
        "h.1.ln_2.bias", "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.bias", "ln_f.weight",
        "ln_f.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_EQ(names.size(), 2u * 12 + 4);  // no separate LM head
}

TEST(GPT2LM, IsCausal) {
  torch::manual_seed(3);
  GPT2LM model(GPT2Nano());
  torch::NoGradGuard no_grad;
  const at::Tensor a = torch::randint(0, 1000, {1, 12});
  at::Tensor b = a.clone();
  b[0][6] = (a[0][6].item<int64_t>() + 1) % 1000;
  const at::Tensor la = model(a), lb = model(b);
  EXPECT_TRUE(torch::allclose(la.narrow(1, 0, 6), lb.narrow(1, 0, 6), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(la.select(1, 6), lb.select(1, 6)));
}

TEST(GPT2Generate, CacheGivesExactlyTheTokensOfRecomputation) {
  torch::manual_seed(4);
  GPT2LM model(GPT2Nano());
  torch::NoGradGuard no_grad;
  for (int64_t batch : {1, 4}) {
    for (int64_t prompt : {1, 7, 32}) {
      const at::Tensor p = torch::randint(0, 1000, {batch, prompt});
      const at::Tensor cached = GenerateWithCache(model, p, 24);
      const at::Tensor recomputed = GenerateByRecompute(model, p, 24);
      ASSERT_EQ(cached.sizes(), (std::vector<int64_t>{batch, 24}));
      EXPECT_TRUE(torch::equal(cached, recomputed))
          << "batch " << batch << " prompt " << prompt;
    }
  }
}

TEST(GPT2Generate, PackedCpuLinearsGiveTheSameTokens) {
  if (!CanPackLinear(c10::Device(c10::kCPU), c10::kFloat)) GTEST_SKIP() << "no oneDNN";
  torch::manual_seed(5);
  GPT2LM model(GPT2Nano());
  torch::NoGradGuard no_grad;
  const at::Tensor p = torch::randint(0, 1000, {2, 16});
  const at::Tensor expected = GenerateByRecompute(model, p, 24);
  // Four linear layers a block (nano has two) and the tied LM head.
  EXPECT_EQ(PackLinears(*model, c10::Device(c10::kCPU), c10::kFloat).value(), 2 * 4 + 1);
  EXPECT_TRUE(torch::equal(GenerateWithCache(model, p, 24), expected));
}

TEST(GPT2Generate, CacheIsAllocatedOnceAndWrittenInPlace) {
  GPT2LM model(GPT2Nano());
  torch::NoGradGuard no_grad;
  KVCache cache = model->MakeCache(2, 20);
  ASSERT_EQ(cache.keys.size(), 2u);
  EXPECT_EQ(cache.keys[0].sizes(), (std::vector<int64_t>{2, 4, 20, 16}));
  const void* k0 = cache.keys[0].data_ptr();
  const void* v1 = cache.values[1].data_ptr();
  at::Tensor token =
      model->forward_cached(torch::randint(0, 1000, {2, 8}), 0, cache).argmax(-1, true);
  for (int64_t pos = 8; pos < 19; ++pos) {
    token = model->forward_cached(token, pos, cache).argmax(-1, true);
  }
  EXPECT_EQ(cache.keys[0].data_ptr(), k0);
  EXPECT_EQ(cache.values[1].data_ptr(), v1);
  EXPECT_THROW(model->forward_cached(token, 20, cache), c10::Error);  // beyond the cache
}

TEST(GPT2Flops, AnalyticForwardCountEqualsTheProfilers) {
  for (const auto& [batch, seq] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {3, 40}}) {
    GPT2Options o = GPT2Nano();
    o.fused_attention(false);  // so attention runs as matmuls the profiler counts
    GPT2LM model(o);
    const at::Tensor tokens = torch::randint(0, 1000, {batch, seq});
    const double profiled = ProfiledMatmulFlops([&] {
      torch::NoGradGuard no_grad;
      model(tokens);
    });
    EXPECT_NEAR(profiled, GPT2ForwardFlops(o, batch, seq), 0.01 * profiled)
        << "batch " << batch << " seq " << seq;
  }
}

TEST(GPT2Flops, AnalyticGenerationCountEqualsTheProfilers) {
  GPT2Options o = GPT2Nano();
  o.fused_attention(false);
  GPT2LM model(o);
  const at::Tensor prompt = torch::randint(0, 1000, {2, 12});
  const double profiled = ProfiledMatmulFlops([&] {
    torch::NoGradGuard no_grad;
    GenerateWithCache(model, prompt, 9);
  });
  EXPECT_NEAR(profiled, GPT2GenerateFlops(o, 2, 12, 9), 0.01 * profiled);
}

TEST(GPT2Flops, HandCountForNano) {
  // Per layer 24 B T d^2 + 4 B T^2 d; head 2 B T d V. B = 2, T = 5, d = 64.
  const double b = 2, t = 5, d = 64, v = 1000;
  const double layer = 24 * b * t * d * d + 4 * b * t * t * d;
  EXPECT_DOUBLE_EQ(GPT2ForwardFlops(GPT2Nano(), 2, 5), 2 * layer + 2 * b * t * d * v);
  // Generation: prompt 5 with one head row, then 2 steps over 6 and 7 keys.
  const double gen = 2 * (24 * b * t * d * d + 4 * b * t * t * d) +
                     2 * (24 * b * d * d + 4 * b * 6 * d) +
                     2 * (24 * b * d * d + 4 * b * 7 * d) + 3 * 2 * b * d * v;
  EXPECT_DOUBLE_EQ(GPT2GenerateFlops(GPT2Nano(), 2, 5, 3), gen);
}

BenchSpec GenerateSpec(int64_t prompt, int64_t new_tokens) {
  BenchSpec s = SpecFor("GPT2", "nano", kGenerate, 2);
  s.prompt = prompt;
  s.new_tokens = new_tokens;
  return s;
}

TEST(GPT2Family, RejectsMorePositionsThanTheModelHas) {
  const Family f = GPT2Family();
  EXPECT_TRUE(f.plan(GenerateSpec(924, 100)).ok());
  const auto bad = f.plan(GenerateSpec(1000, 100));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("1100 positions, but GPT2 has 1024"),
            std::string::npos)
      << bad.status().message();
}

TEST(GPT2Family, GenerationCountersAddUpToTheStepTime) {
  const Family f = GPT2Family();
  const BenchSpec s = GenerateSpec(32, 40);
  std::unique_ptr<Workload> w = f.build(s);
  w->Step();
  w->ResetStats();
  const int steps = 5;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) w->Step();
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count() /
      steps;
  std::map<std::string, double> c;
  for (const auto& [name, value] : w->Counters()) c[name] = value;
  for (const char* name :
       {"ttft_ms", "tpot_ms", "pp_tok/s", "tg_tok/s", "weight_GB/s", "tpot_growth_%"}) {
    EXPECT_TRUE(c.count(name)) << name;
  }
  EXPECT_NEAR(c["ttft_ms"] + 39 * c["tpot_ms"], step_ms, 0.05 * step_ms);
  EXPECT_NEAR(c["tg_tok/s"], 2 * 39 / (39 * c["tpot_ms"] / 1e3), 1e-6 * c["tg_tok/s"]);
  EXPECT_NEAR(c["pp_tok/s"], 2 * 32 / (c["ttft_ms"] / 1e3), 1e-6 * c["pp_tok/s"]);
}

TEST(GPT2Family, EveryPhaseBuildsAndSteps) {
  const Family f = GPT2Family();
  for (const char* phase : {kForward, kForwardBackward, kTrainStep}) {
    const BenchSpec s = SpecFor(f.name, "nano", phase, 2, 16);
    ASSERT_TRUE(f.plan(s).ok());
    std::unique_ptr<Workload> w = f.build(s);
    w->Step();
  }
}

// Random weights as Hugging Face draws them: every matrix and embedding of
// standard deviation 0.02 (the residual projections, c_proj,
// 0.02 / sqrt(2 layers)), biases zero, norms one. So the random
// model predicts about uniformly (a next-token loss of about ln V, as an
// untrained model's), not with the logits in the hundreds that LibTorch's
// N(0, 1) embedding, tied to the output layer, gave: their softmax holds
// denormal probabilities, which slowed train_step threefold as it ran.
TEST(GPT2LM, RandomWeightsAreHuggingFacesAndPredictAboutUniformly) {
  torch::manual_seed(0);
  const GPT2Options o = GPT2SizeOptions("nano").value();
  GPT2LM model(o);
  ExpectHuggingFaceWeights(*model, [&](const std::string& name) {
    return absl::EndsWith(name, "c_proj.weight")
               ? 0.02 / std::sqrt(2.0 * static_cast<double>(o.num_layers()))
               : 0.02;
  });
  const double loss =
      RandomTokensLoss([&](const at::Tensor& x) { return model(x); }, o.vocab_size());
  EXPECT_NEAR(loss, std::log(static_cast<double>(o.vocab_size())), 0.25);
}

}  // namespace
}  // namespace ltb
