// The one decoder (models/decoder.h) over every decoder family's row
// (models/decoder_family.h): what every row must do is tested once, for
// each row; what a row alone has (its names, its rotary, its checkpoints'
// conventions) after that.
#include "models/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/cpu_memory.h"
#include "layers/prepare.h"
#include "models/decoder_family.h"
#include "profiled_flops.h"
#include "random_weights.h"
#include "spec_for.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

DecoderOptions Nano(const std::string& family) {
  return DecoderSizeOptions(family, "nano").value();
}

class EveryDecoder : public testing::TestWithParam<std::string> {
 protected:
  const std::string& family() const { return GetParam(); }
  const DecoderRow& row() const { return *FindDecoderRow(family()).value(); }
  DecoderLM Make(const DecoderOptions& o) const { return MakeDecoder(family(), o); }
};

INSTANTIATE_TEST_SUITE_P(Rows, EveryDecoder,
                         testing::Values("Transformer", "GPT2", "Llama"),
                         [](const auto& info) { return info.param; });

// shared/MODELS.md's parameter counts.
const std::map<std::string, std::map<std::string, int64_t>>& Cards() {
  static const auto* cards = new std::map<std::string, std::map<std::string, int64_t>>{
      {"Transformer",
       {{"nano", 259'392},
        {"small", 128'625'408},
        {"medium", 423'183'360},
        {"large", 969'411'840},
        {"xl", 1'998'235'200},
        {"2.7B", 3'406'809'600}}},
      {"GPT2",
       {{"nano", 229'632},
        {"small", 124'439'808},
        {"medium", 354'823'168},
        {"large", 774'030'080},
        {"xl", 1'557'611'200}}},
      {"Llama",
       {{"nano", 187'200},
        {"1B", 1'235'814'400},
        {"3B", 3'212'749'824},
        {"8B", 8'030'261'248}}},
  };
  return *cards;
}

TEST_P(EveryDecoder, AnalyticCountEqualsTheCardForEverySize) {
  const auto& card = Cards().at(family());
  ASSERT_EQ(row().sizes.size(), card.size());
  for (const DecoderSize& s : row().sizes) {
    EXPECT_EQ(DecoderParamCount(s.options), card.at(s.name)) << s.name;
    EXPECT_EQ(s.card_params, card.at(s.name)) << s.name;
  }
}

TEST_P(EveryDecoder, BuiltModelsHaveTheCardsParameterCount) {
  EXPECT_EQ(CountParameters(*Make(Nano(family()))), Cards().at(family()).at("nano"));
  // The second size with two layers: its embedding, head and norms, two of
  // its layers (counted from the nano model's per-layer count would hide a
  // width that the nano shape happens to equal).
  const DecoderSize& second = row().sizes[1];
  DecoderOptions two = second.options;
  two.num_layers(2);
  DecoderOptions zero = second.options;
  zero.num_layers(0);
  const int64_t per_layer =
      (DecoderParamCount(second.options) - DecoderParamCount(zero)) /
      second.options.num_layers();
  EXPECT_EQ(CountParameters(*Make(two)), DecoderParamCount(zero) + 2 * per_layer);
}

TEST_P(EveryDecoder, UnknownSizeNamesTheValidOnes) {
  const auto o = DecoderSizeOptions(family(), "huge");
  ASSERT_FALSE(o.ok());
  std::vector<std::string> names;
  for (const DecoderSize& s : row().sizes) names.push_back(s.name);
  EXPECT_NE(
      o.status().message().find(absl::StrCat(
          "unknown ", family(), " size 'huge'; valid: ", absl::StrJoin(names, ", "))),
      std::string::npos)
      << o.status().message();
}

TEST_P(EveryDecoder, IsCausal) {
  torch::manual_seed(3);
  DecoderLM model = Make(Nano(family()));
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor a = torch::randint(0, 1000, {2, 16});
  at::Tensor b = a.clone();
  b.select(1, 6).fill_((a[0][6].item<int64_t>() + 1) % 1000);
  const at::Tensor la = model(a), lb = model(b);
  EXPECT_EQ(la.sizes(), (std::vector<int64_t>{2, 16, 1000}));
  EXPECT_TRUE(torch::allclose(la.narrow(1, 0, 6), lb.narrow(1, 0, 6), 1e-5, 1e-6))
      << "a logit before position 6 changed when token 6 changed";
  EXPECT_FALSE(torch::allclose(la.select(1, 6), lb.select(1, 6)))
      << "token 6 had no effect on its own position";
}

TEST_P(EveryDecoder, CacheGivesExactlyTheTokensOfRecomputation) {
  torch::manual_seed(4);
  const bool tied = Nano(family()).tied();
  // (tied, batch, prompt): the row's head at three shapes, the other once.
  for (const auto& [head_tied, batch, prompt] :
       std::vector<std::tuple<bool, int64_t, int64_t>>{
           {tied, 1, 1}, {tied, 3, 9}, {tied, 1, 32}, {!tied, 3, 9}}) {
    DecoderOptions o = Nano(family());
    o.tied(head_tied);
    DecoderLM model = Make(o);
    torch::NoGradGuard no_grad;
    const at::Tensor p = torch::randint(0, 1000, {batch, prompt});
    const at::Tensor cached = GenerateWithCache(model, p, 20);
    ASSERT_EQ(cached.sizes(), (std::vector<int64_t>{batch, 20}));
    EXPECT_TRUE(torch::equal(cached, GenerateByRecompute(model, p, 20)))
        << "tied " << head_tied << " batch " << batch << " prompt " << prompt;
  }
}

TEST_P(EveryDecoder, CacheHoldsKvHeadsAndIsWrittenInPlace) {
  const DecoderOptions o = Nano(family());
  DecoderLM model = Make(o);
  torch::NoGradGuard no_grad;
  KVCache cache = model->MakeCache(2, 20);
  ASSERT_EQ(cache.keys.size(), static_cast<size_t>(o.num_layers()));
  EXPECT_EQ(cache.keys[0].sizes(),
            (std::vector<int64_t>{2, o.num_kv_heads(), 20, o.head_dim()}));
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

TEST_P(EveryDecoder, ASlotStepOverMoreKeysGivesTheSlotStepsTokensAndCache) {
  // Graphed serving's step attends over a fixed number of keys (a bucket, or
  // the whole context) rather than one past the longest row's position:
  // the keys past each row's own are masked and weigh exactly 0.
  torch::manual_seed(5);
  DecoderLM model = Make(Nano(family()));
  model->eval();
  torch::NoGradGuard no_grad;
  constexpr int64_t kContext = 48;
  KVCache history = model->MakeCache(4, kContext);
  // What earlier sequences left in the cache: finite, read up to each row's
  // position, never beyond it.
  for (at::Tensor& t : history.tensors()) t.normal_();
  const auto copy = [](const KVCache& c) {
    KVCache out;
    for (const at::Tensor& t : c.keys) out.keys.push_back(t.clone());
    for (const at::Tensor& t : c.values) out.values.push_back(t.clone());
    return out;
  };
  for (const std::vector<int64_t>& positions :
       std::vector<std::vector<int64_t>>{{3}, {0, 17}, {40, 5, 22}, {9, 47, 1, 30}}) {
    const auto s = static_cast<int64_t>(positions.size());
    const at::Tensor tokens = torch::randint(0, Nano(family()).vocab_size(), {s, 1});
    KVCache eager = copy(history);
    const at::Tensor expected = model->forward_slots(tokens, positions, eager);
    const int64_t longest = *std::max_element(positions.begin(), positions.end()) + 1;
    for (const int64_t keys : {longest, int64_t{32}, kContext}) {
      if (keys < longest) continue;
      const std::string what = absl::StrCat(
          s, " slots at ", absl::StrJoin(positions, ","), " over ", keys, " keys");
      KVCache over = copy(history);
      const at::Tensor got = model->forward_slots_over(
          tokens, torch::tensor(positions, torch::kLong), keys, over);
      EXPECT_TRUE(torch::equal(got.argmax(-1), expected.argmax(-1))) << what;
      if (keys == longest) {
        EXPECT_TRUE(torch::equal(got, expected)) << what << ": forward_slots' own step";
      } else {
        EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-5)) << what;
      }
      // The first layer's keys and values exactly, the later ones' from
      // attention summed over more (zero-weighted) keys.
      for (size_t i = 0; i < eager.keys.size(); ++i) {
        for (const auto& [a, b] : {std::pair{over.keys[i], eager.keys[i]},
                                   std::pair{over.values[i], eager.values[i]}}) {
          if (keys == longest || i == 0) {
            EXPECT_TRUE(torch::equal(a, b)) << what << ", layer " << i;
          } else {
            EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5)) << what << ", layer " << i;
          }
        }
      }
    }
  }
  KVCache cache = copy(history);
  EXPECT_THROW(
      model->forward_slots_over(torch::zeros({1, 1}, torch::kLong),
                                torch::zeros({1}, torch::kLong), kContext + 1, cache),
      c10::Error);  // more keys than the cache holds
}

TEST_P(EveryDecoder, FusedAttentionEqualsTheExplicitComposition) {
  torch::manual_seed(2);
  DecoderOptions plain = Nano(family());
  plain.fused_attention(false);
  DecoderLM a = Make(Nano(family())), b = Make(plain);
  torch::NoGradGuard no_grad;
  for (auto& item : b->named_parameters()) {
    item.value().copy_(a->named_parameters()[item.key()]);
  }
  const at::Tensor tokens = torch::randint(0, 1000, {2, 32});
  EXPECT_TRUE(torch::allclose(a(tokens), b(tokens), 1e-4, 1e-5));
}

TEST_P(EveryDecoder, PackedCpuLinearsGiveTheSameTokens) {
  if (!CanPackLinear(c10::Device(c10::kCPU), c10::kFloat)) GTEST_SKIP() << "no oneDNN";
  torch::manual_seed(5);
  const DecoderOptions o = Nano(family());
  DecoderLM model = Make(o);
  torch::NoGradGuard no_grad;
  const at::Tensor p = torch::randint(0, 1000, {2, 16});
  const at::Tensor expected = GenerateByRecompute(model, p, 24);
  // Each block's projections (q, k, v, o or qkv, o) and MLP matrices, and
  // the head (a tied one packs a copy of the embedding).
  const int per_block = (o.fused_qkv() ? 2 : 4) + (o.mlp() == MlpKind::kSwiGLU ? 3 : 2);
  EXPECT_EQ(PackLinears(*model, c10::Device(c10::kCPU), c10::kFloat).value(),
            o.num_layers() * per_block + 1);
  EXPECT_TRUE(torch::equal(GenerateWithCache(model, p, 24), expected));
}

TEST_P(EveryDecoder, AnalyticCountsEqualTheProfilers) {
  DecoderOptions o = Nano(family());
  o.fused_attention(false);  // so attention runs as matmuls the profiler counts
  DecoderLM model = Make(o);
  for (const auto& [batch, seq] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {3, 40}}) {
    const at::Tensor tokens = torch::randint(0, 1000, {batch, seq});
    const double forward = ProfiledMatmulFlops([&] {
      torch::NoGradGuard no_grad;
      model(tokens);
    });
    EXPECT_NEAR(forward, DecoderForwardFlops(o, batch, seq), 0.01 * forward)
        << "batch " << batch << " seq " << seq;
  }
  const at::Tensor prompt = torch::randint(0, 1000, {2, 12});
  const double generate = ProfiledMatmulFlops([&] {
    torch::NoGradGuard no_grad;
    GenerateWithCache(model, prompt, 9);
  });
  EXPECT_NEAR(generate, DecoderGenerateFlops(o, 2, 12, 9), 0.01 * generate);
}

// Every phase builds, and each step computes what the phase is for: a
// forward's logits of the batch's shape; a training step that changes the
// weights; generation of the asked-for tokens.
TEST_P(EveryDecoder, EveryPhaseComputesWhatItIsFor) {
  const Family f = DecoderFamily(row());
  for (const char* phase : {kForward, kForwardBackward, kTrainStep}) {
    const BenchSpec s = SpecFor(f.name, "nano", phase, 2, 16);
    ASSERT_TRUE(f.plan(s).ok()) << phase;
    std::unique_ptr<Workload> w = f.build(s);
    w->Step();
    if (std::string(phase) == kForward) {
      const at::Tensor logits = w->Evaluate();
      EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 16, 1000}));
      EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
    }
    if (std::string(phase) == kTrainStep) {
      std::map<std::string, at::Tensor> before;
      for (const auto& [name, t] : w->Tensors()) before[name] = t.detach().clone();
      ASSERT_FALSE(before.empty());
      w->Step();
      int changed = 0;
      for (const auto& [name, t] : w->Tensors()) {
        if (absl::StartsWith(name, "param:") && !torch::equal(t, before.at(name)))
          ++changed;
      }
      EXPECT_GT(changed, 0) << "a train step changed no parameter";
    }
  }
  if (!row().generates) return;
  BenchSpec g = SpecFor(f.name, "nano", kGenerate, 2);
  g.prompt = 8;
  g.new_tokens = 6;
  const absl::StatusOr<Plan> plan = f.plan(g);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->tokens_per_step, 12);
  EXPECT_TRUE(plan->reports_weight_bandwidth);
  std::unique_ptr<Workload> w = f.build(g);
  w->Step();
  EXPECT_EQ(w->Evaluate().sizes(), (std::vector<int64_t>{2, 6}));
  std::map<std::string, double> c;
  for (const auto& [name, value] : w->Counters()) c[name] = value;
  EXPECT_GT(c["tg_tok/s"], 0);
}

// Causal attention is counted over every key (DecoderLayerFlops), and the
// fused kernel skips the masked half: wherever a step runs such a kernel
// over more than one query, its count is marked as beyond the arithmetic,
// so that it never raises a measured FLOP/s peak; a single query, or a
// prompt after cached positions (an explicit mask, every score computed),
// is exact.
TEST_P(EveryDecoder, ACountOverTheMaskedHalfIsMarkedWhereAFusedKernelSkipsIt) {
  const Family f = DecoderFamily(row());
  const auto beyond = [&](BenchSpec s) {
    return f.plan(s).value().count_beyond_arithmetic;
  };
  // Every nano row: 2 layers, 4 heads of 16 (64 query features); at batch
  // 2 and seq 16, QK^T and AV over the 120 scores above the diagonal.
  const double masked = 2 * 2 * 2 * 120 * 64 * 2.0;
  EXPECT_DOUBLE_EQ(DecoderMaskedFlops(Nano(family()), 2, 16), masked);
  for (const char* phase : {kForward, kForwardBackward, kTrainStep}) {
    const BenchSpec s = SpecFor(f.name, "nano", phase, 2, 16);
    // Its share of the count, which training's backward keeps.
    EXPECT_EQ(beyond(s),
              CausalCountReason(masked, DecoderForwardFlops(Nano(family()), 2, 16)))
        << phase;
    EXPECT_TRUE(absl::StartsWith(beyond(s), kCausalAttentionCount)) << phase;
    EXPECT_EQ(beyond(SpecFor(f.name, "nano", phase, 2, 1)), "") << phase;
  }
  EXPECT_EQ(CausalCountReason(1, 400),
            absl::StrCat(kCausalAttentionCount, " (0.25% of this count)"));
  if (!row().generates) return;
  BenchSpec g = SpecFor(f.name, "nano", kGenerate, 2);
  g.new_tokens = 6;
  g.prompt = 8;
  EXPECT_EQ(beyond(g), CausalCountReason(DecoderMaskedFlops(Nano(family()), 2, 8),
                                         f.plan(g)->flops_per_step));
  g.prompt = 1;
  EXPECT_EQ(beyond(g), "");
  g.prompt = 8;
  g.depth = 16;
  EXPECT_EQ(beyond(g), "");
}

// Building a Hugging Face row takes one 64-bit number from the default
// generator, the base of its chunks' seeds, and nothing else: the
// constructors draw no weight that InitLikeHuggingFace would overwrite, and
// what is drawn after the build (the inputs) starts where that number ends.
TEST_P(EveryDecoder, HuggingFaceRowsTakeOneNumberFromTheDefaultGenerator) {
  if (!row().names.hf_init) GTEST_SKIP() << family() << " draws LibTorch's way";
  const auto state = [] { return at::detail::getDefaultCPUGenerator().get_state(); };
  torch::manual_seed(11);
  at::empty({}, at::kLong).random_();
  const at::Tensor after_one = state();
  torch::manual_seed(11);
  Make(Nano(family()));
  EXPECT_TRUE(torch::equal(state(), after_one));
}

// Built for a checkpoint (draw false), a decoder takes nothing from the
// default generator, whichever way its row draws, and has the parameters,
// by name and shape, that the drawn one has for the checkpoint to fill.
TEST_P(EveryDecoder, BuiltForACheckpointItDrawsNothing) {
  const auto state = [] { return at::detail::getDefaultCPUGenerator().get_state(); };
  DecoderNames names = row().names;
  names.draw = false;
  torch::manual_seed(11);
  const at::Tensor seeded = state();
  DecoderLM undrawn(Nano(family()), names);
  EXPECT_TRUE(torch::equal(state(), seeded));
  std::vector<std::pair<std::string, std::vector<int64_t>>> want, got;
  for (const auto& p : Make(Nano(family()))->named_parameters()) {
    want.emplace_back(p.key(), p.value().sizes().vec());
  }
  for (const auto& p : undrawn->named_parameters()) {
    got.emplace_back(p.key(), p.value().sizes().vec());
  }
  EXPECT_EQ(got, want);
}

// Random weights as Hugging Face draws them: every matrix and embedding of
// standard deviation 0.02 (GPT-2's residual projections, c_proj,
// 0.02 / sqrt(2 layers)), biases zero, norms one. So the random model
// predicts about uniformly (a next-token loss of about ln V, as an untrained
// model's), not with the logits in the hundreds that LibTorch's N(0, 1)
// embedding, tied to the output layer, gave: their softmax holds denormal
// probabilities, which slowed train_step threefold as it ran.
TEST_P(EveryDecoder, RandomWeightsAreHuggingFacesAndPredictAboutUniformly) {
  if (!row().names.hf_init) GTEST_SKIP() << family() << " draws LibTorch's way";
  torch::manual_seed(0);
  const DecoderOptions o = Nano(family());
  DecoderLM model = Make(o);
  const auto& scaled = row().names.residual_scaled;
  ExpectHuggingFaceWeights(*model, [&](const std::string& name) {
    const bool residual = std::any_of(scaled.begin(), scaled.end(), [&](const auto& r) {
      return absl::EndsWith(name, r);
    });
    return residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(o.num_layers())) : 0.02;
  });
  const double loss =
      RandomTokensLoss([&](const at::Tensor& x) { return model(x); }, o.vocab_size());
  EXPECT_NEAR(loss, std::log(static_cast<double>(o.vocab_size())), 0.25);
}

// ------------------------------------------------------ what one row has

std::set<std::string> ParameterNames(const DecoderLM& model) {
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
  return names;
}

TEST(TransformerRow, ParameterNamesMatchTheReferenceModel) {
  const std::set<std::string> names =
      ParameterNames(MakeDecoder("Transformer", Nano("Transformer")));
  for (const char* name :
       {"token_embeddings.weight", "layers.0.ln1.weight", "layers.0.attn.q_proj.weight",
        "layers.0.attn.k_proj.weight", "layers.0.attn.v_proj.weight",
        "layers.0.attn.output_proj.weight", "layers.0.ln2.weight",
        "layers.1.ffn.w1.weight", "layers.1.ffn.w2.weight", "layers.1.ffn.w3.weight",
        "ln_final.weight", "lm_head.weight"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_EQ(names.size(), 2u * 9 + 3);  // no biases, no positional parameters
}

TEST(GPT2Row, ParameterNamesMatchTheReferenceAndTheHeadIsTied) {
  const std::set<std::string> names = ParameterNames(MakeDecoder("GPT2", Nano("GPT2")));
  for (const char* name :
       {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
        "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight",
        "h.1.ln_2.bias", "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.bias", "ln_f.weight",
        "ln_f.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_EQ(names.size(), 2u * 12 + 4);  // no separate LM head
}

TEST(LlamaRow, ParameterNamesAreHuggingFaces) {
  const std::set<std::string> tied = ParameterNames(MakeDecoder("Llama", Nano("Llama")));
  DecoderOptions o = Nano("Llama");
  o.tied(false);
  const std::set<std::string> untied = ParameterNames(MakeDecoder("Llama", o));
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
  for (const auto& b : MakeDecoder("Llama", Nano("Llama"))->named_buffers()) {
    buffers.push_back(b.key());
  }
  EXPECT_EQ(buffers, std::vector<std::string>{"model.rotary_emb.inv_freq"});
  EXPECT_EQ(untied.size(), tied.size() + 1);
  EXPECT_TRUE(untied.count("lm_head.weight"));
  // Grouped-query attention: k and v have kv heads (2 x 16), q has 4 x 16.
  DecoderLM model = MakeDecoder("Llama", Nano("Llama"));
  const DecoderAttentionImpl& attn = *model->block(0).attn;
  EXPECT_EQ(attn.q_proj->weight.sizes(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(attn.k_proj->weight.sizes(), (std::vector<int64_t>{32, 64}));
}

TEST(LlamaRow, SizesAreTheCardsShapes) {
  // Llama 3.2 1B and 3B tie the head, Llama 3.1 8B does not.
  const DecoderOptions b8 = DecoderSizeOptions("Llama", "8B").value();
  EXPECT_FALSE(b8.tied());
  EXPECT_EQ(b8.rope_factor(), 8.0);
  EXPECT_EQ(DecoderSizeOptions("Llama", "3B")->head_dim(), 128);
  EXPECT_EQ(DecoderSizeOptions("Llama", "1B")->num_kv_heads(), 8);
  EXPECT_EQ(FindDecoderRow("Mistral").status().message(),
            "'Mistral' is not a decoder family; valid: Transformer, GPT2, Llama");
}

// RopePairs: adjacent pairs of a head rotate by position x frequency.
TEST(RopePairs, RotatesAdjacentPairsByPositionTimesFrequency) {
  const int64_t hd = 8;
  DecoderOptions o(1000, 32, 64, 1, 4);
  o.max_positions(64);
  Rotary rope(o);
  const at::Tensor x = torch::randn({1, hd});
  const int64_t p = 37;
  const at::Tensor y =
      ApplyRotary(PositionKind::kRopePairs, x, rope(torch::tensor({p}), at::kFloat));
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double angle = p * std::pow(10000.0, -2.0 * i / hd);
    const double x0 = x[0][2 * i].item<double>(), x1 = x[0][2 * i + 1].item<double>();
    EXPECT_NEAR(y[0][2 * i].item<double>(), x0 * std::cos(angle) - x1 * std::sin(angle),
                1e-5);
    EXPECT_NEAR(y[0][2 * i + 1].item<double>(),
                x0 * std::sin(angle) + x1 * std::cos(angle), 1e-5);
  }
}

// Both kinds: a query-key score depends on the positions' difference only.
TEST(Rotary, ScoresDependOnlyOnRelativePosition) {
  for (const PositionKind kind : {PositionKind::kRopePairs, PositionKind::kRopeHalf}) {
    DecoderOptions o(1000, 64, 64, 1, 4);
    o.max_positions(512).positions(kind);
    Rotary rope(o);
    const at::Tensor q = torch::randn({1, 16}), k = torch::randn({1, 16});
    const auto at = [&](const at::Tensor& x, int64_t p) {
      return ApplyRotary(kind, x, rope(torch::tensor({p}), at::kFloat));
    };
    const auto score = [&](int64_t m, int64_t n) {
      return (at(q, m) * at(k, n)).sum().item<double>();
    };
    for (int64_t shift : {1, 7, 100, 400}) {
      EXPECT_NEAR(score(3, 9), score(3 + shift, 9 + shift), 1e-4) << shift;
      EXPECT_NEAR(score(20, 5), score(20 + shift, 5 + shift), 1e-4) << shift;
    }
    EXPECT_GT(std::abs(score(3, 9) - score(3, 10)), 1e-4);  // and on that difference
  }
}

TEST(RopeHalf, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  // 1B: head size 64, theta 500000, factor 32, original context 8192, low
  // factor 1 (wavelengths over 8192 divided), high factor 4 (under 2048 kept).
  const at::Tensor got =
      RopeInverseFrequencies(DecoderSizeOptions("Llama", "1B").value()).to(at::kDouble);
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

TEST(RopeHalf, RotatesTheTwoHalvesOfAHeadTogether) {
  const DecoderOptions o = Nano("Llama");
  Rotary rope(o);
  const at::Tensor inv = RopeInverseFrequencies(o);  // (8)
  EXPECT_TRUE(torch::equal(rope->inv_freq, inv));
  const at::Tensor x = torch::randn({1, 1, 1, 16});
  const at::Tensor y =
      ApplyRotary(PositionKind::kRopeHalf, x, rope(torch::tensor({5}), at::kFloat));
  for (int64_t i = 0; i < 8; ++i) {
    const double a = 5 * inv[i].item<double>();
    const double x1 = x[0][0][0][i].item<double>(), x2 = x[0][0][0][i + 8].item<double>();
    EXPECT_NEAR(y[0][0][0][i].item<double>(), x1 * std::cos(a) - x2 * std::sin(a), 1e-5);
    EXPECT_NEAR(y[0][0][0][i + 8].item<double>(), x2 * std::cos(a) + x1 * std::sin(a),
                1e-5);
  }
}

TEST(RopeHalf, FrequenciesStayFp32InABf16ModelSoLatePositionsKeepTheirAngles) {
  // A model cast to bf16 for inference keeps its inverse frequencies in
  // fp32 (rounded to bf16 they are off by up to 2^-9, which at position
  // 2047 turns the fastest pair by radians); cos and sin are then only
  // rounded to bf16 once, at the end.
  const DecoderOptions o = DecoderSizeOptions("Llama", "1B").value();
  Rotary rope(o);
  rope->to(at::kBFloat16);
  EXPECT_EQ(rope->inv_freq.scalar_type(), at::kFloat);
  rope->to(torch::kCPU, at::kHalf);
  EXPECT_EQ(rope->inv_freq.scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(rope->inv_freq, RopeInverseFrequencies(o)));
  // And inside a whole model cast as bench casts one for inference.
  DecoderLM model = MakeDecoder("Llama", Nano("Llama"));
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
      torch::outer(positions.to(at::kDouble), RopeInverseFrequencies(o).to(at::kDouble));
  // bf16 rounding of values in [-1, 1]: 2^-9 at most.
  EXPECT_LT((cos.to(at::kDouble) - angles.cos()).abs().max().item<double>(), 4e-3);
  EXPECT_LT((sin.to(at::kDouble) - angles.sin()).abs().max().item<double>(), 4e-3);
}

TEST(DecoderFlops, HandCounts) {
  // Transformer/nano, B = 1, T = 8: q,k,v,o 4*2*T*64*64; QK^T and AV
  // 2*2*T*T*64; FFN 3*2*T*64*256; the head 2*T*64*1000.
  const double t = 8;
  const double per_layer =
      4 * 2 * t * 64 * 64 + 2 * 2 * t * t * 64 + 3 * 2 * t * 64 * 256;
  EXPECT_DOUBLE_EQ(DecoderForwardFlops(Nano("Transformer"), 1, 8),
                   2 * per_layer + 2 * t * 64 * 1000);
  // GPT2/nano: per layer 24 B T d^2 + 4 B T^2 d; head 2 B T d V. B = 2, T = 5.
  const double b = 2, g = 5, d = 64, v = 1000;
  const double layer = 24 * b * g * d * d + 4 * b * g * g * d;
  EXPECT_DOUBLE_EQ(DecoderForwardFlops(Nano("GPT2"), 2, 5),
                   2 * layer + 2 * b * g * d * v);
  // Generation: prompt 5 with one head row, then 2 steps over 6 and 7 keys.
  const double gen = 2 * layer + 2 * (24 * b * d * d + 4 * b * 6 * d) +
                     2 * (24 * b * d * d + 4 * b * 7 * d) + 3 * 2 * b * d * v;
  EXPECT_DOUBLE_EQ(DecoderGenerateFlops(Nano("GPT2"), 2, 5, 3), gen);
}

TEST(DecoderFamily, PlansCountersAndMemoryPerPhase) {
  const Family f = TransformerFamily();
  BenchSpec s = SpecFor(f.name, "small", kForward, 4, 128);
  const Plan fwd = f.plan(s).value();
  EXPECT_EQ(fwd.params, 128'625'408);
  EXPECT_EQ(fwd.tokens_per_step, 512);
  EXPECT_EQ(fwd.memory.weights, 128'625'408 * 4);
  EXPECT_EQ(fwd.memory.gradients, 0);
  s = SpecFor(f.name, "small", kTrainStep, 4, 128);
  const Plan train = f.plan(s).value();
  EXPECT_DOUBLE_EQ(train.flops_per_step, 3 * fwd.flops_per_step);
  EXPECT_EQ(train.memory.gradients, 128'625'408 * 4);
  EXPECT_EQ(train.memory.optimizer, 2 * 128'625'408 * 4);
  s.phase = "generate";
  const auto bad = f.PlanFor(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "Transformer/small has no phase 'generate'; valid: forward, "
                "forward_backward, train_step, train_epoch"),
            std::string::npos);
}

TEST(DecoderFamily, AnEpochsDatasetInMemoryIsInTheEstimate) {
  // Its shards and their concatenation, int64 tokens of seq + 1 a sample,
  // while it is made: the run's memory on the CPU, the host's elsewhere.
  const Family f = TransformerFamily();
  const BenchSpec step = SpecFor(f.name, "nano", kTrainStep, 4, 64);
  BenchSpec epoch = SpecFor(f.name, "nano", kTrainEpoch, 4, 64);
  epoch.epochs.dataset_samples = 1000;
  const int64_t dataset = 2 * 1000 * 65 * 8;
  const Plan trained = f.plan(step).value();
  const Plan held = f.plan(epoch).value();
  EXPECT_EQ(held.memory.activations, trained.memory.activations + dataset);
  EXPECT_EQ(held.memory.host_build, trained.memory.host_build);
  // From disk: a few prefetched batches, nothing held.
  epoch.epochs.data = "disk";
  EXPECT_EQ(f.plan(epoch).value().memory.activations, trained.memory.activations);
  epoch.epochs.data = "memory";
  epoch.device = c10::Device(c10::kCUDA, 0);
  const Plan on_gpu = f.plan(epoch).value();
  EXPECT_EQ(on_gpu.memory.host_build, on_gpu.params * 4 + dataset);
}

BenchSpec GPT2Generate(int64_t prompt, int64_t new_tokens) {
  BenchSpec s = SpecFor("GPT2", "nano", kGenerate, 2);
  s.prompt = prompt;
  s.new_tokens = new_tokens;
  return s;
}

TEST(DecoderFamily, RejectsMorePositionsThanTheModelHas) {
  const Family f = GPT2Family();
  EXPECT_TRUE(f.plan(GPT2Generate(924, 100)).ok());
  const auto bad = f.plan(GPT2Generate(1000, 100));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("1100 positions, but GPT2 has 1024"),
            std::string::npos)
      << bad.status().message();
  const auto seq = f.plan(SpecFor("GPT2", "nano", kForward, 1, 1025));
  ASSERT_FALSE(seq.ok());
  EXPECT_EQ(seq.status().message(), "seq 1025 exceeds GPT2's 1024 positions");
  // The Transformer's tables are computed for the benchmark's seq.
  EXPECT_TRUE(
      TransformerFamily().plan(SpecFor("Transformer", "nano", kForward, 1, 1025)).ok());
}

TEST(DecoderFamily, GenerationCountersAddUpToTheStepTime) {
  const Family f = GPT2Family();
  std::unique_ptr<Workload> w = f.build(GPT2Generate(32, 40));
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
  // The prefill and decode intervals lie inside the steps the clock above
  // timed, and cover all but the host's few lines between them: bounds a
  // loaded machine cannot break (a pause between two intervals would have
  // to last as long as the steps' work to break the lower one).
  const double timed_ms = c["ttft_ms"] + 39 * c["tpot_ms"];
  EXPECT_LE(timed_ms, step_ms * 1.001);
  EXPECT_GE(timed_ms, 0.5 * step_ms);
  EXPECT_NEAR(c["tg_tok/s"], 2 * 39 / (39 * c["tpot_ms"] / 1e3), 1e-6 * c["tg_tok/s"]);
  EXPECT_NEAR(c["pp_tok/s"], 2 * 32 / (c["ttft_ms"] / 1e3), 1e-6 * c["pp_tok/s"]);
}

// The plan says what a step reads of the weights, and the built workload
// writes what it reads into the result (weight_bytes): the plan's bytes in
// the run's dtype, the quantised ones under --quant. Its rooflines and mbu
// are read from there.
TEST(DecoderFamily, ResultsCarryTheWeightBytesAStepReads) {
  const Family f = LlamaFamily();
  const auto counter = [&](const BenchSpec& s) {
    std::unique_ptr<Workload> w = f.build(s);
    w->Step();
    for (const auto& [name, value] : w->Counters()) {
      if (name == "weight_bytes") return value;
    }
    return -1.0;
  };
  BenchSpec s = SpecFor("Llama", "nano", kForward, 1, 8);
  const Plan plan = f.plan(s).value();
  // Tied: every weight once, the embedding as the head.
  EXPECT_EQ(plan.weight_bytes, 187'200.0 * 4);
  EXPECT_EQ(counter(s), plan.weight_bytes);
  EXPECT_TRUE(plan.mfu_left_out.empty());
  s.quant = Quant{QuantKind::kInt8, 0};
  const double int8 = counter(s);
  // A byte a quantised weight and a scale a row; the norms stay fp32.
  EXPECT_GT(int8, plan.weight_bytes / 4);
  EXPECT_LT(int8, plan.weight_bytes / 3);
  s.phase = kGenerate;
  s.prompt = 4;
  s.new_tokens = 2;
  EXPECT_EQ(counter(s), int8);
  s.quant = Quant{QuantKind::kInt8Dyn, 0};
  EXPECT_NE(f.plan(s)->mfu_left_out.find("FBGEMM's dynamic int8"), std::string::npos);
  // Training reads fp32 master weights: no inference bytes planned.
  EXPECT_EQ(f.plan(SpecFor("Llama", "nano", kTrainStep, 1, 8))->weight_bytes, 0);
}

// With --weights the benchmark's model is built undrawn: its inputs are the
// first numbers drawn after the seed, and the host holds the weights in the
// dtype they load in, never fp32 first (the guard's host_build); without,
// the plan leaves host_build to the runner's fp32 build.
TEST(DecoderFamily, ACheckpointsModelIsBuiltWithoutDrawingOrAnFp32Copy) {
  const Family f = LlamaFamily();
  BenchSpec s = SpecFor("Llama", "nano", kForward, 2, 8);
  s.weights = std::string(LTB_SOURCE_DIR) + "/test/models/fixtures/llama-nano";
  torch::manual_seed(5);
  const at::Tensor inputs = f.build(s)->BatchInputs();
  torch::manual_seed(5);
  const at::Tensor first = torch::randint(0, 1000, {2, 9}, torch::kLong).narrow(1, 0, 8);
  EXPECT_TRUE(torch::equal(inputs, first));
  s.dtype = c10::kBFloat16;
  EXPECT_EQ(f.plan(s)->memory.host_build, 187'200 * 2);
  s.weights.clear();
  EXPECT_EQ(f.plan(s)->memory.host_build, 0);
  s.size = "8B";
  s.weights = "8B.safetensors";  // planned before the file is opened
  EXPECT_EQ(f.plan(s)->memory.host_build, int64_t{8'030'261'248} * 2);
}

TEST(DecoderFamily, Training8BInFp32NeedsFarMoreThanAWorkstation) {
  // The memory guard refuses what does not fit: 8B's fp32 weights,
  // gradients and AdamW's two moments alone are 16 bytes a parameter.
  const BenchSpec s = SpecFor("Llama", "8B", kTrainStep, 1, 2048);
  const absl::StatusOr<Plan> plan = LlamaFamily().plan(s);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->memory.weights + plan->memory.gradients + plan->memory.optimizer,
            16 * int64_t{8'030'261'248});
  EXPECT_GT(plan->memory.Total(), int64_t{24} << 30);
}

}  // namespace
}  // namespace ltb

namespace ltb {
namespace {

TEST(DecoderFamily, TrainStepCountsAdamWsTemporaries) {
  // Stepped parameter by parameter on the CPU, AdamW holds two tensors the
  // size of GPT2/small's embedding (50257 x 768) beside its weights,
  // gradients and moments, after the backward has freed the activations.
  const Family f = GPT2Family();
  BenchSpec s = SpecFor(f.name, "small", kTrainStep, 1, 64);
  const MemoryEstimate cpu = f.plan(s).value().memory;
  EXPECT_GE(cpu.activations, 2 * int64_t{50257} * 768 * 4);
  EXPECT_EQ(cpu.weights + cpu.gradients + cpu.optimizer, 16 * int64_t{124'439'808});
  // Foreach kernels (CUDA) make every parameter's denominator at once.
  s.device = c10::Device(c10::kCUDA, 0);
  EXPECT_GE(f.plan(s).value().memory.activations, int64_t{124'439'808} * 4);
  // forward_backward has no optimizer step.
  s = SpecFor(f.name, "small", kForwardBackward, 1, 64);
  EXPECT_LT(f.plan(s).value().memory.activations, 2 * int64_t{50257} * 768 * 4);
}

TEST(DecoderFamily, TrainStepsTensorPeakIsWithinItsEstimate) {
  // A short sequence: the optimizer step, not the activations, sets the peak
  // (GPT2/nano's largest parameter is its positions' table, 1024 x 64).
  for (const Family& f : {GPT2Family(), LlamaFamily()}) {
    const BenchSpec s = SpecFor(f.name, "nano", kTrainStep, 1, 2);
    const int64_t estimate = f.plan(s).value().memory.Total();
    const int64_t before = CpuAllocatedBytes();
    int64_t peak = 0;
    {
      std::unique_ptr<Workload> w = f.build(s);
      w->Step();  // AdamW's moments are made on the first step
      ResetCpuPeak();
      w->Step();
      peak = CpuPeakBytes() - before;
    }
    // Beyond the estimate: the step's few ids, its loss and such scalars.
    EXPECT_LE(peak, estimate + 4096) << f.name;
    EXPECT_GT(peak, estimate / 2) << f.name;
  }
}

}  // namespace
}  // namespace ltb
