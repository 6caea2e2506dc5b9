#include "models/ops.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ltb {
namespace {

constexpr char kMatmul[] = "matmul";
constexpr char kNoop[] = "noop";
constexpr char kCopy[] = "copy";

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

absl::StatusOr<int64_t> MebiBytes(const std::string& shape) {
  int64_t mib = 0;
  absl::string_view text = shape;
  if (!absl::ConsumeSuffix(&text, "MiB") || !absl::SimpleAtoi(text, &mib) || mib <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad copy size '", shape, "'; valid: NMiB, e.g. 256MiB"));
  }
  return mib << 20;
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

// dst.copy_(src) over a buffer too large for any cache: memory bandwidth.
class CopyWorkload final : public Workload {
 public:
  CopyWorkload(int64_t bytes, const BenchSpec& s) {
    const auto opts = at::TensorOptions().dtype(s.dtype).device(s.device);
    const int64_t n = bytes / DtypeBytes(s.dtype);
    src_ = at::randn({n}, opts);
    dst_ = at::empty({n}, opts);
  }
  void Step() override { dst_.copy_(src_); }

 private:
  at::Tensor src_, dst_;
};

class NoopWorkload final : public Workload {
 public:
  void Step() override {}
};

absl::StatusOr<Plan> PlanOps(const BenchSpec& s) {
  Plan plan;
  if (s.size == kNoop) return plan;
  if (s.size == kCopy) {
    absl::StatusOr<int64_t> bytes = MebiBytes(s.phase);
    if (!bytes.ok()) return bytes.status();
    plan.bytes_per_step = 2.0 * static_cast<double>(*bytes);  // read + write
    plan.memory.activations = 2 * *bytes;
    return plan;
  }
  if (s.size != kMatmul) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown op '", s.size, "'; valid: matmul, copy, noop"));
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
  if (s.size == kCopy)
    return std::make_unique<CopyWorkload>(MebiBytes(s.phase).value(), s);
  return std::make_unique<MatmulWorkload>(SquareSide(s.phase).value(), s);
}

}  // namespace

Family OpsFamily() {
  Family f;
  f.name = "Ops";
  f.sizes = {kMatmul, kCopy, kNoop};
  f.cases = {{kMatmul, "2048x2048", true, Shape::kNone},
             {kCopy, "256MiB", true, Shape::kNone},
             {kNoop, "empty", false, Shape::kNone}};
  f.suite_sizes = {kMatmul, kCopy, kNoop};
  f.plan = PlanOps;
  f.build = BuildOps;
  return f;
}

}  // namespace ltb
