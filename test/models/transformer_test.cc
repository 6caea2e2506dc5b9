#include "models/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "profiled_flops.h"
#include "spec_for.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

TransformerOptions TransformerNano() { return TransformerSizeOptions("nano").value(); }

TEST(TransformerSizes, AnalyticCountEqualsTheCardForEverySize) {
  const std::map<std::string, int64_t> card = {
      {"nano", 259'392},      {"small", 128'625'408}, {"medium", 423'183'360},
      {"large", 969'411'840}, {"xl", 1'998'235'200},  {"2.7B", 3'406'809'600}};
  ASSERT_EQ(TransformerSizes().size(), card.size());
  for (const TransformerSize& s : TransformerSizes()) {
    EXPECT_EQ(TransformerParamCount(s.options), card.at(s.name)) << s.name;
    EXPECT_EQ(s.card_params, card.at(s.name)) << s.name;
  }
}

TEST(TransformerSizes, BuiltModelsHaveTheCardsParameterCount) {
  for (const char* size : {"nano", "small", "medium"}) {
    TransformerLM model(TransformerSizeOptions(size).value());
    const auto& sizes = TransformerSizes();
    const auto it =
        std::find_if(sizes.begin(), sizes.end(),
                     [&](const TransformerSize& s) { return s.name == size; });
    EXPECT_EQ(CountParameters(*model), it->card_params) << size;
  }
}

TEST(TransformerSizes, UnknownSizeNamesTheValidOnes) {
  const auto o = TransformerSizeOptions("huge");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("nano, small, medium, large, xl, 2.7B"),
            std::string::npos);
}

TEST(TransformerLM, ParameterNamesMatchTheReferenceModel) {
  TransformerLM model(TransformerNano());
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
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

TEST(TransformerLM, OutputShapeIsBatchBySeqByVocab) {
  TransformerLM model(TransformerNano());
  const at::Tensor logits = model(torch::randint(0, 1000, {3, 17}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 17, 1000}));
}

TEST(TransformerLM, IsCausal) {
  torch::manual_seed(1);
  TransformerLM model(TransformerNano());
  model->eval();
  torch::NoGradGuard no_grad;
  const int64_t t = 10;
  const at::Tensor a = torch::randint(0, 1000, {2, 16});
  at::Tensor b = a.clone();
  b.select(1, t).fill_((a[0][t].item<int64_t>() + 1) % 1000);
  const at::Tensor la = model(a), lb = model(b);
  EXPECT_TRUE(torch::allclose(la.narrow(1, 0, t), lb.narrow(1, 0, t), 1e-5, 1e-6))
      << "a logit before position t changed when token t changed";
  EXPECT_FALSE(torch::allclose(la.select(1, t), lb.select(1, t)))
      << "token t had no effect on its own position";
}

TEST(RotaryEmbedding, RotatesAdjacentPairsByPositionTimesFrequency) {
  const int64_t hd = 8;
  const double theta = 10000.0;
  RotaryEmbedding rope(hd, 64, theta);
  const at::Tensor x = torch::randn({1, hd});
  const int64_t p = 37;
  const at::Tensor y = rope(x, torch::tensor({p}));
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double angle = p * std::pow(theta, -2.0 * i / hd);
    const double x0 = x[0][2 * i].item<double>(), x1 = x[0][2 * i + 1].item<double>();
    EXPECT_NEAR(y[0][2 * i].item<double>(), x0 * std::cos(angle) - x1 * std::sin(angle),
                1e-5);
    EXPECT_NEAR(y[0][2 * i + 1].item<double>(),
                x0 * std::sin(angle) + x1 * std::cos(angle), 1e-5);
  }
}

TEST(RotaryEmbedding, ScoresDependOnlyOnRelativePosition) {
  const int64_t hd = 16;
  RotaryEmbedding rope(hd, 512, 10000.0);
  const at::Tensor q = torch::randn({1, hd}), k = torch::randn({1, hd});
  const auto score = [&](int64_t m, int64_t n) {
    return (rope(q, torch::tensor({m})) * rope(k, torch::tensor({n})))
        .sum()
        .item<double>();
  };
  for (int64_t shift : {1, 7, 100, 400}) {
    EXPECT_NEAR(score(3, 9), score(3 + shift, 9 + shift), 1e-4) << shift;
    EXPECT_NEAR(score(20, 5), score(20 + shift, 5 + shift), 1e-4) << shift;
  }
  // ... and does depend on the relative position.
  EXPECT_GT(std::abs(score(3, 9) - score(3, 10)), 1e-4);
}

