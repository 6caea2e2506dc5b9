// The foreach optimizers against LibTorch's own, step for step, and the
// choice between them by device.
#include "workloads/optimizers.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "family/spec.h"
#include "operators_called.h"
#include "workloads/phases.h"
#include "workloads/trainer.h"

namespace ltb {
namespace {

// Two parameter lists with equal starting values, of a few shapes.
std::vector<at::Tensor> Params(int seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> p = {torch::randn({4, 3}), torch::randn({5}),
                               torch::randn({2, 2, 2})};
  for (at::Tensor& t : p) t.requires_grad_(true);
  return p;
}

// Steps both optimizers three times over the same random gradients (the
// last parameter without one on step `gradless`, the second by default) and
// expects the same parameters after each step.
void ExpectSameSteps(torch::optim::Optimizer& reference, std::vector<at::Tensor>& a,
                     torch::optim::Optimizer& foreach, std::vector<at::Tensor>& b,
                     int gradless = 1) {
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (step == gradless && i + 1 == a.size()) {
        a[i].mutable_grad() = at::Tensor();
        b[i].mutable_grad() = at::Tensor();
        continue;
      }
      const at::Tensor g = torch::randn(a[i].sizes());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    reference.step();
    foreach
      .step();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-6))
          << "step " << step << " parameter " << i << "\n"
          << a[i] << "\n"
          << b[i];
    }
  }
  // The steps moved the parameters.
  EXPECT_FALSE(torch::allclose(a[0], Params(1)[0]));
}

// An AdamW of Python's kernels against LibTorch's, step for step, with the
// same state, so that memory and checkpoints match too.
template <typename AdamW>
void ExpectStepsAsLibTorchsAdamW() {
  auto a = Params(1), b = Params(1);
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  torch::optim::AdamW reference(a, options);
  AdamW ours(b, options);
  ExpectSameSteps(reference, a, ours, b);
  EXPECT_EQ(ours.state().size(), reference.state().size());
}

// amsgrad, which neither implements, is refused at the step.
template <typename AdamW>
void ExpectAmsgradRefused() {
  auto p = Params(1);
  for (at::Tensor& t : p) t.mutable_grad() = torch::ones_like(t);
  AdamW adamw(p, torch::optim::AdamWOptions(1e-2).amsgrad(true));
  EXPECT_THROW(adamw.step(), c10::Error);
}

TEST(ForeachAdamW, StepsAsLibTorchsAdamW) { ExpectStepsAsLibTorchsAdamW<ForeachAdamW>(); }

TEST(PerParameterAdamW, StepsAsLibTorchsAdamW) {
  ExpectStepsAsLibTorchsAdamW<PerParameterAdamW>();
}

// The operators an optimizer's step calls on this thread, by name.
std::map<std::string, int> OperatorsOfAStep(torch::optim::Optimizer& optimizer) {
  return OperatorsCalled([&] { optimizer.step(); });
}

// Python's _single_tensor_adamw (its CPU default) moves the first moment
// with one lerp_ a parameter; LibTorch's AdamW with mul_ and add_.
TEST(PerParameterAdamW, MovesTheFirstMomentInOnePassAsPython) {
  auto a = Params(1), b = Params(1);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i].mutable_grad() = torch::ones_like(a[i]);
    b[i].mutable_grad() = torch::ones_like(b[i]);
  }
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  PerParameterAdamW per_parameter(a, options);
  torch::optim::AdamW libtorch(b, options);
  const std::map<std::string, int> ours = OperatorsOfAStep(per_parameter);
  const std::map<std::string, int> theirs = OperatorsOfAStep(libtorch);
  const int params = static_cast<int>(a.size());
  EXPECT_EQ(ours.count("aten::lerp_") ? ours.at("aten::lerp_") : 0, params);
  EXPECT_EQ(theirs.count("aten::lerp_"), 0u);
  EXPECT_EQ(ours.at("aten::addcdiv_"), params);
  EXPECT_EQ(ours.at("aten::addcmul_"), params);
  EXPECT_EQ(ours.at("aten::sqrt"), params);
  // Both add eps to the denominator; LibTorch's adds the gradient too, one
  // add_ more a parameter.
  EXPECT_EQ(theirs.at("aten::add_") - ours.at("aten::add_"), params);
  EXPECT_EQ(ours.at("aten::mul_"), theirs.at("aten::mul_") - params);
}

