#include "layers/quant.h"

#include <ATen/ops/_choose_qparams_per_tensor.h>
#include <ATen/ops/quantize_per_tensor.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "device/backend.h"
#include "device/device.h"
#include "family/registry.h"
#include "layers/packed_linear.h"
#include "layers/prepare.h"
#include "models/decoder_family.h"
#include "suite/sweep.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

const c10::Device kHost(c10::kCPU);
const Quant kInt8{QuantKind::kInt8, 0};
const Quant kInt4g32{QuantKind::kInt4, 32};
const Quant kInt8Dyn{QuantKind::kInt8Dyn, 0};

BenchSpec InferenceSpec(const Quant& quant, c10::ScalarType dtype) {
  BenchSpec s;
  s.family = "GPT2";
  s.size = "nano";
  s.phase = "generate";
  s.dtype = dtype;
  s.quant = quant;
  return s;
}

double MaxAbs(const at::Tensor& t) { return t.abs().max().item<double>(); }

TEST(QuantizeWeight, Int8IsPerOutputChannelAndSymmetric) {
  torch::manual_seed(0);
  const at::Tensor w = torch::randn({24, 40}) * torch::linspace(0.1, 3, 24).unsqueeze(1);
  const QuantizedWeight q = QuantizeWeight(w, kInt8, c10::kFloat);
  EXPECT_EQ(q.values.scalar_type(), c10::kChar);
  EXPECT_EQ(q.values.sizes(), w.sizes());
  ASSERT_EQ(q.scales.sizes(), (std::vector<int64_t>{24}));
  // Each row's largest magnitude maps to +-127, and nothing is outside.
  EXPECT_TRUE(torch::allclose(q.scales, w.abs().amax(1) / 127));
  EXPECT_EQ(q.values.abs().amax(1).to(c10::kInt).min().item<int>(), 127);
  // Rounding: within half a step of each row.
  const at::Tensor err = (Dequantize(q) - w).abs();
  EXPECT_TRUE((err <= q.scales.unsqueeze(1) * 0.5001).all().item<bool>());
}

TEST(QuantizeWeight, Int4GroupsHaveAScaleAndAZeroFromTheirMinAndMax) {
  torch::manual_seed(1);
  const at::Tensor w = torch::randn({16, 64}) + 0.5;
  const QuantizedWeight q = QuantizeWeight(w, kInt4g32, c10::kFloat);
  EXPECT_EQ(q.values.scalar_type(), c10::kInt);
  EXPECT_GE(q.values.min().item<int>(), 0);
  EXPECT_LE(q.values.max().item<int>(), 15);
  ASSERT_EQ(q.scales.sizes(), (std::vector<int64_t>{16, 2}));
  ASSERT_EQ(q.zeros.sizes(), (std::vector<int64_t>{16, 2}));
  const at::Tensor groups = w.reshape({16, 2, 32});
  const at::Tensor lo = groups.amin(-1), hi = groups.amax(-1);
  EXPECT_TRUE(torch::allclose(q.scales, (hi - lo) / 15));
  EXPECT_TRUE(torch::allclose(q.zeros, lo + q.scales * 8));
  // The group's minimum is q = 0 and its maximum q = 15.
  const at::Tensor values = q.values.reshape({16, 2, 32});
  EXPECT_EQ(values.amin(-1).max().item<int>(), 0);
  EXPECT_EQ(values.amax(-1).min().item<int>(), 15);
  const at::Tensor err = (Dequantize(q) - w).abs().reshape({16, 2, 32});
  EXPECT_TRUE((err <= q.scales.unsqueeze(-1) * 0.5001).all().item<bool>());
}

TEST(QuantizeWeight, Int4NeedsWholeGroups) {
  try {
    QuantizeWeight(torch::randn({16, 48}), kInt4g32, c10::kFloat);
    FAIL() << "48 inputs in groups of 32";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("input width (48) to be a multiple of 32"),
              std::string::npos);
  }
}

