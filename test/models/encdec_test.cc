#include "models/encdec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <set>

#include "device/cpu_memory.h"
#include "profiled_flops.h"
#include "spec_for.h"
#include "workloads/epoch.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

TEST(EncDecSizes, CountsEqualTheCard) {
  const std::map<std::string, int64_t> card = {{"nano", 362'728},
                                               {"tiny", 3'494'400},
                                               {"small", 52'537'344},
                                               {"base", 211'069'952},
                                               {"xl", 2'853'715'968}};
  for (const EncDecSize& s : EncDecSizes()) {
    EXPECT_EQ(EncDecParamCount(s.options), card.at(s.name)) << s.name;
    if (s.name == "base" || s.name == "xl") continue;
    EncDec model(s.options);
    EXPECT_EQ(CountParameters(*model), card.at(s.name)) << s.name;
  }
}

TEST(EncDecSizes, ACustomArchitectureCountsWhatItShould) {
  EncDecOverrides o;
  o.d_model = 96;
  o.heads = 6;
  o.encoder_layers = 1;
  const auto names = EncDecSizeNames(o).value();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "custom_d96_h6_e1_d2_ff256_v1000");  // nano with the overrides
  EXPECT_EQ(names[1], "custom_d96_h6_e1_d3_ff512");        // tiny
  const EncDecOptions c = EncDecSizeOptions(names[0]).value();
  EncDec model(c);
  EXPECT_EQ(CountParameters(*model), EncDecParamCount(c));
  // d96 h6 ff256 V1000: embedding and output, 1 encoder and 2 decoder layers, 2 norms.
  const int64_t d = 96, f = 256, v = 1000;
  EXPECT_EQ(EncDecParamCount(c), v * d + d * v + v + (4 * d * d + 2 * d * f + 9 * d + f) +
                                     2 * (8 * d * d + 2 * d * f + 15 * d + f) + 4 * d);
}

TEST(EncDecSizes, HeadsMustDivideDModel) {
  EncDecOverrides o;
  o.d_model = 100;
  o.heads = 8;
  const auto bad = EncDecSizeNames(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--nhead=8 must divide --d_model=100"),
            std::string::npos);
  EXPECT_FALSE(EncDecSizeOptions("custom_d100_h8_e1_d1_ff64").ok());
  EXPECT_FALSE(EncDecSizeOptions("huge").ok());
}

TEST(EncDec, LossIsNextTokenCrossEntropyOverTheTarget) {
  EncDec model(EncDecSizeOptions("nano").value());
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor pairs = torch::randint(0, 1000, {2, 20});  // 10 source, 10 target
  const at::Tensor loss = EncDecLoss(model, pairs, 10);
  // Random weights: about log(V) per token.
  EXPECT_NEAR(loss.item<double>(), std::log(1000.0), 1.5);
  const at::Tensor logits = model(pairs.narrow(1, 0, 10), pairs.narrow(1, 10, 9));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 9, 1000}));
}

TEST(LossScaler, AnInfiniteGradientSkipsTheStepAndLowersTheScale) {
  at::Tensor w = torch::ones({3}, torch::requires_grad());
  LossScaler scaler(c10::Device(c10::kCPU), 1024.0, /*growth_interval=*/2);
  (scaler.Scale(w.sum())).backward();
  EXPECT_TRUE(scaler.UnscaleAndCheck({w}));
  EXPECT_TRUE(torch::allclose(w.grad(), torch::ones({3})));  // unscaled
  EXPECT_DOUBLE_EQ(scaler.scale(), 1024.0);

  w.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 0.0f});
  EXPECT_FALSE(scaler.UnscaleAndCheck({w}));
  EXPECT_DOUBLE_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skipped(), 1);

  // Two good steps in a row grow it again.
  w.mutable_grad() = torch::ones({3});
  EXPECT_TRUE(scaler.UnscaleAndCheck({w}));
  w.mutable_grad() = torch::ones({3});
  EXPECT_TRUE(scaler.UnscaleAndCheck({w}));
  EXPECT_DOUBLE_EQ(scaler.scale(), 1024.0);

  // Gradients of two dtypes are unscaled by dtype, and a nan in either one
  // skips the step.
  at::Tensor h = torch::ones({2}, torch::dtype(torch::kHalf).requires_grad(true));
  w.mutable_grad() = torch::full({3}, 2048.0f);
  h.mutable_grad() = torch::full({2}, 1024.0, torch::kHalf);
  EXPECT_TRUE(scaler.UnscaleAndCheck({w, h}));
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 2.0f)));
  EXPECT_TRUE(torch::equal(h.grad(), torch::ones({2}, torch::kHalf)));
  h.mutable_grad() = torch::full({2}, std::nan(""), torch::kHalf);
  EXPECT_FALSE(scaler.UnscaleAndCheck({w, h}));
  EXPECT_DOUBLE_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skipped(), 2);
}

// Training's counted tensors (all but the overhead) bound what a step holds
// at its peak, as the CPU allocator counts it, where the scores weigh most.
TEST(EncDecFamily, TrainingCountBoundsTheTensorsAStepHolds) {
  const Family f = EncDecFamily();
  const BenchSpec s = SpecFor(f.name, "nano", kTrainStep, 2, 256);
  const MemoryEstimate m = f.plan(s).value().memory;
  const int64_t counted = m.Total() - m.overhead;
  const int64_t before = CpuAllocatedBytes();
  int64_t peak = 0;
  {
    std::unique_ptr<Workload> w = f.build(s);
    w->Step();  // makes the gradients and AdamW's moments
    ResetCpuPeak();
    w->Step();
    peak = CpuPeakBytes() - before;
  }
  EXPECT_GE(counted, peak);
  EXPECT_LE(counted, 2 * peak);
  EXPECT_EQ(m.overhead, counted / 2);
}

TEST(EncDecFamily, EveryPhaseRunsIncludingAnEpochFromDisk) {
  EpochSettings settings;
  settings.dataset_samples = 8;
  settings.data = "disk";
  settings.data_dir = testing::TempDir() + "/ltb_encdec_" + std::to_string(::getpid());
  const Family f = EncDecFamily();
  for (const char* phase : {kForward, kTrainStep, kTrainEpoch}) {
    BenchSpec s = SpecFor(f.name, "nano", phase, 4, 12);
    s.epochs = settings;
    const auto plan = f.plan(s);
    ASSERT_TRUE(plan.ok()) << s.Name();
    std::unique_ptr<Workload> w = f.build(s);
    w->Step();
    if (s.phase == kTrainEpoch) {
      EXPECT_EQ(plan->samples_per_step, 8);
      w->ResetStats();
      w->Step();
      std::map<std::string, double> c;
      for (const auto& [k, v] : w->Counters()) c[k] = v;
      EXPECT_GT(c["epoch_s"], 0);
      EXPECT_EQ(c["epoch_1_s"], c["epoch_s"]);
    }
  }
  std::filesystem::remove_all(settings.data_dir);
}

}  // namespace
}  // namespace ltb
