#include "workloads/profiled_flops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstring>
#include <memory>
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

// An operator being counted: its FLOPs, or (a convolution) its FLOPs per
// output element, known once it has run.
struct Counted : at::ObserverContext {
  bool outermost = false;
  double flops = 0;
  double per_output = 0;
};

struct Tally {
  int depth = 0;  // counted operators open on this thread
  double flops = 0;
};
thread_local Tally tally;

enum class Kind { kNone, kMatmul, kConvolution, kTransposedConvolution, kAttention };

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
  if (matmuls.count(n)) return Kind::kMatmul;
  if (convolutions.count(n)) return Kind::kConvolution;
  if (transposed.count(n)) return Kind::kTransposedConvolution;
  if ((n == "aten::scaled_dot_product_attention" ||
       absl::StartsWith(n, "aten::_scaled_dot_product_")) &&
      !absl::EndsWith(n, "_backward")) {
    return Kind::kAttention;
  }
  return Kind::kNone;
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
  if (kind == Kind::kNone) return nullptr;
  auto c = std::make_unique<Counted>();
  if (tally.depth == 0) {
    if (!Measure(kind, fn.name(), Arguments(fn), c.get())) return nullptr;
    c->outermost = true;
  }
  ++tally.depth;
  return c;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (context == nullptr) return;
  --tally.depth;
  const auto* c = static_cast<const Counted*>(context);
  if (!c->outermost) return;
  double flops = c->flops;
  if (c->per_output > 0) {
    const std::vector<c10::IValue>& out = fn.outputs();
    if (!out.empty() && out.front().isTensor() && out.front().toTensor().defined()) {
      flops += c->per_output * static_cast<double>(out.front().toTensor().numel());
    }
  }
  tally.flops += flops;
}

}  // namespace

double StepFlops(const std::function<void()>& fn) {
  tally = Tally{};
  const at::CallbackHandle handle =
      at::addThreadLocalCallback(at::RecordFunctionCallback(OnStart, OnEnd)
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
  return tally.flops;
}

}  // namespace ltb
