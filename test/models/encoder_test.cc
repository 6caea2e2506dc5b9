#include "models/encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "device/cpu_memory.h"
#include "profiled_flops.h"
#include "spec_for.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

TEST(EncoderSizes, CountsEqualTheCard) {
  for (const EncoderSize& s : EncoderSizes()) {
    EXPECT_EQ(EncoderParamCount(s.options), s.card_params) << s.name;
    Encoder model(s.options);
    EXPECT_EQ(CountParameters(*model), s.card_params) << s.name;
  }
  EXPECT_EQ(EncoderParamCount(EncoderSizeOptions("default").value()), 18'914'304);
  EXPECT_EQ(EncoderParamCount(EncoderSizeOptions("nano").value()), 99'968);
}

// LibTorch's encoder as the model used to be, with no wrapper around it.
torch::nn::TransformerEncoder BareEncoder(const EncoderOptions& o) {
  return torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
      torch::nn::TransformerEncoderLayerOptions(o.d_model(), o.heads())
          .dim_feedforward(o.d_ff()),
      o.layers()));
}

std::vector<std::string> Names(const torch::nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& item : m.named_parameters()) names.push_back(item.key());
  return names;
}

TEST(Encoder, ParameterNamesAreThoseOfPythonsTransformerEncoder) {
  const EncoderOptions o = EncoderSizeOptions("nano").value();
  Encoder model(o);
  const std::vector<std::string> names = Names(*model);
  EXPECT_EQ(names, Names(*BareEncoder(o)));  // in the same order
  for (const char* name :
       {"layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
        "layers.0.self_attn.out_proj.weight", "layers.0.linear1.weight",
        "layers.0.linear2.bias", "layers.0.norm1.weight", "layers.1.norm2.bias"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_EQ(names.size(), size_t{2 * 12});  // no final norm
}

TEST(Encoder, ComputesWhatLibTorchsEncoderDoes) {
  const EncoderOptions o = EncoderSizeOptions("nano").value();
  torch::manual_seed(3);
  Encoder model(o);
  torch::manual_seed(3);
  torch::nn::TransformerEncoder bare = BareEncoder(o);
  model->eval();
  bare->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({10, 2, o.d_model()});  // (T, B, d)
  EXPECT_TRUE(torch::equal(model(x), bare(x)));
  // Converting the module converts the layers its forward runs.
  model->to(torch::kDouble);
  EXPECT_EQ(model(x.to(torch::kDouble)).scalar_type(), torch::kDouble);
}

TEST(EncoderFlops, AnalyticCountEqualsTheProfilers) {
  const EncoderOptions o = EncoderSizeOptions("nano").value();
  Encoder model(o);
  model->eval();
  const double profiled = ProfiledMatmulFlops([&] {
    torch::NoGradGuard no_grad;
    model(torch::randn({40, 3, o.d_model()}));  // (T, B, d)
  });
  EXPECT_NEAR(profiled, EncoderForwardFlops(o, 3, 40), 0.01 * profiled);
}

TEST(EncoderFamily, RegistersEveryLengthByDefault) {
  const Family f = EncoderFamily();
  EXPECT_EQ(f.default_seqs, (std::vector<int64_t>{128, 256, 512, 1024, 2048, 4096}));
}

TEST(EncoderFamily, GuardRefusesTheLongestTrainingLengthHere) {
  const Family f = EncoderFamily();
  BenchSpec s = SpecFor(f.name, "default", kForwardBackward, 8, 4096);
  const Plan plan = f.plan(s).value();
  // Eight heads of 4096 x 4096 scores per layer, kept for backward.
  EXPECT_GT(plan.memory.activations, int64_t{6} * 3 * 8 * 8 * 4096 * 4096 * 4 - 1);
  s.seq = 128;
  EXPECT_LT(f.plan(s).value().memory.Total(), int64_t{1} << 30);
}

// The seq-2048 benchmark at the default batch of 8 needs about 32 GB of
// resident memory, which a machine of 24 GiB does not have.
TEST(EncoderFamily, GuardRefusesLength2048On24GiB) {
  const Family f = EncoderFamily();
  const Plan plan = f.plan(SpecFor(f.name, "default", kForwardBackward, 8, 2048)).value();
  EXPECT_GT(plan.memory.Total(), int64_t{24} << 30);
}

// The tensors counted for training (all but the overhead) bound what a step
// holds at its peak, as the CPU allocator counts it, within a quarter. fp32:
// the kernels of lower precisions differ by CPU in what they allocate.
TEST(EncoderFamily, TrainingCountBoundsTheTensorsAStepHolds) {
  const Family f = EncoderFamily();
  // Tokens weigh most at 32, the scores at 512.
  for (const int64_t seq : {32, 512}) {
    const BenchSpec s = SpecFor(f.name, "nano", kForwardBackward, 2, seq);
    const MemoryEstimate m = f.plan(s).value().memory;
    const int64_t counted = m.Total() - m.overhead;
    const int64_t before = CpuAllocatedBytes();
    int64_t peak = 0;
    {
      std::unique_ptr<Workload> w = f.build(s);
      w->Step();  // makes the gradients, which the next step frees first
      ResetCpuPeak();
      w->Step();
      peak = CpuPeakBytes() - before;
    }
    EXPECT_GE(counted, peak) << s.Name();
    EXPECT_LE(counted, peak + peak / 4) << s.Name();
    EXPECT_EQ(m.overhead, counted / 2) << s.Name();
  }
}

TEST(EncoderFamily, EveryPhaseRuns) {
  const Family f = EncoderFamily();
  for (const char* phase : {kForward, kForwardBackward}) {
    const BenchSpec s = SpecFor(f.name, "nano", phase, 2, 16);
    ASSERT_TRUE(f.plan(s).ok());
    f.build(s)->Step();
  }
}

}  // namespace
}  // namespace ltb
