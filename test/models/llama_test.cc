#include "models/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "profiled_flops.h"
#include "random_weights.h"
#include "spec_for.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

LlamaOptions LlamaNano() { return LlamaSizeOptions("nano").value(); }

TEST(LlamaSizes, AnalyticCountEqualsTheCardForEverySize) {
  const std::map<std::string, int64_t> card = {{"nano", 187'200},
                                               {"1B", 1'235'814'400},
                                               {"3B", 3'212'749'824},
                                               {"8B", 8'030'261'248}};
  ASSERT_EQ(LlamaSizes().size(), card.size());
  for (const LlamaSize& s : LlamaSizes()) {
    EXPECT_EQ(LlamaParamCount(s.options), card.at(s.name)) << s.name;
    EXPECT_EQ(s.card_params, card.at(s.name)) << s.name;
  }
  // The card's shapes: Llama 3.2 1B and 3B tie the head, Llama 3.1 8B does not.
  const LlamaOptions b8 = LlamaSizeOptions("8B").value();
  EXPECT_FALSE(b8.tied());
  EXPECT_EQ(b8.rope_factor(), 8.0);
  EXPECT_EQ(LlamaSizeOptions("3B")->head_dim(), 128);
  EXPECT_EQ(LlamaSizeOptions("1B")->num_kv_heads(), 8);
}

TEST(LlamaSizes, BuiltModelsHaveTheCardsParameterCount) {
  LlamaLM nano(LlamaNano());
  EXPECT_EQ(CountParameters(*nano), 187'200);
  // 1B with 2 layers: the embedding and norm as 1B's, two of its layers.
  LlamaOptions two = LlamaSizeOptions("1B").value();
  two.num_layers(2);
  LlamaLM model(two);
  const int64_t d = 2048, layer = 2 * d * d + 2 * d * 512 + 3 * d * 8192 + 2 * d;
  EXPECT_EQ(CountParameters(*model), 2 * layer + 128256 * d + d);
}

TEST(LlamaLM, ParameterNamesAreHuggingFaces) {
  std::set<std::string> tied, untied;
  for (const auto& p : LlamaLM(LlamaNano())->named_parameters()) tied.insert(p.key());
  LlamaOptions o = LlamaNano();
  o.tied(false);
  for (const auto& p : LlamaLM(o)->named_parameters()) untied.insert(p.key());
  for (const char* name :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight", "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight",
        "model.layers.1.input_layernorm.weight",
        "model.layers.1.post_attention_layernorm.weight", "model.norm.weight"}) {
    EXPECT_TRUE(tied.count(name)) << name;
  }
  EXPECT_EQ(tied.size(), 2u * 9 + 2);  // no lm_head when tied
  // The one buffer: the inverse frequencies, as transformers' rotary_emb.
  std::vector<std::string> buffers;
  for (const auto& b : LlamaLM(LlamaNano())->named_buffers()) buffers.push_back(b.key());
  EXPECT_EQ(buffers, std::vector<std::string>{"model.rotary_emb.inv_freq"});
  EXPECT_EQ(untied.size(), tied.size() + 1);
  EXPECT_TRUE(untied.count("lm_head.weight"));
  // Grouped-query attention: k and v have kv heads (2 x 16), q has 4 x 16.
  LlamaLM model(LlamaNano());
  auto* attn = model->model->layers[0]->as<LlamaLayer>()->self_attn.get();
  EXPECT_EQ(attn->q_proj->weight.sizes(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(attn->k_proj->weight.sizes(), (std::vector<int64_t>{32, 64}));
}

TEST(LlamaRope, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  // 1B: head size 64, theta 500000, factor 32, original context 8192, low
  // factor 1 (wavelengths over 8192 divided), high factor 4 (under 2048 kept).
  const LlamaOptions o = LlamaSizeOptions("1B").value();
  const at::Tensor got = LlamaInverseFrequencies(o).to(at::kDouble);
  ASSERT_EQ(got.size(0), 32);
  int kept = 0, divided = 0, smoothed = 0;
  for (int64_t i = 0; i < 32; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 64);
    const double wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 8192) {
      want = f / 32;
      ++divided;
    } else if (wavelen >= 2048) {
      const double s = (8192 / wavelen - 1) / (4 - 1);
      want = (1 - s) * f / 32 + s * f;
      ++smoothed;
    } else {
      ++kept;
    }
    EXPECT_NEAR(got[i].item<double>(), want, 1e-6 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(LlamaRope, RotatesTheTwoHalvesOfAHeadTogether) {
  const LlamaOptions o = LlamaNano();
  LlamaRotary rope(o);
  const at::Tensor inv = LlamaInverseFrequencies(o);  // (8)
  EXPECT_TRUE(torch::equal(rope->inv_freq, inv));
  const at::Tensor x = torch::randn({1, 1, 1, 16});
  const auto [cos, sin] = rope(torch::tensor({5}, torch::kLong), at::kFloat);
  const at::Tensor y = ApplyLlamaRotary(x, cos, sin);
  for (int64_t i = 0; i < 8; ++i) {
    const double a = 5 * inv[i].item<double>();
    const double x1 = x[0][0][0][i].item<double>(), x2 = x[0][0][0][i + 8].item<double>();
    EXPECT_NEAR(y[0][0][0][i].item<double>(), x1 * std::cos(a) - x2 * std::sin(a), 1e-5);
    EXPECT_NEAR(y[0][0][0][i + 8].item<double>(), x2 * std::cos(a) + x1 * std::sin(a),
                1e-5);
  }
}

TEST(LlamaRope, FrequenciesStayFp32InABf16ModelSoLatePositionsKeepTheirAngles) {
  // A model cast to bf16 for inference keeps its inverse frequencies in
  // fp32 (rounded to bf16 they are off by up to 2^-9, which at position
  // 2047 turns the fastest pair by radians); cos and sin are then only
  // rounded to bf16 once, at the end.
  const LlamaOptions o = LlamaSizeOptions("1B").value();
  LlamaRotary rope(o);
  rope->to(at::kBFloat16);
  EXPECT_EQ(rope->inv_freq.scalar_type(), at::kFloat);
  rope->to(torch::kCPU, at::kHalf);
  EXPECT_EQ(rope->inv_freq.scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(rope->inv_freq, LlamaInverseFrequencies(o)));
  // And inside a whole model cast as bench casts one for inference.
  LlamaLM model(LlamaNano());
  BenchSpec spec = SpecFor("Llama", "nano", "forward");
  spec.device = torch::kCPU;
  spec.dtype = at::kBFloat16;
  PrepareModel(*model, spec);
  for (const auto& b : model->named_buffers()) {
    if (absl::EndsWith(b.key(), "inv_freq")) {
      EXPECT_EQ(b.value().scalar_type(), at::kFloat) << b.key();
    }
  }
  const at::Tensor positions = torch::arange(2048, torch::kLong);
  const auto [cos, sin] = rope(positions, at::kBFloat16);
  const at::Tensor angles =
      torch::outer(positions.to(at::kDouble), LlamaInverseFrequencies(o).to(at::kDouble));
  // bf16 rounding of values in [-1, 1]: 2^-9 at most.
  EXPECT_LT((cos.to(at::kDouble) - angles.cos()).abs().max().item<double>(), 4e-3);
  EXPECT_LT((sin.to(at::kDouble) - angles.sin()).abs().max().item<double>(), 4e-3);
}

TEST(LlamaLM, IsCausal) {
  torch::manual_seed(3);
  LlamaLM model(LlamaNano());
  torch::NoGradGuard no_grad;
  const at::Tensor a = torch::randint(0, 1000, {1, 12});
  at::Tensor b = a.clone();
  b[0][6] = (a[0][6].item<int64_t>() + 1) % 1000;
  const at::Tensor la = model(a), lb = model(b);
  EXPECT_TRUE(torch::allclose(la.narrow(1, 0, 6), lb.narrow(1, 0, 6), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(la.select(1, 6), lb.select(1, 6)));
}

TEST(LlamaGenerate, CacheOfKvHeadsGivesExactlyTheTokensOfRecomputation) {
  torch::manual_seed(4);
  for (const bool tied : {true, false}) {
    LlamaOptions o = LlamaNano();
    o.tied(tied);
    LlamaLM model(o);
    torch::NoGradGuard no_grad;
    for (int64_t batch : {1, 3}) {
      for (int64_t prompt : {1, 9}) {
        const at::Tensor p = torch::randint(0, 1000, {batch, prompt});
        const at::Tensor cached = GenerateWithCache(model, p, 20);
        EXPECT_TRUE(torch::equal(cached, GenerateByRecompute(model, p, 20)))
            << "tied " << tied << " batch " << batch << " prompt " << prompt;
      }
    }
    const KVCache cache = model->MakeCache(2, 20);
    EXPECT_EQ(cache.keys[0].sizes(), (std::vector<int64_t>{2, 2, 20, 16}));  // kv heads
  }
}

TEST(LlamaFlops, AnalyticCountsEqualTheProfilers) {
  LlamaOptions o = LlamaNano();
  o.fused_attention(false);
  LlamaLM model(o);
  const at::Tensor tokens = torch::randint(0, 1000, {2, 24});
  const double forward = ProfiledMatmulFlops([&] {
    torch::NoGradGuard no_grad;
    model(tokens);
  });
  EXPECT_NEAR(forward, LlamaForwardFlops(o, 2, 24), 0.01 * forward);
  const double generate = ProfiledMatmulFlops([&] {
    torch::NoGradGuard no_grad;
    GenerateWithCache(model, tokens.narrow(1, 0, 12), 9);
  });
  EXPECT_NEAR(generate, LlamaGenerateFlops(o, 2, 12, 9), 0.01 * generate);
}

TEST(LlamaFamily, EveryPhaseBuildsAndSteps) {
  const Family f = LlamaFamily();
  for (const char* phase : {kForward, kForwardBackward, kTrainStep}) {
    const BenchSpec s = SpecFor(f.name, "nano", phase, 2, 16);
    ASSERT_TRUE(f.plan(s).ok());
    f.build(s)->Step();
  }
  BenchSpec g = SpecFor(f.name, "nano", kGenerate, 2);
  g.prompt = 8;
  g.new_tokens = 6;
  const absl::StatusOr<Plan> plan = f.plan(g);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->tokens_per_step, 12);
  EXPECT_TRUE(plan->reports_weight_bandwidth);
  std::unique_ptr<Workload> w = f.build(g);
  w->Step();
  std::map<std::string, double> c;
  for (const auto& [name, value] : w->Counters()) c[name] = value;
  EXPECT_GT(c["tg_tok/s"], 0);
}

TEST(LlamaFamily, Training8BInFp32NeedsFarMoreThanAWorkstation) {
  // The memory guard refuses what does not fit: 8B's fp32 weights,
  // gradients and AdamW's two moments alone are 16 bytes a parameter.
  const BenchSpec s = SpecFor("Llama", "8B", kTrainStep, 1, 2048);
  const absl::StatusOr<Plan> plan = LlamaFamily().plan(s);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->memory.weights + plan->memory.gradients + plan->memory.optimizer,
            16 * int64_t{8'030'261'248});
  EXPECT_GT(plan->memory.Total(), int64_t{24} << 30);
}

// Random weights as Hugging Face draws them: every matrix and embedding of
// standard deviation 0.02, biases zero, norms one. So the random
// model predicts about uniformly (a next-token loss of about ln V, as an
// untrained model's), not with the logits in the hundreds that LibTorch's
// N(0, 1) embedding, tied to the output layer, gave: their softmax holds
// denormal probabilities, which slowed train_step threefold as it ran.
TEST(LlamaLM, RandomWeightsAreHuggingFacesAndPredictAboutUniformly) {
  torch::manual_seed(0);
  const LlamaOptions o = LlamaSizeOptions("nano").value();
  LlamaLM model(o);
  ExpectHuggingFaceWeights(*model, [](const std::string&) { return 0.02; });
  const double loss =
      RandomTokensLoss([&](const at::Tensor& x) { return model(x); }, o.vocab_size());
  EXPECT_NEAR(loss, std::log(static_cast<double>(o.vocab_size())), 0.25);
}

}  // namespace
}  // namespace ltb
