#include "layers/quant.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_convert_weight_to_int4pack.h>
#include <ATen/ops/_convert_weight_to_int4pack_for_cpu.h>
#include <ATen/ops/_weight_int4pack_mm.h>
#include <ATen/ops/_weight_int4pack_mm_for_cpu.h>
#include <ATen/ops/_weight_int8pack_mm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/full.h>
#include <ATen/ops/quantize_per_channel.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/dtype.h"
#include "device/backend.h"
#include "device/device.h"

namespace ltb {
namespace {

std::string DtypeNames(const std::vector<c10::ScalarType>& dtypes) {
  std::vector<std::string> names;
  for (const c10::ScalarType t : dtypes) names.push_back(DtypeName(t));
  return absl::StrJoin(names, ", ");
}

bool Has(const std::vector<c10::ScalarType>& dtypes, c10::ScalarType t) {
  return std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end();
}

// The int4 kernels take output widths in tiles of 16 (padded with rows that
// dequantise to zero, and cut from the output).
constexpr int64_t kInt4Rows = 16;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// A registered operator called through the dispatcher's boxed interface:
// FBGEMM's packed weights are a TorchScript class, which the typed C++ API
// has no header for.
c10::IValue CallOp(const char* name, torch::jit::Stack stack) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  op.callBoxed(&stack);
  return stack.front();
}

}  // namespace

bool CanQuantize(const BenchSpec& spec, std::string* why) {
  std::string reason;
  const Quant& q = spec.quant;
  const Capabilities caps = BackendOf(spec.device).Caps();
  const std::string device = DeviceName(spec.device);
  const std::string dtype = DtypeName(spec.dtype);
  if (q.none()) {
    // nothing to check
  } else if (spec.training()) {
    reason = absl::StrCat(
        "--quant=", q.Name(),
        ": quantised weights are for inference; LibTorch's quantised linear kernels "
        "have no backward, so training phases run unquantised (--quant=none)");
  } else if (spec.pack_cpu_linears) {
    reason =
        "--quant and --cpu_linear=onednn are two paths for the same layers: pick one";
  } else if (q.kind == QuantKind::kInt8) {
    if (caps.int8_weight_dtypes.empty()) {
      reason = absl::StrCat(
          "--quant=int8: LibTorch has no int8 weight kernel "
          "(_weight_int8pack_mm) for ",
          device);
    } else if (!Has(caps.int8_weight_dtypes, spec.dtype)) {
      reason = absl::StrCat("--quant=int8: LibTorch's int8 weight kernel on ", device,
                            " takes ", DtypeNames(caps.int8_weight_dtypes),
                            " activations, not ", dtype);
    }
  } else if (q.kind == QuantKind::kInt4) {
    if (caps.int4_weight_dtypes.empty()) {
      reason =
          absl::StrCat("--quant=int4: LibTorch has no int4 weight kernel for ", device);
    } else if (!Has(caps.int4_weight_dtypes, spec.dtype)) {
      reason = absl::StrCat("--quant=int4: LibTorch's int4 weight kernel on ", device,
                            " takes ", DtypeNames(caps.int4_weight_dtypes),
                            " activations, not ", dtype);
    } else if (std::find(std::begin(kQuantGroups), std::end(kQuantGroups), q.group) ==
               std::end(kQuantGroups)) {
      reason = absl::StrCat("--quant_group=", q.group, ": valid: 32, 64, 128");
    }
  } else if (q.kind == QuantKind::kInt8Dyn) {
    if (!caps.dynamic_int8_linear) {
      reason = absl::StrCat(
          "--quant=int8dyn: FBGEMM's dynamic int8 linear runs on x86 CPUs with a "
          "LibTorch "
          "built with FBGEMM, not on ",
          device);
    } else if (spec.dtype != c10::kFloat) {
      reason = absl::StrCat(
          "--quant=int8dyn: FBGEMM's dynamic int8 linear takes fp32 activations (it "
          "quantises them itself), not ",
          dtype);
    }
  }
  if (why != nullptr) *why = reason;
  return reason.empty();
}

