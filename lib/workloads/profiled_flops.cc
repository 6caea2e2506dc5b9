#include "workloads/profiled_flops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/match.h"

namespace ltb {

double ProfiledFlops(const std::function<void()>& fn, const std::set<std::string>& ops) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO,
                                    /*report_input_shapes=*/true,
                                    /*profile_memory=*/false, /*with_stack=*/false,
                                    /*with_flops=*/true);
  const std::set<prof::ActivityType> activities = {prof::ActivityType::CPU};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  fn();
  const auto result = torch::autograd::profiler::disableProfiler();
  double flops = 0;
  for (const auto& event : result->events()) {
    if (ops.empty() || ops.count(event.name()))
      flops += static_cast<double>(event.flops());
  }
  return flops;
}

namespace {

// The profiler's own counts miss what a model file runs: a traced model
// calls aten::_convolution (the profiler counts aten::conv2d alone), fused
// attention runs no matmul it counts, and it adds element-wise muls and adds
// that the suite's FLOPs leave out. So the operators are counted here, from
// their inputs' shapes (and a convolution's output, which its stride,
// padding and dilation decide), each once: operators called inside a
// counted one are its own work.

// An operator being counted: its FLOPs, or (a convolution, a linear layer
// counted by its output) its FLOPs per output element, known once it has
// run. Or an operator that may compute uncounted (a quantised convolution):
// uncounted where no counted operator ran inside it.
struct Counted : at::ObserverContext {
  bool outermost = false;
  double flops = 0;
  double per_output = 0;
  bool candidate = false;
  int64_t counted_before = 0;  // the thread's counted operators at its start
};

// Per thread: the counted operators open, and how many have ended. The
// step's total is shared: a model's forked work (torch.jit.fork) runs on
// the inter-op threads.
struct Depth {
  int open = 0;
  int64_t ended = 0;
};
thread_local Depth depth;

struct Tally {
  std::mutex mutex;
  double flops = 0;
  std::set<std::string> uncounted;
};
Tally& SharedTally() {
  static auto* tally = new Tally;
  return *tally;
}

enum class Kind {
  kNone,
  kMatmul,
  kConvolution,
  kTransposedConvolution,
  kAttention,
  kLinearByOutput
};

Kind KindOf(const char* name) {
  static const std::set<std::string, std::less<>> matmuls = {
      "aten::mm",    "aten::addmm",   "aten::_addmm_activation",
      "aten::bmm",   "aten::baddbmm", "aten::mv",
      "aten::addmv", "aten::linear"};
  static const std::set<std::string, std::less<>> convolutions = {
      "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
      "aten::_convolution"};
  static const std::set<std::string, std::less<>> transposed = {
      "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"};
  const absl::string_view n(name);
  // Packing or unpacking weights computes nothing counted.
  if (absl::StrContains(n, "prepack") || absl::StrContains(n, "unpack"))
    return Kind::kNone;
  if (matmuls.count(n)) return Kind::kMatmul;
  if (convolutions.count(n)) return Kind::kConvolution;
  if (transposed.count(n)) return Kind::kTransposedConvolution;
  if ((n == "aten::scaled_dot_product_attention" ||
       absl::StartsWith(n, "aten::_scaled_dot_product_")) &&
      !absl::EndsWith(n, "_backward")) {
    return Kind::kAttention;
  }
  // Linear layers whose weights are packed (quantised, or prepacked for a
  // library): (..., K) in, (..., N) out, 2 K per output element.
  for (const char* prefix :
       {"quantized::linear", "aten::_weight_int8pack_mm", "aten::_weight_int4pack_mm",
        "aten::fbgemm_linear", "prepacked::linear", "aten::mkldnn_linear",
        "aten::_mkl_linear"}) {
    if (absl::StartsWith(n, prefix)) return Kind::kLinearByOutput;
  }
  return Kind::kNone;
}

// An operator that may multiply matrices or convolve, whose FLOPs are not
// counted unless a counted operator runs inside it.
bool MayComputeUncounted(absl::string_view n) {
  if (absl::StrContains(n, "prepack") || absl::StrContains(n, "unpack")) return false;
  if (absl::StartsWith(n, "aten::") &&
      (n == "aten::matmul" || n == "aten::einsum" || n == "aten::tensordot")) {
    return false;  // wrappers of counted operators
  }
  // (conv1d, qconv2d, conv_transpose, mkldnn_convolution; not _convert_...)
  for (const char* part : {"conv1d", "conv2d", "conv3d", "convolution", "conv_transpose",
                           "linear", "matmul", "gemm", "_mm", "attention"}) {
    if (absl::StrContains(n, part)) return true;
  }
  return false;
}

const at::Tensor* TensorAt(c10::ArrayRef<const c10::IValue> inputs, size_t i) {
  if (i >= inputs.size() || !inputs[i].isTensor()) return nullptr;
  const at::Tensor& t = inputs[i].toTensor();
  return t.defined() ? &t : nullptr;
}

// Fills `c` from the operator's inputs; false where they do not say (the
// operators inside it are counted instead).
bool Measure(Kind kind, const char* name, c10::ArrayRef<const c10::IValue> in,
             Counted* c) {
  const absl::string_view n(name);
  switch (kind) {
    case Kind::kMatmul: {
      // (..., K) by (K, N) or (N, K): 2 K N per row of the first operand.
      const bool bias_first = n == "aten::addmm" || n == "aten::_addmm_activation" ||
                              n == "aten::baddbmm" || n == "aten::addmv";
      const at::Tensor* a = TensorAt(in, bias_first ? 1 : 0);
      const at::Tensor* b = TensorAt(in, bias_first ? 2 : 1);
      if (a == nullptr || b == nullptr || a->dim() == 0) return false;
      const auto elements = static_cast<double>(a->numel());
      double columns = 1;  // mv, addmv: one output a row
      if (n == "aten::linear") {
        columns = b->dim() == 2 ? static_cast<double>(b->size(0)) : 1;
      } else if (b->dim() >= 2) {
        columns = static_cast<double>(b->size(-1));
      }
      c->flops = 2 * elements * columns;
      return true;
    }
    case Kind::kConvolution: {
      const at::Tensor* input = TensorAt(in, 0);
      const at::Tensor* weight = TensorAt(in, 1);
      if (input == nullptr || weight == nullptr || weight->dim() < 3) return false;
      // convolution and _convolution carry `transposed` as their 7th input.
      const bool transposed = (n == "aten::convolution" || n == "aten::_convolution") &&
                              in.size() > 6 && in[6].isBool() && in[6].toBool();
      // (C_out, C_in / groups, k...): 2 (C_in / groups) k... per output.
      // Transposed, (C_in, C_out / groups, k...): 2 (C_out / groups) k...
      // per input element.
      const double per_element = 2.0 * static_cast<double>(weight->numel()) /
                                 static_cast<double>(weight->size(0));
      if (transposed) {
        c->flops = per_element * static_cast<double>(input->numel());
      } else {
        c->per_output = per_element;
      }
      return true;
    }
    case Kind::kTransposedConvolution: {
      const at::Tensor* input = TensorAt(in, 0);
      const at::Tensor* weight = TensorAt(in, 1);
      if (input == nullptr || weight == nullptr || weight->dim() < 3) return false;
      c->flops = 2.0 * static_cast<double>(weight->numel()) /
                 static_cast<double>(weight->size(0)) *
                 static_cast<double>(input->numel());
      return true;
    }
    case Kind::kAttention: {
      // query (..., L, E), key (..., S, E), value (..., S, Ev): Q K^T and
      // the weights times V over every query-key pair.
      const at::Tensor* q = TensorAt(in, 0);
      const at::Tensor* k = TensorAt(in, 1);
      const at::Tensor* v = TensorAt(in, 2);
      if (q == nullptr || k == nullptr || v == nullptr || q->dim() < 2 || k->dim() < 2 ||
          v->dim() < 2 || q->size(-1) == 0) {
        return false;
      }
      const auto rows = static_cast<double>(q->numel() / q->size(-1));  // (..., L)
      const auto keys = static_cast<double>(k->size(-2));
      c->flops = 2 * rows * keys * static_cast<double>(q->size(-1) + v->size(-1));
      return true;
    }
    case Kind::kLinearByOutput: {
      const at::Tensor* x = TensorAt(in, 0);
      if (x == nullptr || x->dim() == 0) return false;
      c->per_output = 2.0 * static_cast<double>(x->size(-1));
      return true;
    }
    case Kind::kNone:
      break;
  }
  return false;
}

// The operator's arguments: TorchScript's interpreter may hand the
// callbacks more of its stack than the call's (seen: the value below a
// fused attention's arguments), which end at the stack's top.
c10::ArrayRef<const c10::IValue> Arguments(const at::RecordFunction& fn) {
  const c10::ArrayRef<const c10::IValue> in = fn.inputs();
  if (const std::optional<c10::OperatorName> name = fn.operator_name()) {
    if (const auto op = c10::Dispatcher::singleton().findSchema(*name)) {
      const size_t n = op->schema().arguments().size();
      if (in.size() > n) return in.slice(in.size() - n);
    }
  }
  return in;
}

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  const Kind kind = KindOf(fn.name());
  if (kind == Kind::kNone) {
    if (depth.open > 0 || !MayComputeUncounted(fn.name())) return nullptr;
    auto c = std::make_unique<Counted>();
    c->candidate = true;
    c->counted_before = depth.ended;
    return c;
  }
  auto c = std::make_unique<Counted>();
  if (depth.open == 0) {
    if (!Measure(kind, fn.name(), Arguments(fn), c.get())) return nullptr;
    c->outermost = true;
  }
  ++depth.open;
  return c;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (context == nullptr) return;
  const auto* c = static_cast<const Counted*>(context);
  if (c->candidate) {
    if (depth.ended == c->counted_before) {
      Tally& tally = SharedTally();
      const std::lock_guard<std::mutex> lock(tally.mutex);
      tally.uncounted.insert(fn.name());
    }
    return;
  }
  --depth.open;
  if (!c->outermost) return;
  ++depth.ended;
  double flops = c->flops;
  if (c->per_output > 0) {
    const std::vector<c10::IValue>& out = fn.outputs();
    if (!out.empty() && out.front().isTensor() && out.front().toTensor().defined()) {
      flops += c->per_output * static_cast<double>(out.front().toTensor().numel());
    }
  }
  Tally& tally = SharedTally();
  const std::lock_guard<std::mutex> lock(tally.mutex);
  tally.flops += flops;
}

}  // namespace

CountedFlops StepFlops(const std::function<void()>& fn) {
  Tally& tally = SharedTally();
  {
    const std::lock_guard<std::mutex> lock(tally.mutex);
    tally.flops = 0;
    tally.uncounted.clear();
  }
  depth = Depth{};
  // Global: a forked task's operators run on the inter-op threads.
  const at::CallbackHandle handle =
      at::addGlobalCallback(at::RecordFunctionCallback(OnStart, OnEnd)
                                .needsInputs(true)
                                .needsOutputs(true)
                                .scopes({at::RecordScope::FUNCTION}));
  try {
    fn();
  } catch (...) {
    at::removeCallback(handle);
    throw;
  }
  at::removeCallback(handle);
  const std::lock_guard<std::mutex> lock(tally.mutex);
  return {tally.flops, {tally.uncounted.begin(), tally.uncounted.end()}};
}

}  // namespace ltb
