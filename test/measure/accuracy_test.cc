#include "measure/accuracy.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/match.h"

namespace ltb {
namespace {

// A workload whose one output is fixed.
class Fixed final : public Workload {
 public:
  explicit Fixed(at::Tensor out) : out_(std::move(out)) {}
  void Step() override {}
  at::Tensor Evaluate() override { return out_; }

 private:
  at::Tensor out_;
};

// A family that records the specs it builds, and plans `weights` bytes.
Family Recording(std::vector<BenchSpec>* built, int64_t weights) {
  Family f;
  f.name = "Recorded";
  f.sizes = {"one"};
  Phase forward;
  forward.name = "forward";
  forward.shape = Shape::kNone;
  f.phases = {forward};
  f.plan = [weights](const BenchSpec&) -> absl::StatusOr<Plan> {
    Plan p;
    p.memory.weights = weights;
    return p;
  };
  f.build = [built](const BenchSpec& spec) -> std::unique_ptr<Workload> {
    built->push_back(spec);
    return std::make_unique<Fixed>(at::tensor({1.0f, 2.0f, 4.0f}));
  };
  return f;
}

BenchSpec Bf16(const Family& f) {
  BenchSpec spec;
  spec.family = f.name;
  spec.size = "one";
  SetPhase(f.phases[0], &spec);
  spec.device = c10::Device(c10::kCPU);
  spec.dtype = c10::kBFloat16;
  return spec;
}

TEST(Accuracy, TheReferenceIsEagerPlainFp32) {
  std::vector<BenchSpec> built;
  const Family f = Recording(&built, 1 << 20);
  BenchSpec spec = Bf16(f);
  spec.graph = true;  // a graphed run is checked against an eager one
  spec.tf32 = true;
  Fixed mine(at::tensor({1.0f, 2.0f, 3.0f}));
  std::string absent;
  const auto drift = Accuracy(f, spec, 0, mine, &absent);
  ASSERT_EQ(built.size(), 1u);
  EXPECT_EQ(built[0].dtype, c10::kFloat);
  EXPECT_FALSE(built[0].graph);
  EXPECT_FALSE(built[0].tf32);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].first, "rel_err");
  EXPECT_DOUBLE_EQ(drift[0].second, 0.25);  // |3 - 4| / 4
  EXPECT_TRUE(absent.empty()) << absent;
}

TEST(Accuracy, AReferenceThatDoesNotFitIsNotBuiltAndTheCheckSaysWhy) {
  std::vector<BenchSpec> built;
  const Family f = Recording(&built, std::numeric_limits<int64_t>::max() / 4);
  Fixed mine(at::tensor({1.0f}));
  std::string absent;
  EXPECT_TRUE(Accuracy(f, Bf16(f), 0, mine, &absent).empty());
  EXPECT_TRUE(built.empty());
  EXPECT_TRUE(absl::StartsWith(
      absent, "no accuracy check: the fp32 reference does not fit beside the model ("))
      << absent;
}

TEST(Accuracy, NoneIsDueInFp32AndNoneIsSaidMissing) {
  std::vector<BenchSpec> built;
  const Family f = Recording(&built, 1 << 20);
  BenchSpec spec = Bf16(f);
  spec.dtype = c10::kFloat;
  Fixed mine(at::tensor({1.0f}));
  std::string absent = "left over";
  EXPECT_TRUE(Accuracy(f, spec, 0, mine, &absent).empty());
  EXPECT_TRUE(built.empty());
  EXPECT_TRUE(absent.empty());
}

}  // namespace
}  // namespace ltb