// Each kernel against a dequantise-then-linear reference, in fp32, on the
// same quantised values and scales (as the kernel reads them, in `dtype`).
// The kernels accumulate in fp32 and round once to `dtype`.
void ExpectKernelMatchesReference(const Quant& quant, c10::ScalarType dtype, bool bias) {
  SCOPED_TRACE(quant.Name() + " " + DtypeName(dtype) + (bias ? " with bias" : ""));
  torch::manual_seed(2);
  // 40 outputs: not a multiple of the int4 kernels' 16 (padded, then cut).
  const at::Tensor w = (torch::randn({40, 128}) * 0.05).to(dtype);
  const at::Tensor b = bias ? (torch::randn({40}) * 0.1).to(dtype) : at::Tensor();
  const at::Tensor x = torch::randn({3, 5, 128}).to(dtype);
  const QuantizedLinear layer(w, b, quant);
  const at::Tensor y = layer(x);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 5, 40}));
  EXPECT_EQ(y.scalar_type(), dtype);

  const QuantizedWeight q = QuantizeWeight(w, quant, dtype);
  at::Tensor xin = x.to(c10::kFloat);
  if (quant.kind == QuantKind::kInt8Dyn) {
    // FBGEMM quantises the activations per tensor to 7 bits (reduce_range).
    const auto [scale, zero] = at::_choose_qparams_per_tensor(xin, /*reduce_range=*/true);
    xin = at::quantize_per_tensor(xin, scale, zero, c10::kQUInt8).dequantize();
  }
  const at::Tensor ref = torch::nn::functional::linear(
      xin, Dequantize(q), bias ? b.to(c10::kFloat) : at::Tensor());
  const double tolerance = dtype == c10::kFloat  ? 1e-5
                           : dtype == c10::kHalf ? 2e-3
                                                 : 1e-2;
  EXPECT_LE(MaxAbs(y.to(c10::kFloat) - ref), tolerance * MaxAbs(ref));
}

TEST(QuantizedLinear, EachCpuKernelComputesTheDequantisedLinear) {
  const Capabilities caps = BackendOf(kHost).Caps();
  for (const c10::ScalarType dtype : caps.int8_weight_dtypes) {
    ExpectKernelMatchesReference(kInt8, dtype, false);
    ExpectKernelMatchesReference(kInt8, dtype, true);
  }
  for (const c10::ScalarType dtype : caps.int4_weight_dtypes) {
    for (const int64_t g : kQuantGroups) {
      ExpectKernelMatchesReference({QuantKind::kInt4, g}, dtype, g == 32);
    }
  }
  if (caps.dynamic_int8_linear) {
    ExpectKernelMatchesReference(kInt8Dyn, c10::kFloat, false);
    ExpectKernelMatchesReference(kInt8Dyn, c10::kFloat, true);
  }
}

TEST(QuantizedLinear, CountsThePackedBytes) {
  const at::Tensor w = torch::randn({40, 128});
  // int8: a byte a weight and an fp32 scale a row.
  EXPECT_EQ(QuantizedLinear(w, {}, kInt8).bytes(), 40 * 128 + 40 * 4);
  // int4: half a byte a weight and a scale and a zero a group, of 48 rows
  // (40 padded to the kernel's tiles of 16); plus the bf16 bias.
  const at::Tensor w16 = w.to(c10::kBFloat16);
  EXPECT_EQ(QuantizedLinear(w16, torch::zeros({40}, c10::kBFloat16), kInt4g32).bytes(),
            48 * 128 / 2 + 48 * (128 / 32) * 2 * 2 + 40 * 2);
}

TEST(CanQuantize, SaysWhyNot) {
  std::string why;
  EXPECT_TRUE(CanQuantize(InferenceSpec(Quant{}, c10::kFloat), &why));
  EXPECT_TRUE(why.empty());
  EXPECT_TRUE(CanQuantize(InferenceSpec(kInt8, c10::kBFloat16), &why)) << why;
  EXPECT_TRUE(CanQuantize(InferenceSpec(kInt4g32, c10::kFloat), &why)) << why;

  BenchSpec training = InferenceSpec(kInt8, c10::kFloat);
  training.phase = "train_step";
  training.kind = PhaseKind::kTraining;
  EXPECT_FALSE(CanQuantize(training, &why));
  EXPECT_NE(why.find("quantised weights are for inference"), std::string::npos) << why;

  if (BackendOf(kHost).Caps().dynamic_int8_linear) {
    EXPECT_FALSE(CanQuantize(InferenceSpec(kInt8Dyn, c10::kBFloat16), &why));
    EXPECT_NE(why.find("takes fp32 activations"), std::string::npos) << why;
  }
  BenchSpec gpu = InferenceSpec(kInt4g32, c10::kFloat);
  gpu.device = c10::Device(c10::kCUDA, 0);
  EXPECT_FALSE(CanQuantize(gpu, &why));
  EXPECT_NE(why.find("on cuda takes bf16 activations, not fp32"), std::string::npos)
      << why;
  gpu.quant = kInt8Dyn;
  EXPECT_FALSE(CanQuantize(gpu, &why));
  EXPECT_NE(why.find("x86 CPUs"), std::string::npos) << why;
}

