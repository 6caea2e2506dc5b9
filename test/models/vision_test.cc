// ResNet and CNN: the card's parameter counts, torchvision's names, batch
// norm behaviour, and FLOP formulas against LibTorch's profiler.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "device/cpu_memory.h"
#include "models/cnn.h"
#include "models/resnet.h"
#include "profiled_flops.h"
#include "spec_for.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

// FLOPs the profiler counts for convolutions and linear layers.
double ProfiledConvAndLinearFlops(const std::function<void()>& fn) {
  return ProfiledFlops(fn, {"aten::conv2d", "aten::addmm", "aten::mm"});
}

TEST(ResNetSizes, CountsEqualTheCard) {
  const std::map<std::string, int64_t> card = {
      {"nano", 438'456}, {"resnet18", 11'689'512}, {"resnet50", 25'557'032}};
  for (const ResNetSize& s : ResNetSizes()) {
    EXPECT_EQ(ResNetCostFor(s.options, 224).params, card.at(s.name)) << s.name;
    ResNet model(s.options);
    EXPECT_EQ(CountParameters(*model), card.at(s.name)) << s.name;
  }
}

TEST(ResNet, ParameterNamesMatchTorchvision) {
  ResNet model(ResNetSizeOptions("resnet50").value());
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
  for (const char* name :
       {"conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight",
        "layer1.0.conv3.weight", "layer1.0.bn3.bias", "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.weight", "layer4.2.conv2.weight", "fc.weight",
        "fc.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  std::set<std::string> buffers;
  for (const auto& item : model->named_buffers()) buffers.insert(item.key());
  EXPECT_TRUE(buffers.count("bn1.running_mean"));
  EXPECT_TRUE(buffers.count("layer2.0.downsample.1.running_var"));
}

TEST(ResNet, EvalOutputOfAnImageDoesNotDependOnTheBatch) {
  torch::manual_seed(7);
  ResNet model(ResNetSizeOptions("nano").value());
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor images = torch::randn({4, 3, 64, 64});
  const at::Tensor together = model(images);
  const at::Tensor alone = model(images.narrow(0, 1, 1));
  EXPECT_TRUE(torch::allclose(together.narrow(0, 1, 1), alone, 1e-4, 1e-5));
  at::Tensor other = images.clone();
  other.narrow(0, 0, 1).normal_();  // change another image
  EXPECT_TRUE(torch::allclose(model(other).narrow(0, 1, 1), alone, 1e-4, 1e-5));
}

TEST(ResNet, TrainModeUpdatesBatchNormRunningStatistics) {
  ResNet model(ResNetSizeOptions("nano").value());
  model->train();
  const at::Tensor mean_before = model->bn1->running_mean.clone();
  const at::Tensor var_before = model->bn1->running_var.clone();
  model(torch::randn({4, 3, 64, 64}) * 3 + 1);
  EXPECT_FALSE(torch::allclose(model->bn1->running_mean, mean_before));
  EXPECT_FALSE(torch::allclose(model->bn1->running_var, var_before));
  // ... and eval mode leaves them alone.
  model->eval();
  const at::Tensor frozen = model->bn1->running_mean.clone();
  model(torch::randn({4, 3, 64, 64}));
  EXPECT_TRUE(torch::equal(model->bn1->running_mean, frozen));
}

TEST(ResNetFlops, AnalyticCountEqualsTheProfilers) {
  for (const char* size : {"nano", "resnet18"}) {
    const ResNetOptions o = ResNetSizeOptions(size).value();
    ResNet model(o);
    model->eval();
    const double profiled = ProfiledConvAndLinearFlops([&] {
      torch::NoGradGuard no_grad;
      model(torch::randn({2, 3, 96, 96}));
    });
    EXPECT_NEAR(profiled, 2 * ResNetCostFor(o, 96).flops, 0.01 * profiled) << size;
  }
}

TEST(ResNetFlops, Resnet50IsAbout4GigaMultiplyAddsPerImage) {
  // The commonly quoted 4.1 GMACs of ResNet-50 at 224 x 224.
  const double macs = ResNetCostFor(ResNetSizeOptions("resnet50").value(), 224).flops / 2;
  EXPECT_NEAR(macs, 4.1e9, 0.05e9);
}

TEST(ResNetFamily, ChannelsLastRunsAndIsNamed) {
  const Family f = ResNetFamily();
  for (const char* phase : {kForward, kTrainStep}) {
    BenchSpec s = SpecFor(f.name, "nano", phase, 2);
    s.channels_last = true;
    EXPECT_EQ(s.Name(),
              absl::StrCat("ResNet/nano/cpu/", phase, "/batch:2/fp32/channels_last"));
    ASSERT_TRUE(f.plan(s).ok());
    // Counted as direct convolutions: never a count to raise a measured peak with.
    EXPECT_EQ(f.plan(s)->count_beyond_arithmetic, kDirectConvolutionCount);
    f.build(s)->Step();
  }
}

TEST(CNNSizes, CountsEqualTheCard) {
  for (const CNNSize& s : CNNSizes()) {
    EXPECT_EQ(CNNParamCount(s.options), s.card_params) << s.name;
    CNN model(s.options);
    EXPECT_EQ(CountParameters(*model), s.card_params) << s.name;
  }
  EXPECT_EQ(CNNSizes().back().card_params, 2'122'186);
  EXPECT_EQ(CNNSizes().front().card_params, 268'650);
}

TEST(CNNFlops, AnalyticCountEqualsTheProfilers) {
  for (const CNNSize& s : CNNSizes()) {
    CNN model(s.options);
    const double profiled = ProfiledConvAndLinearFlops([&] {
      torch::NoGradGuard no_grad;
      model(torch::randn({3, 3, 32, 32}));
    });
    EXPECT_NEAR(profiled, 3 * CNNForwardFlops(s.options), 0.01 * profiled) << s.name;
  }
}

TEST(CNNFamily, EveryPhaseRuns) {
  const Family f = CNNFamily();
  for (const Case& c : f.Cases()) {
    const BenchSpec s = SpecFor(f.name, c.size, c.phase.name, 4);
    const auto plan = f.plan(s);
    ASSERT_TRUE(plan.ok()) << s.Name();
    EXPECT_EQ(plan->samples_per_step, 4);
    f.build(s)->Step();
  }
}

TEST(ClassifierFamilies, InferenceEstimateBoundsTheTensorsAForwardHolds) {
  // Batches where the activations outweigh the weights (ResNet/resnet18's
  // 44.6 MiB, CNN/default's 8.1 MiB), and resnet50, whose largest block
  // holds more than its stem.
  for (const auto& [family, size, batch] :
       std::vector<std::tuple<Family, std::string, int64_t>>{
           {ResNetFamily(), "resnet18", 4},
           {ResNetFamily(), "resnet50", 2},
           {CNNFamily(), "default", 64}}) {
    const BenchSpec s = SpecFor(family.name, size, kForward, batch);
    const int64_t estimate = family.plan(s).value().memory.Total();
    const int64_t before = CpuAllocatedBytes();
    int64_t peak = 0;
    {
      std::unique_ptr<Workload> w = family.build(s);
      w->Step();
      ResetCpuPeak();
      w->Step();
      peak = CpuPeakBytes() - before;
    }
    EXPECT_LE(peak, estimate) << size;
    EXPECT_GT(peak, estimate / 2) << size;
  }
}

}  // namespace
}  // namespace ltb