TEST(PerParameterAdamW, RefusesAmsgrad) { ExpectAmsgradRefused<PerParameterAdamW>(); }

TEST(ForeachAdamW, RefusesAmsgrad) { ExpectAmsgradRefused<ForeachAdamW>(); }

TEST(ForeachSGD, StepsAsLibTorchsSGDWithMomentum) {
  for (const double decay : {0.0, 0.01}) {
    auto a = Params(1), b = Params(1);
    const auto options = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(decay);
    torch::optim::SGD reference(a, options);
    ForeachSGD foreach (b, options);
    ExpectSameSteps(reference, a, foreach, b);
  }
}

// The last parameter has no gradient on the first step: on the second, its
// momentum buffer is new while the others' exist, and theirs must still be
// updated.
TEST(ForeachSGD, AParameterWhoseFirstGradientComesLaterLeavesTheOthersUpdates) {
  auto a = Params(1), b = Params(1);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  torch::optim::SGD reference(a, options);
  ForeachSGD foreach (b, options);
  ExpectSameSteps(reference, a, foreach, b, /*gradless=*/0);
}

TEST(ForeachSGD, StepsAsLibTorchsPlainSGD) {
  auto a = Params(1), b = Params(1);
  torch::optim::SGD reference(a, torch::optim::SGDOptions(0.1));
  ForeachSGD foreach (b, torch::optim::SGDOptions(0.1));
  ExpectSameSteps(reference, a, foreach, b);
}

TEST(MakeOptimizer, TheCpuStepsParameterByParameterAsPythonsDefault) {
  auto p = Params(1);
  const c10::Device cpu(c10::kCPU);
  EXPECT_FALSE(DefaultsToForeach(cpu));
  auto adamw = MakeAdamW(cpu, p, torch::optim::AdamWOptions(1e-3));
  EXPECT_NE(dynamic_cast<PerParameterAdamW*>(adamw.get()), nullptr);
  auto sgd = MakeSGD(cpu, p, torch::optim::SGDOptions(0.1));
  EXPECT_EQ(dynamic_cast<ForeachSGD*>(sgd.get()), nullptr);
}

// fp16's loss scaler skips a step whose gradients are not finite: the
// measured steps it skipped (not those before) are said in the label.
TEST(TrainStep, StepsTheLossScalerSkippedAreSaid) {
  auto module = std::make_shared<torch::nn::Module>();
  at::Tensor w = module->register_parameter("w", torch::ones({3}));
  bool overflow = false;
  TrainFns fns;
  fns.module = module;
  fns.loss = [&](const at::Tensor&) {
    return (w * (overflow ? std::numeric_limits<float>::infinity() : 1.0f)).sum();
  };
  fns.make_optimizer = [&] {
    return std::make_unique<torch::optim::SGD>(module->parameters(),
                                               torch::optim::SGDOptions(0.1));
  };
  BenchSpec spec;
  spec.family = "Test";
  spec.phase = kTrainStep;
  spec.dtype = c10::kHalf;
  spec.device = c10::Device(c10::kCPU);
  std::unique_ptr<Workload> step = MakeTrainStepWorkload(spec, fns, at::zeros({1, 1}));
  overflow = true;
  step->Step();  // a warm-up step skipped: not a measured one
  step->ResetStats();
  step->BeginMeasurement();
  step->Step();  // skipped
  overflow = false;
  step->Step();
  overflow = true;
  step->Step();  // skipped
  step->EndMeasurement();
  EXPECT_EQ(
      step->Caveat(),
      "2 of the measured steps skipped the optimizer: fp16's loss scaler found "
      "gradients that are not finite (and lowered its scale), so those steps changed "
      "no weight");
  step->ResetStats();
  step->BeginMeasurement();
  overflow = false;
  step->Step();
  step->EndMeasurement();
  EXPECT_EQ(step->Caveat(), "");
}

}  // namespace
}  // namespace ltb