QuantizedWeight QuantizeWeight(const at::Tensor& weight, const Quant& quant,
                               c10::ScalarType dtype) {
  TORCH_CHECK(weight.dim() == 2, "a linear weight is 2-D, not ", weight.dim(), "-D");
  const at::Tensor w = weight.detach().to(c10::kFloat);
  QuantizedWeight q;
  q.quant = quant;
  if (quant.kind == QuantKind::kInt8 || quant.kind == QuantKind::kInt8Dyn) {
    const c10::ScalarType scale_dtype =
        quant.kind == QuantKind::kInt8Dyn ? c10::kFloat : dtype;
    // Scales as the kernel will read them, so that q * scale is what it computes.
    q.scales = (w.abs().amax(1) / 127).clamp_min(1e-12).to(scale_dtype);
    q.values = (w / q.scales.to(c10::kFloat).unsqueeze(1))
                   .round()
                   .clamp(-127, 127)
                   .to(c10::kChar);
    return q;
  }
  TORCH_CHECK(quant.kind == QuantKind::kInt4, "nothing to quantise for --quant=none");
  const int64_t out = w.size(0), in = w.size(1), g = quant.group;
  TORCH_CHECK(g > 0 && in % g == 0, "int4 in groups of ", g,
              " needs the layer's input width (", in, ") to be a multiple of ", g,
              ": lower --quant_group");
  const at::Tensor groups = w.reshape({out, in / g, g});
  const at::Tensor lo = groups.amin(-1), hi = groups.amax(-1);  // (out, in / g)
  q.scales = ((hi - lo).clamp_min(1e-6) / 15).to(dtype);
  const at::Tensor scales = q.scales.to(c10::kFloat);
  q.zeros = (lo + scales * 8).to(dtype);
  const at::Tensor low = q.zeros.to(c10::kFloat) - scales * 8;  // the value of q = 0
  q.values = ((groups - low.unsqueeze(-1)) / scales.unsqueeze(-1))
                 .round()
                 .clamp(0, 15)
                 .to(c10::kInt)
                 .reshape({out, in});
  return q;
}

at::Tensor Dequantize(const QuantizedWeight& q) {
  const at::Tensor values = q.values.to(c10::kFloat);
  const at::Tensor scales = q.scales.to(c10::kFloat);
  if (q.quant.kind != QuantKind::kInt4) return values * scales.unsqueeze(1);
  const int64_t out = values.size(0), in = values.size(1), g = q.quant.group;
  const at::Tensor groups = values.reshape({out, in / g, g});
  return ((groups - 8) * scales.unsqueeze(-1) + q.zeros.to(c10::kFloat).unsqueeze(-1))
      .reshape({out, in});
}

QuantizedLinear::QuantizedLinear(const at::Tensor& weight, const at::Tensor& bias,
                                 const Quant& quant)
    : quant_(quant), in_(weight.size(1)), out_(weight.size(0)) {
  const c10::ScalarType dtype = weight.scalar_type();
  const c10::Device device = weight.device();
  if (bias.defined()) {
    bias_ = bias.detach();
    bytes_ += bias_.nbytes();
  }
  const QuantizedWeight q = QuantizeWeight(weight, quant, dtype);
  switch (quant.kind) {
    case QuantKind::kNone:
      throw std::invalid_argument("QuantizedLinear with --quant=none");
    case QuantKind::kInt8:
      weight_ = q.values.contiguous();
      scales_ = q.scales.contiguous();
      bytes_ += weight_.nbytes() + scales_.nbytes();
      break;
    case QuantKind::kInt4: {
      const int64_t rows = RoundUp(out_, kInt4Rows), pad = rows - out_;
      // Padding rows: q = 8, scale 1, zero 0 (weights of zero).
      at::Tensor values = at::constant_pad_nd(q.values, {0, 0, 0, pad}, 8);
      const at::Tensor scales = at::constant_pad_nd(q.scales, {0, 0, 0, pad}, 1);
      const at::Tensor zeros = at::constant_pad_nd(q.zeros, {0, 0, 0, pad}, 0);
      // (in / group, rows, 2): each group's scale and zero, as the kernels read them.
      scales_ = at::cat({scales.unsqueeze(-1), zeros.unsqueeze(-1)}, 2)
                    .transpose(0, 1)
                    .contiguous();
      int4_cpu_packing_ = BackendOf(device).Caps().int4_cpu_packing;
      if (int4_cpu_packing_) {
        weight_ = at::_convert_weight_to_int4pack_for_cpu(values.contiguous(), 8);
      } else {
        TORCH_CHECK(in_ % 32 == 0, "int4 on ", DeviceName(device),
                    " needs input widths that are multiples of 32, not ", in_);
        const int64_t tiles = in_ % 128 == 0 ? 8 : in_ % 64 == 0 ? 4 : 2;
        // Two values a byte, the even column in the high half.
        const at::Tensor pairs = values.slice(1, 0, in_, 2)
                                     .bitwise_left_shift(4)
                                     .bitwise_or(values.slice(1, 1, in_, 2))
                                     .to(c10::kByte);
        weight_ = at::_convert_weight_to_int4pack(pairs.contiguous(), tiles);
      }
      bytes_ += weight_.nbytes() + scales_.nbytes();
      break;
    }
    case QuantKind::kInt8Dyn: {
      TORCH_CHECK(dtype == c10::kFloat,
                  "FBGEMM's dynamic int8 linear takes fp32 weights");
      const at::Tensor scales = q.scales.to(c10::kDouble).cpu();
      const at::Tensor qweight = at::quantize_per_channel(
          Dequantize(q).cpu(), scales, at::zeros({out_}, at::kLong), 0, c10::kQInt8);
      prepacked_ = CallOp("quantized::linear_prepack",
                          {c10::IValue(qweight),
                           bias_.defined() ? c10::IValue(bias_.cpu()) : c10::IValue()});
      // FBGEMM's packed matrix, its per-channel scales, zero points and
      // column offsets (4 bytes each a row), the fp32 bias.
      bytes_ += out_ * in_ + out_ * 12;
      break;
    }
  }
}

