#include "models/encoder.h"

#include <gtest/gtest.h>

#include "harness/phases.h"
#include "profiled_flops.h"
#include "spec_for.h"

namespace ltb {
namespace {

TEST(EncoderSizes, CountsEqualTheCard) {
  for (const EncoderSize& s : EncoderSizes()) {
    EXPECT_EQ(EncoderParamCount(s.config), s.card_params) << s.name;
    auto model = MakeEncoder(s.config);
    EXPECT_EQ(CountParameters(*model), s.card_params) << s.name;
  }
  EXPECT_EQ(EncoderParamCount(EncoderSizeConfig("default").value()), 18'914'304);
  EXPECT_EQ(EncoderParamCount(EncoderSizeConfig("nano").value()), 99'968);
}

TEST(EncoderFlops, AnalyticCountEqualsTheProfilers) {
  const EncoderConfig c = EncoderSizeConfig("nano").value();
  auto model = MakeEncoder(c);
  model->eval();
  const double profiled = ProfiledMatmulFlops([&] {
    torch::NoGradGuard no_grad;
    model(torch::randn({40, 3, c.d_model}));  // (T, B, d)
  });
  EXPECT_NEAR(profiled, EncoderForwardFlops(c, 3, 40), 0.01 * profiled);
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
