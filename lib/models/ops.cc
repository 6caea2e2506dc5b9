#include "models/ops.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ltb {
namespace {

constexpr char kMatmul[] = "matmul";
constexpr char kNoop[] = "noop";

absl::StatusOr<int64_t> SquareSide(const std::string& shape) {
  std::vector<std::string> parts = absl::StrSplit(shape, 'x');
  int64_t m = 0, n = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &m) ||
      !absl::SimpleAtoi(parts[1], &n) || m != n || m <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad matmul shape '", shape, "'; valid: NxN, e.g. 2048x2048"));
  }
  return m;
}

class MatmulWorkload final : public Workload {
 public:
  MatmulWorkload(int64_t n, const BenchSpec& s) {
    const auto opts = at::TensorOptions().dtype(s.dtype).device(s.device);
    a_ = at::randn({n, n}, opts);
    b_ = at::randn({n, n}, opts);
    c_ = at::empty({n, n}, opts);
  }
  void Step() override { at::mm_out(c_, a_, b_); }

 private:
  at::Tensor a_, b_, c_;
};

class NoopWorkload final : public Workload {
 public:
  void Step() override {}
};

absl::StatusOr<Plan> PlanOps(const BenchSpec& s) {
  Plan plan;
  if (s.size == kNoop) return plan;
  if (s.size != kMatmul) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown op '", s.size, "'; valid: matmul, noop"));
  }
  absl::StatusOr<int64_t> n = SquareSide(s.phase);
  if (!n.ok()) return n.status();
  const double nn = static_cast<double>(*n);
  plan.flops_per_step = 2 * nn * nn * nn;
  plan.memory.activations = 3 * *n * *n * DtypeBytes(s.dtype);
  return plan;
}

std::unique_ptr<Workload> BuildOps(const BenchSpec& s) {
  if (s.size == kNoop) return std::make_unique<NoopWorkload>();
  return std::make_unique<MatmulWorkload>(SquareSide(s.phase).value(), s);
}

}  // namespace

Family OpsFamily() {
  Family f;
  f.name = "Ops";
  f.sizes = {kMatmul, kNoop};
  f.cases = {{kMatmul, "2048x2048", true}, {kNoop, "empty", false}};
  f.suite_sizes = {kMatmul, kNoop};
  f.plan = PlanOps;
  f.build = BuildOps;
  return f;
}

}  // namespace ltb