at::Tensor QuantizedLinear::operator()(const at::Tensor& x) const {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out_;
  const at::Tensor x2 = x.reshape({-1, in_}).contiguous();  // (M, in)
  at::Tensor y;
  switch (quant_.kind) {
    case QuantKind::kNone:
      throw std::logic_error("QuantizedLinear without a quantised weight");
    case QuantKind::kInt8:
      y = at::_weight_int8pack_mm(x2, weight_, scales_);
      break;
    case QuantKind::kInt4:
      y = int4_cpu_packing_
              ? at::_weight_int4pack_mm_for_cpu(x2, weight_, quant_.group, scales_)
              : at::_weight_int4pack_mm(x2, weight_, quant_.group, scales_);
      if (y.size(1) != out_) y = y.narrow(1, 0, out_);
      break;
    case QuantKind::kInt8Dyn:
      // reduce_range: 7-bit activations, as quantize_dynamic's x86 engines
      // run them (the 8-bit products' pairwise sums cannot saturate).
      return CallOp("quantized::linear_dynamic",
                    {c10::IValue(x2), prepacked_, c10::IValue(true)})
          .toTensor()
          .view(shape);
  }
  if (bias_.defined()) y = y + bias_;
  return y.reshape(shape);  // (..., out)
}

absl::StatusOr<QuantCost> PlanQuant(const BenchSpec& spec, int64_t params) {
  QuantCost cost;
  if (spec.quant.none()) return cost;
  std::string why;
  if (!CanQuantize(spec, &why)) return absl::UnimplementedError(why);
  // int4: half a byte a weight, and a scale and a zero a group.
  const double per_weight = spec.quant.kind == QuantKind::kInt4
                                ? 0.5 + 2.0 *
                                            static_cast<double>(DtypeBytes(spec.dtype)) /
                                            static_cast<double>(spec.quant.group)
                                : 1.0;
  cost.held_bytes = static_cast<int64_t>(static_cast<double>(params) * per_weight);
  if (spec.quant.kind == QuantKind::kInt8Dyn) {
    cost.mfu_left_out =
        "FBGEMM's dynamic int8 linear multiplies in int8, whose peak the suite does not "
        "measure";
  }
  return cost;
}

absl::StatusOr<WeightChange> QuantizeLinears(torch::nn::Module& module,
                                             const BenchSpec& spec) {
  std::string why;
  if (!CanQuantize(spec, &why)) return absl::FailedPreconditionError(why);
  WeightChange total;
  int quantized = 0;
  for (const std::shared_ptr<torch::nn::Module>& m :
       module.modules(/*include_self=*/true)) {
    if (auto* layer = dynamic_cast<Quantizable*>(m.get())) {
      const WeightChange change = layer->Quantize(spec.quant);
      total.removed += change.removed;
      total.added += change.added;
      ++quantized;
    }
  }
  if (quantized == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--quant=", spec.quant.Name(), ": ", module.name(),
                     " has no linear layers to quantise"));
  }
  return total;
}

}  // namespace ltb
