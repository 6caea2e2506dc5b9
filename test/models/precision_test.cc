// Every registered family and phase at nano size, on the CPU, in fp32, bf16
// and fp16: it runs; inference holds its weights, buffers and caches in the
// benchmark's dtype, training keeps fp32 weights; its counters are finite.
#include <gtest/gtest.h>

#include <cmath>

#include "device/device.h"
#include "family/registry.h"
#include "suite/sweep.h"
#include "workloads/loader.h"

namespace ltb {
namespace {

std::vector<Registration> NanoCases(const std::vector<Family>& families) {
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU)};
  sweep.batches = {2};
  sweep.seqs = {16};
  sweep.prompts = {4};
  sweep.new_tokens = {3};
  sweep.dtypes = {c10::kFloat, c10::kBFloat16, c10::kHalf};
  sweep.epochs.dataset_samples = 4;
  std::vector<Registration> out;
  for (const Registration& r : ExpandSweep(families, sweep)) {
    if (r.spec.size == "nano") out.push_back(r);
  }
  return out;
}

TEST(PrecisionTest, EveryNanoPhaseRunsInItsDtype) {
  const std::vector<Family> families = RegisteredFamilies().value();
  const std::vector<Registration> cases = NanoCases(families);
  std::set<std::string> covered;
  for (const Registration& r : cases) {
    const BenchSpec& s = r.spec;
    SCOPED_TRACE(s.Name());
    std::string why;
    if (!DtypeRuns(s.device, s.dtype, &why)) {
      // The runner reports this benchmark as that error (LibTorch 1.13 has
      // no fp16 matmul on the CPU).
      EXPECT_NE(why.find("matrix multiply on cpu"), std::string::npos) << why;
      continue;
    }
    covered.insert(s.family + "/" + s.phase);
    ASSERT_TRUE(r.family->PlanFor(s).ok());
    std::unique_ptr<Workload> w = r.family->build(s);
    w->ResetStats();
    w->Step();
    const c10::ScalarType weights = s.training() ? c10::kFloat : s.dtype;
    const auto tensors = w->Tensors();
    ASSERT_FALSE(tensors.empty());
    bool cache = false;
    for (const auto& [name, t] : tensors) {
      cache = cache || name.rfind("cache:", 0) == 0;
      if (!at::isFloatingType(t.scalar_type())) continue;
      if (name.size() >= 8 && name.compare(name.size() - 8, 8, "inv_freq") == 0) {
        // RoPE's inverse frequencies stay fp32 in every dtype (decoder.h).
        EXPECT_EQ(t.scalar_type(), c10::kFloat) << name;
        continue;
      }
      EXPECT_EQ(t.scalar_type(), weights) << name;
    }
    if (s.phase == "generate") EXPECT_TRUE(cache) << "generation exposes its cache";
    for (const auto& [name, value] : w->Counters()) {
      EXPECT_TRUE(std::isfinite(value)) << name << " = " << value;
    }
    if (!s.training() && s.dtype != c10::kFloat) {
      const at::Tensor out = w->Evaluate();
      ASSERT_TRUE(out.defined()) << "no output to compare with fp32";
      if (at::isFloatingType(out.scalar_type())) {
        EXPECT_EQ(out.scalar_type(), s.dtype);
        EXPECT_TRUE(out.isfinite().all().item<bool>());
      }
    }
  }
  // Every family but Ops (whose cases are operations, not model phases)
  // has a nano size; each of its phases ran.
  for (const Family& f : families) {
    if (f.name == "Ops") continue;
    for (const Phase& p : f.phases) {
      EXPECT_TRUE(covered.count(f.name + "/" + p.name)) << f.name << "/" << p.name;
    }
  }
}

}  // namespace
}  // namespace ltb
