#include "models/whisper.h"

#include <gtest/gtest.h>

#include <set>

#include "profiled_flops.h"
#include "spec_for.h"
#include "workloads/generation.h"

namespace ltb {
namespace {

WhisperOptions WhisperNano() { return WhisperSizeOptions("nano").value(); }

TEST(WhisperSizes, CountsEqualTheCard) {
  const std::map<std::string, int64_t> card = {
      {"nano", 353'792}, {"tiny", 37'184'640}, {"base", 71'825'920}};
  for (const WhisperSize& s : WhisperSizes()) {
    EXPECT_EQ(WhisperParamCount(s.options), card.at(s.name)) << s.name;
    if (s.name == "base") continue;  // built below only what the card asks
    Whisper model(s.options);
    EXPECT_EQ(CountParameters(*model), card.at(s.name)) << s.name;
  }
}

TEST(Whisper, NamesMatchTheReferenceAndPositionsAreABuffer) {
  Whisper model(WhisperNano());
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
  for (const char* name :
       {"encoder.conv1.weight", "encoder.conv2.bias",
        "encoder.blocks.0.attn.query.weight", "encoder.blocks.0.attn.key.weight",
        "encoder.blocks.1.mlp.0.weight", "encoder.blocks.1.mlp.2.bias",
        "encoder.ln_post.weight", "decoder.token_embedding.weight",
        "decoder.positional_embedding", "decoder.blocks.0.cross_attn.value.bias",
        "decoder.blocks.1.cross_attn_ln.weight", "decoder.ln.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_FALSE(names.count("encoder.blocks.0.attn.key.bias"));  // key has no bias
  EXPECT_FALSE(names.count("encoder.positional_embedding"));
  bool buffer = false;
  for (const auto& item : model->named_buffers()) {
    buffer |= item.key() == "encoder.positional_embedding";
  }
  EXPECT_TRUE(buffer);
}

TEST(Whisper, EncodesThirtySecondsInto1500Positions) {
  Whisper model(WhisperNano());
  torch::NoGradGuard no_grad;
  const at::Tensor xa = model->Encode(torch::randn({2, 80, 3000}));
  EXPECT_EQ(xa.sizes(), (std::vector<int64_t>{2, 1500, 64}));
}

TEST(WhisperGenerate, CachesGiveExactlyTheTokensOfRecomputation) {
  torch::manual_seed(8);
  Whisper model(WhisperNano());
  torch::NoGradGuard no_grad;
  const at::Tensor xa = model->Encode(torch::randn({3, 80, 3000}));
  for (int64_t batch : {1, 3}) {
    const at::Tensor a = xa.narrow(0, 0, batch);
    const at::Tensor prompt = torch::randint(0, 1000, {batch, 4});
    const at::Tensor cached = WhisperGenerateWithCache(model, a, prompt, 20);
    EXPECT_TRUE(torch::equal(cached, WhisperGenerateByRecompute(model, a, prompt, 20)))
        << "batch " << batch;
  }
}

TEST(WhisperGenerate, ANewWindowsCrossKeysAndValuesGoIntoTheSameTensors) {
  // A decode step captured as a CUDA graph reads the tensors it was
  // captured with: each window's cross-attention keys and values must land
  // in them, not in new ones.
  torch::manual_seed(9);
  Whisper model(WhisperNano());
  torch::NoGradGuard no_grad;
  const at::Tensor first = model->Encode(torch::randn({2, 80, 3000}));
  const at::Tensor second = model->Encode(torch::randn({2, 80, 3000}));
  KVCache state = model->Start(first, 8);
  std::vector<const void*> where;
  for (const at::Tensor& k : state.cross_keys) where.push_back(k.data_ptr());
  model->ComputeCross(second, state);
  KVCache fresh = model->Start(second, 8);
  ASSERT_EQ(state.cross_keys.size(), where.size());
  for (size_t i = 0; i < where.size(); ++i) {
    EXPECT_EQ(state.cross_keys[i].data_ptr(), where[i]) << i;
    EXPECT_TRUE(at::equal(state.cross_keys[i], fresh.cross_keys[i])) << i;
    EXPECT_TRUE(at::equal(state.cross_values[i], fresh.cross_values[i])) << i;
  }
}

TEST(WhisperFlops, GenerationCountEqualsTheProfilers) {
  WhisperOptions o = WhisperNano();
  o.fused_attention(false);  // attention as matmuls the profiler counts
  Whisper model(o);
  torch::NoGradGuard no_grad;
  const at::Tensor xa = model->Encode(torch::randn({2, 80, 3000}));
  const at::Tensor prompt = torch::randint(0, 1000, {2, 4});
  const double profiled =
      ProfiledMatmulFlops([&] { WhisperGenerateWithCache(model, xa, prompt, 6); });
  EXPECT_NEAR(profiled, WhisperGenerateFlops(o, 2, 4, 6), 0.01 * profiled);
}

TEST(WhisperFlops, EncodeHandCount) {
  // Per window: conv1 2*80*64*3*3000, conv2 2*64*64*3*1500, then 2 layers
  // of 24*1500*64^2 + 4*1500^2*64.
  const double convs = 2.0 * 80 * 64 * 3 * 3000 + 2.0 * 64 * 64 * 3 * 1500;
  const double layer = 24.0 * 1500 * 64 * 64 + 4.0 * 1500 * 1500 * 64;
  EXPECT_DOUBLE_EQ(WhisperEncodeFlops(WhisperNano(), 1), convs + 2 * layer);
}

TEST(WhisperFamily, RatesCountEveryWindowAndTokenOfTheBatch) {
  // tiny (w 384, 4 + 4 layers, vocab 51865, 448 text positions) at batch 3,
  // a 4-token prompt and 5 new tokens, counted by hand.
  const Family f = WhisperFamily();
  const double w = 384, b = 3, windows = 1500, vocab = 51865;
  const double convs = 2 * 80 * w * 3 * 3000 + 2 * w * w * 3 * windows;
  const double encode =
      b * (convs + 4 * (24 * windows * w * w + 4 * windows * windows * w));
  // Cross keys and values once; every decoder token 28 w^2 of projections,
  // self-attention over the positions so far (the prompt's full square) and
  // cross-attention over 1500; the logits of the last position only.
  double generate = 4 * 4 * b * windows * w * w;
  generate +=
      4 * b * (28 * 4 * w * w + 4 * 4 * 4 * w + 4 * 4 * windows * w) + 2 * b * w * vocab;
  for (int i = 1; i < 5; ++i) {
    generate +=
        4 * b * (28 * w * w + 4 * (4 + i) * w + 4 * windows * w) + 2 * b * w * vocab;
  }
  for (const char* phase : {"encode", kGenerate, "transcribe"}) {
    BenchSpec s = SpecFor(f.name, "tiny", phase, 3);
    s.prompt = 4;
    s.new_tokens = 5;
    const Plan plan = f.plan(s).value();
    const std::string p = phase;
    // A 30 s window per sequence: 90 s and 3 samples a step; generation
    // starts from an encoded window and processes no audio.
    EXPECT_DOUBLE_EQ(plan.audio_seconds_per_step, p == kGenerate ? 0 : 90) << p;
    EXPECT_EQ(plan.samples_per_step, p == kGenerate ? 0 : 3) << p;
    EXPECT_EQ(plan.tokens_per_step, p == "encode" ? 0 : 15) << p;
    EXPECT_EQ(plan.reports_weight_bandwidth, p == kGenerate) << p;
    const double flops = p == "encode"    ? encode
                         : p == kGenerate ? generate
                                          : encode + generate;
    EXPECT_NEAR(plan.flops_per_step, flops, 1e-12 * flops) << p;
    // The prompt's full square counts the masked scores the fused causal
    // kernel skips: never a count to raise a measured peak with.
    // 4 layers of QK^T and AV over the 6 scores above the diagonal.
    EXPECT_EQ(plan.count_beyond_arithmetic,
              p == "encode"
                  ? ""
                  : CausalCountReason(4 * 2 * b * 6 * w * 2, plan.flops_per_step))
        << p;
  }
  // A decode step reads the decoder's weights but its position table and
  // the cross-attention's key and value projections (applied once, in the
  // prefill): embedding 51865 w, 4 layers of three layer norms, two
  // attentions (4 w^2 + 3 w: no key bias) and the MLP (8 w^2 + 5 w), the
  // final norm; less 4 (2 w^2 + w).
  const int64_t wi = 384;
  const int64_t layer = 3 * 2 * wi + 2 * (4 * wi * wi + 3 * wi) + 8 * wi * wi + 5 * wi;
  EXPECT_EQ(WhisperDecodeWeightCount(WhisperSizeOptions("tiny").value()),
            51865 * wi + 4 * layer + 2 * wi - 4 * (2 * wi * wi + wi));
}

TEST(WhisperFamily, RejectsMoreTokensThanTheDecoderHas) {
  const Family f = WhisperFamily();
  BenchSpec s = SpecFor(f.name, "nano", kGenerate, 1);
  s.prompt = 4;
  s.new_tokens = 445;
  const auto bad = f.plan(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--new_tokens must be 1 to 444"),
            std::string::npos);
}

TEST(WhisperFamily, EveryPhaseRunsWithItsCounters) {
  const Family f = WhisperFamily();
  for (const Case& c : f.Cases()) {
    if (c.size != "nano") continue;
    BenchSpec s = SpecFor(f.name, c.size, c.phase.name, 1);
    s.prompt = c.fixed_prompt;
    s.new_tokens = 5;
    const Plan plan = f.plan(s).value();
    if (c.phase.name != kGenerate) EXPECT_DOUBLE_EQ(plan.audio_seconds_per_step, 30);
    std::unique_ptr<Workload> w = f.build(s);
    w->Step();
    if (c.phase.name == kGenerate) {
      w->ResetStats();
      w->Step();
      EXPECT_FALSE(w->Counters().empty());
    }
  }
}

}  // namespace
}  // namespace ltb