TEST(BenchSpecName, QuantisationFollowsTheDtype) {
  BenchSpec s = InferenceSpec(kInt4g32, c10::kBFloat16);
  s.batch = 1;
  s.prompt = 32;
  s.new_tokens = 8;
  EXPECT_EQ(s.Name(), "GPT2/nano/cpu/generate/batch:1/prompt:32/new:8/bf16/int4:g32");
  s.quant = kInt8Dyn;
  s.sync = false;
  EXPECT_EQ(s.Name(),
            "GPT2/nano/cpu/generate/batch:1/prompt:32/new:8/bf16/int8dyn/nosync");
  s.quant = Quant{};
  EXPECT_EQ(s.Name(), "GPT2/nano/cpu/generate/batch:1/prompt:32/new:8/bf16/nosync");
}

TEST(ExpandSweep, QuantisationIsAnAxisOfTheLanguageModels) {
  const std::vector<Family> families = RegisteredFamilies(true).value();
  Sweep sweep;
  sweep.devices = {kHost};
  sweep.quants = {Quant{}, kInt8, kInt4g32};
  sweep.pack_cpu_linears = {false, true};
  std::set<std::string> names;
  for (const Registration& r : ExpandSweep(families, sweep)) {
    names.insert(r.spec.Name());
    if (!r.spec.quant.none()) {
      EXPECT_TRUE(r.family->quantizes) << r.spec.Name();
      EXPECT_FALSE(r.spec.pack_cpu_linears) << r.spec.Name();
    }
  }
  for (const char* q : {"", "/int8", "/int4:g32"}) {
    EXPECT_TRUE(names.count(
        absl::StrCat("Llama/nano/cpu/generate/batch:1/prompt:32/new:100/fp32", q)))
        << q;
    EXPECT_TRUE(
        names.count(absl::StrCat("Transformer/nano/cpu/forward/batch:4/seq:512/fp32", q)))
        << q;
    // Training is registered, to say why it does not run quantised.
    EXPECT_TRUE(
        names.count(absl::StrCat("GPT2/nano/cpu/train_step/batch:1/seq:512/fp32", q)))
        << q;
  }
  EXPECT_TRUE(names.count("GPT2/nano/cpu/forward/batch:1/seq:512/fp32/onednn"));
  EXPECT_FALSE(names.count("GPT2/nano/cpu/forward/batch:1/seq:512/fp32/int8/onednn"));
  for (const std::string& name : names) {
    if (absl::StartsWith(name, "ResNet/")) {
      EXPECT_FALSE(absl::StrContains(name, "/int")) << name;
    }
  }
}

TEST(QuantizeLinears, QuantisesEveryLayerAndATiedHeadAndFreesTheWeights) {
  torch::manual_seed(3);
  DecoderLM model = MakeDecoder("Llama", *DecoderSizeOptions("Llama", "nano"));
  const BenchSpec spec = InferenceSpec(kInt8, c10::kFloat);
  const at::Tensor tokens = torch::randint(0, 1000, {1, 12});
  at::Tensor before;
  {
    torch::NoGradGuard no_grad;
    model->eval();
    before = model(tokens);
  }
  int64_t linear_bytes = 0, linears = 0;
  for (const auto& m : model->modules()) {
    if (auto* l = dynamic_cast<PackableLinearImpl*>(m.get())) {
      linear_bytes += l->weight.nbytes();
      ++linears;
    }
  }
  const WeightChange change = PrepareModel(*model, spec);
  // 7 linear layers in each of 2 blocks; the tied head is a quantised copy
  // of the 1000 x 64 embedding, which the lookup keeps.
  EXPECT_EQ(linears, 14);
  EXPECT_EQ(change.removed, linear_bytes + 1000 * 64 * 4);
  for (const auto& m : model->modules()) {
    if (auto* l = dynamic_cast<PackableLinearImpl*>(m.get())) {
      EXPECT_EQ(l->weight.numel(), 0);
    }
  }
  EXPECT_EQ(model->embed->weight.numel(), 1000 * 64);
  // A byte a weight and a 4-byte scale a row, for 122,880 weights in rows
  // of 768 outputs a block, and the head's 64,000 in 1,000 rows.
  EXPECT_EQ(change.added, 122'880 + 2 * 768 * 4 + 64'000 + 1'000 * 4);
  torch::NoGradGuard no_grad;
  const at::Tensor after = model(tokens);
  EXPECT_LT(MaxAbs(after - before), 0.02 * MaxAbs(before));
  EXPECT_TRUE(after.argmax(-1).equal(before.argmax(-1)));
}

TEST(QuantizeLinears, RefusesAModelWithoutQuantisableLayers) {
  torch::nn::Sequential plain(torch::nn::Linear(8, 4));
  const auto none = QuantizeLinears(*plain, InferenceSpec(kInt8, c10::kFloat));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no linear layers to quantise"),
            std::string::npos);
}

}  // namespace
}  // namespace ltb
