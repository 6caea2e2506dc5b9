#include "models/ops.h"

#include <ATen/ATen.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/device.h"
#include "family/registry.h"
#include "models/attention.h"

namespace ltb {
namespace {

constexpr int64_t kMiB = 1 << 20;

// One registered op: its shape name, its cost, what it needs in memory, and
// a factory for its step (tensors are made once, outside the timed step).
struct OpDef {
  std::string op;
  std::string shape;
  bool transfer = false;        // needs a device with host transfers
  bool crosses_link = false;    // host <-> device: its bytes cross the host link
  MatmulShape mkn = {0, 0, 0};  // matmuls only
  std::function<OpCost(int64_t elt)> cost;
  // What its tensors hold; unset: the bytes its cost counts (each operand once).
  std::function<int64_t(int64_t elt)> memory;
  int64_t host_memory = 0;  // what it holds on the host beside, on a GPU
  std::function<std::function<void()>(const at::TensorOptions&)> make_step;
};

class FnWorkload final : public Workload {
 public:
  explicit FnWorkload(std::function<void()> step) : step_(std::move(step)) {}
  void Step() override { step_(); }

 private:
  std::function<void()> step_;
};

std::string Dims(std::initializer_list<int64_t> dims) { return absl::StrJoin(dims, "x"); }

// C (m x n) = A (m x k) B (k x n): 2 m k n FLOPs; A and B read and C written
// once, the least a step moves.
OpDef Matmul(int64_t m, int64_t k, int64_t n) {
  OpDef d;
  d.op = "matmul";
  d.shape = m == k && k == n ? Dims({m, n}) : Dims({m, k, n});
  d.mkn = {m, k, n};
  d.cost = [=](int64_t e) {
    return OpCost{2.0 * m * k * n, static_cast<double>((m * k + k * n + m * n) * e)};
  };
  d.make_step = [=](const at::TensorOptions& o) -> std::function<void()> {
    at::Tensor a = at::randn({m, k}, o), b = at::randn({k, n}, o),
               c = at::empty({m, n}, o);
    return [=]() mutable { at::mm_out(c, a, b); };
  };
  return d;
}

// batch x (m x k) @ (k x n).
OpDef Bmm(int64_t batch, int64_t m, int64_t k, int64_t n) {
  OpDef d;
  d.op = "bmm";
  d.shape = Dims({batch, m, k, n});
  d.cost = [=](int64_t e) {
    return OpCost{2.0 * batch * m * k * n,
                  static_cast<double>(batch * (m * k + k * n + m * n) * e)};
  };
  d.make_step = [=](const at::TensorOptions& o) -> std::function<void()> {
    at::Tensor a = at::randn({batch, m, k}, o), b = at::randn({batch, k, n}, o),
               c = at::empty({batch, m, n}, o);
    return [=]() mutable { at::bmm_out(c, a, b); };
  };
  return d;
}

// conv2d of an (n, c, h, w) input with k filters of r x r, stride, padding:
// 2 n k c r r ho wo FLOPs; input and filters read and output written once.
OpDef Conv2d(int64_t n, int64_t c, int64_t hw, int64_t k, int64_t r, int64_t stride,
             int64_t pad) {
  const int64_t out = (hw + 2 * pad - r) / stride + 1;
  OpDef d;
  d.op = "conv2d";
  d.shape =
      absl::StrCat(Dims({n, c, hw, hw}), "_", Dims({k, c, r, r}), "_s", stride, "p", pad);
  d.cost = [=](int64_t e) {
    return OpCost{
        2.0 * n * k * c * r * r * out * out,
        static_cast<double>((n * c * hw * hw + k * c * r * r + n * k * out * out) * e)};
  };
  d.make_step = [=](const at::TensorOptions& o) -> std::function<void()> {
    at::Tensor x = at::randn({n, c, hw, hw}, o), w = at::randn({k, c, r, r}, o);
    return [=]() { at::conv2d(x, w, {}, stride, pad); };
  };
  return d;
}

// Memory-bound ops over `numel` elements: `passes` tensors of that size read
// or written per step (softmax reads and writes: 2; add reads two, writes one: 3).
OpDef Elementwise(
    const std::string& op, std::vector<int64_t> shape, int passes,
    std::function<void(const at::Tensor&, const at::Tensor&, at::Tensor&)> fn) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  OpDef d;
  d.op = op;
  d.shape = absl::StrJoin(shape, "x");
  d.cost = [=](int64_t e) { return OpCost{0, static_cast<double>(passes) * numel * e}; };
  d.memory = [=](int64_t e) { return 3 * numel * e; };
  d.make_step = [=](const at::TensorOptions& o) -> std::function<void()> {
    at::Tensor a = at::randn(shape, o), b = at::randn(shape, o),
               out = at::empty(shape, o);
    return [=]() mutable { fn(a, b, out); };
  };
  return d;
}

// Copy of `mib` MiB. `op` is copy or d2d on the device (bytes read + written
// = 2 x size, against the device's memory bandwidth), or a transfer between
// host (pinned or pageable) and a GPU, whose bytes cross the host link once
// (1 x size, and no mbu: HBM's bandwidth is not the link's).
OpDef Copy(const std::string& op, int64_t mib) {
  OpDef d;
  d.op = op;
  d.shape = absl::StrCat(mib, "MiB");
  d.transfer = op != "copy";
  d.crosses_link = op.rfind("h2d", 0) == 0 || op.rfind("d2h", 0) == 0;
  const double passes = d.crosses_link ? 1 : 2;
  d.cost = [=](int64_t) { return OpCost{0, passes * mib * kMiB}; };
  // A transfer holds one copy on the device and one on the host.
  const int64_t device_copies = d.crosses_link ? 1 : 2;
  d.memory = [=](int64_t) { return device_copies * mib * kMiB; };
  d.host_memory = d.crosses_link ? mib * kMiB : 0;
  d.make_step = [=](const at::TensorOptions& o) -> std::function<void()> {
    const int64_t n =
        mib * kMiB / static_cast<int64_t>(c10::elementSize(o.dtype().toScalarType()));
    const auto host = o.device(HostDevice());
    const bool pinned = op.find("pinned") != std::string::npos;
    at::Tensor src, dst;
    if (op == "copy" || op == "d2d") {
      src = at::randn({n}, o);
      dst = at::empty({n}, o);
    } else if (op.rfind("h2d", 0) == 0) {
      src = at::randn({n}, host.pinned_memory(pinned));
      dst = at::empty({n}, o);
    } else {  // d2h
      src = at::randn({n}, o);
      dst = at::empty({n}, host.pinned_memory(pinned));
    }
    // Pinned transfers are asynchronous, as a data loader issues them.
    return [=]() mutable { dst.copy_(src, /*non_blocking=*/pinned); };
  };
  return d;
}

// Scaled-dot-product attention, causal, (B, heads, T, head size): QK^T and
// AV counted over the query-key pairs on and below the diagonal, the
// T (T + 1) / 2 that a causal kernel computes (fused kernels skip the blocks
// above it): 4 B h hs T (T + 1) / 2. The model families count the full
// T x T square instead, as their cited FLOP formulas do. Bytes: Q, K and V
// read and the output written once (a fused kernel keeps the scores on chip).
OpDef Sdpa(int64_t b, int64_t h, int64_t t, int64_t hs) {
  OpDef d;
  d.op = "sdpa";
  d.shape = absl::StrCat(Dims({b, h, t, hs}), "_causal");
  d.cost = [=](int64_t e) {
    return OpCost{4.0 * b * h * hs * (t * (t + 1) / 2.0),
                  static_cast<double>(4 * b * h * t * hs * e)};
  };
  d.memory = [=](int64_t e) { return 4 * b * h * t * hs * e + b * h * t * t * e; };
  d.make_step = [=](const at::TensorOptions& o) -> std::function<void()> {
    at::Tensor q = at::randn({b, h, t, hs}, o), k = at::randn({b, h, t, hs}, o),
               v = at::randn({b, h, t, hs}, o);
    return [=]() { Attention(q, k, v, /*causal=*/true, /*fused=*/true); };
  };
  return d;
}

// Embedding lookup of `tokens` rows of a (vocab, dim) table: each row read
// once and written once.
OpDef Embedding(int64_t vocab, int64_t dim, int64_t tokens) {
  OpDef d;
  d.op = "embedding";
  d.shape = absl::StrCat(Dims({vocab, dim}), "_", tokens);
  d.cost = [=](int64_t e) { return OpCost{0, 2.0 * tokens * dim * e + tokens * 8.0}; };
  d.memory = [=](int64_t e) { return (vocab + tokens) * dim * e; };
  d.make_step = [=](const at::TensorOptions& o) -> std::function<void()> {
    at::Tensor table = at::randn({vocab, dim}, o);
    at::Tensor ids = at::randint(0, vocab, {tokens}, o.dtype(at::kLong));
    return [=]() { at::embedding(table, ids); };
  };
  return d;
}

OpDef Noop() {
  OpDef d;
  d.op = "noop";
  d.shape = "empty";
  d.cost = [](int64_t) { return OpCost{}; };
  d.make_step = [](const at::TensorOptions&) -> std::function<void()> { return [] {}; };
  return d;
}

const std::vector<OpDef>& OpDefs() {
  static const auto* defs = [] {
    auto* v = new std::vector<OpDef>;
    // 8192: the size a GPU's datasheet matrix rate is quoted at (on a CPU the
    // peak's measurement leaves it out: a step takes seconds).
    for (int64_t n : {256, 512, 1024, 2048, 4096, 8192}) v->push_back(Matmul(n, n, n));
    // Transformer/small's projections at batch 4 x seq 512 tokens.
    v->push_back(Matmul(2048, 768, 768));    // q, k, v, o
    v->push_back(Matmul(2048, 768, 3072));   // w1, w3
    v->push_back(Matmul(2048, 3072, 768));   // w2
    v->push_back(Matmul(2048, 768, 10000));  // LM head
    // Its attention: 4 x 12 heads, QK^T and AV.
    v->push_back(Bmm(48, 512, 64, 512));
    v->push_back(Bmm(48, 512, 512, 64));
    // ResNet-50's convolutions at batch 32: the stem, a 3x3 of each stage, a 1x1.
    v->push_back(Conv2d(32, 3, 224, 64, 7, 2, 3));
    v->push_back(Conv2d(32, 64, 56, 64, 3, 1, 1));
    v->push_back(Conv2d(32, 128, 28, 128, 3, 1, 1));
    v->push_back(Conv2d(32, 256, 14, 256, 3, 1, 1));
    v->push_back(Conv2d(32, 512, 7, 512, 3, 1, 1));
    v->push_back(Conv2d(32, 64, 56, 256, 1, 1, 0));
    v->push_back(Elementwise("softmax", {48, 512, 512}, 2,
                             [](const at::Tensor& a, const at::Tensor&, at::Tensor& out) {
                               at::_softmax_out(out, a, -1, false);
                             }));
    v->push_back(Elementwise("layer_norm", {2048, 768}, 2,
                             [](const at::Tensor& a, const at::Tensor&, at::Tensor&) {
                               at::layer_norm(a, {768});
                             }));
    v->push_back(Elementwise("gelu", {2048, 3072}, 2,
                             [](const at::Tensor& a, const at::Tensor&, at::Tensor& out) {
                               at::gelu_out(out, a);
                             }));
    v->push_back(Elementwise("add", {2048, 3072}, 3,
                             [](const at::Tensor& a, const at::Tensor& b,
                                at::Tensor& out) { at::add_out(out, a, b); }));
    v->push_back(Copy("copy", 256));
    // 2 GiB: far past any cache (a GPU's L2 is 50-60 MB), for HBM's bandwidth.
    v->push_back(Copy("copy", 2048));
    v->push_back(Sdpa(4, 12, 512, 64));
    v->push_back(Embedding(10000, 768, 2048));
    for (const char* op :
         {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d"}) {
      v->push_back(Copy(op, 256));
    }
    v->push_back(Noop());
    return v;
  }();
  return *defs;
}

absl::StatusOr<const OpDef*> FindOp(const std::string& op, const std::string& shape) {
  std::vector<std::string> valid;
  for (const OpDef& d : OpDefs()) {
    if (d.op == op && d.shape == shape) return &d;
    valid.push_back(absl::StrCat(d.op, "/", d.shape));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown op '", op, "/", shape, "'; valid: ", absl::StrJoin(valid, ", ")));
}

absl::StatusOr<Plan> PlanOps(const BenchSpec& s) {
  absl::StatusOr<const OpDef*> d = FindOp(s.size, s.phase);
  if (!d.ok()) return d.status();
  const int64_t e = DtypeBytes(s.dtype);
  const OpCost cost = (*d)->cost(e);
  Plan plan;
  plan.flops_per_step = cost.flops;
  plan.bytes_per_step = cost.bytes;
  plan.bytes_cross_host_link = (*d)->crosses_link;
  if ((*d)->op == "conv2d") plan.count_beyond_arithmetic = kDirectConvolutionCount;
  plan.memory.activations =
      (*d)->memory ? (*d)->memory(e) : static_cast<int64_t>(cost.bytes);
  plan.memory.host_build = (*d)->host_memory;
  return plan;
}

std::unique_ptr<Workload> BuildOps(const BenchSpec& s) {
  const OpDef* d = FindOp(s.size, s.phase).value();
  return std::make_unique<FnWorkload>(
      d->make_step(at::TensorOptions().dtype(s.dtype).device(s.device)));
}

}  // namespace

std::vector<OpShape> OpShapes() {
  std::vector<OpShape> out;
  for (const OpDef& d : OpDefs()) out.push_back({d.op, d.shape});
  return out;
}

std::vector<MatmulShape> OpsMatmulShapes() {
  std::vector<MatmulShape> out;
  for (const OpDef& d : OpDefs()) {
    if (d.op == "matmul") out.push_back(d.mkn);
  }
  return out;
}

absl::StatusOr<OpCost> OpCostFor(const std::string& op, const std::string& shape,
                                 c10::ScalarType dtype) {
  absl::StatusOr<const OpDef*> d = FindOp(op, shape);
  if (!d.ok()) return d.status();
  return (*d)->cost(DtypeBytes(dtype));
}

Family OpsFamily() {
  Family f;
  f.name = "Ops";
  for (const OpDef& d : OpDefs()) {
    if (std::find(f.sizes.begin(), f.sizes.end(), d.op) == f.sizes.end())
      f.sizes.push_back(d.op);
    // An op's shape stands where a model's phase does: Ops/op/shape/...
    Case c{d.op, Phase{d.shape, PhaseKind::kInference, Shape::kNone}};
    c.sweeps_dtype = d.op != "noop";
    // Transfers wait for the host, and a graph of nothing is no graph.
    c.graphs = !d.transfer && d.op != "noop";
    c.tf32 = d.op == "matmul" || d.op == "bmm" || d.op == "conv2d" || d.op == "sdpa";
    c.needs_host_transfers = d.transfer;
    c.unit = d.op == "noop" ? benchmark::kNanosecond : benchmark::kMicrosecond;
    f.cases.push_back(c);
  }
  f.suite = {"matmul/2048x2048/", "copy/256MiB/", "noop/empty/"};
  f.peak_matmul_shapes = OpsMatmulShapes();
  f.phase_before_device = true;
  f.plan = PlanOps;
  f.build = BuildOps;
  return f;
}
LTB_REGISTER_FAMILY(OpsFamily, 10);

}  // namespace ltb