TEST(RotaryEmbedding, AShiftedSequenceGivesTheSameAttentionScores) {
  torch::manual_seed(6);
  TransformerOptions o = TransformerNano();
  o.context_length(128);
  CausalSelfAttention attn(o);
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({1, 12, 64});
  // The scores q k^T of every head, with the sequence at positions p0 + [0, 12).
  const auto scores = [&](int64_t p0) {
    const at::Tensor positions = torch::arange(p0, p0 + 12);
    const auto heads = [](const at::Tensor& y) {
      return y.view({1, 12, 4, 16}).transpose(1, 2);  // (B, nh, T, hs)
    };
    const at::Tensor q = attn->rope(heads(attn->q_proj(x)), positions);
    const at::Tensor k = attn->rope(heads(attn->k_proj(x)), positions);
    return torch::matmul(q, k.transpose(-2, -1));  // (B, nh, T, T)
  };
  const at::Tensor base = scores(0);
  for (int64_t shift : {1, 5, 50, 116}) {
    EXPECT_TRUE(torch::allclose(scores(shift), base, 1e-4, 1e-4)) << shift;
  }
}

TEST(CausalSelfAttention, FusedEqualsExplicitComposition) {
  torch::manual_seed(2);
  TransformerOptions fused = TransformerNano(), plain = TransformerNano();
  fused.context_length(32);
  plain.context_length(32).fused_attention(false);
  CausalSelfAttention a(fused), b(plain);
  torch::NoGradGuard no_grad;
  for (auto& item : b->named_parameters()) {
    item.value().copy_(a->named_parameters()[item.key()]);
  }
  const at::Tensor x = torch::randn({2, 32, 64});
  const at::Tensor positions = torch::arange(32);
  EXPECT_TRUE(torch::allclose(a(x, positions), b(x, positions), 1e-4, 1e-5));
}

TEST(TransformerFlops, AnalyticForwardCountEqualsTheProfilers) {
  for (const auto& [batch, seq] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {2, 64}, {3, 100}}) {
    TransformerOptions o = TransformerNano();
    o.context_length(seq).fused_attention(false);  // so attention runs as bmm
    TransformerLM model(o);
    model->eval();
    const at::Tensor tokens = torch::randint(0, 1000, {batch, seq});
    const double profiled = ProfiledMatmulFlops([&] {
      torch::NoGradGuard no_grad;
      model(tokens);
    });
    EXPECT_NEAR(profiled, TransformerForwardFlops(o, batch, seq), 1e-9 * profiled)
        << "batch " << batch << " seq " << seq;
  }
}

TEST(TransformerFlops, HandCountForNano) {
  // 2 layers of: q,k,v,o 4*2*T*64*64; QK^T and AV 2*2*T*T*64; FFN 3*2*T*64*256;
  // then the head 2*T*64*1000; T = 8, B = 1.
  const double t = 8;
  const double per_layer =
      4 * 2 * t * 64 * 64 + 2 * 2 * t * t * 64 + 3 * 2 * t * 64 * 256;
  EXPECT_DOUBLE_EQ(TransformerForwardFlops(TransformerNano(), 1, 8),
                   2 * per_layer + 2 * t * 64 * 1000);
}

TEST(TransformerFamily, PlansCountersAndMemoryPerPhase) {
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
  s.size = "huge";
  EXPECT_NE(f.PlanFor(s).status().message().find(
                "unknown Transformer size 'huge'; valid: nano, small, medium"),
            std::string::npos);
}

TEST(TransformerFamily, EveryPhaseBuildsAndSteps) {
  const Family f = TransformerFamily();
  for (const char* phase : {kForward, kForwardBackward, kTrainStep}) {
    const BenchSpec s = SpecFor(f.name, "nano", phase, 2, 16);
    std::unique_ptr<Workload> w = f.build(s);
    w->Step();
    w->Step();
  }
}

}  // namespace
}  // namespace ltb
