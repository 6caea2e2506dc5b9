// Linear layers with quantised weights for inference (--quant), through the
// kernels LibTorch ships as ATen operators: int8 weight-only
// (_weight_int8pack_mm), int4 weight-only in groups (_weight_int4pack_mm and
// its CPU twin), and FBGEMM's dynamic int8 linear. Models build their linear
// layers as PackableLinear; PrepareModel quantises every one of them (and a
// tied output head, as a copy) once, from the loaded weights, outside the
// timed steps.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "family/spec.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ltb {

// Whether `spec`'s --quant can run: its phase, its device's kernels, its
// dtype; `why` says what is missing when it cannot.
bool CanQuantize(const BenchSpec& spec, std::string* why = nullptr);

// What --quant adds to a model's plan: the bytes of the quantised copies,
// held beside the loaded weights they are made from (at most every
// parameter, a tied head's copy included), and why mfu does not apply
// (empty: it does). An Unimplemented error, with the reason, where
// CanQuantize says no; nothing for --quant=none.
struct QuantCost {
  int64_t held_bytes = 0;
  std::string mfu_left_out;
};
absl::StatusOr<QuantCost> PlanQuant(const BenchSpec& spec, int64_t params);

// A weight (out, in) quantised, before any kernel's packing: what the
// kernels compute with, and what the tests dequantise.
struct QuantizedWeight {
  Quant quant;
  // (out, in): int8 in [-127, 127] (int8, int8dyn); int32 in [0, 15] (int4).
  at::Tensor values;
  // int8, int8dyn: (out), max |w| of the row / 127. int4: (out, in / group),
  // (max - min) of the group / 15. In the dtype the kernel takes them in.
  at::Tensor scales;
  // int4: (out, in / group), the value of 8: w = (q - 8) * scale + zero.
  at::Tensor zeros;
};

// Quantises `weight` (out, in), computing in fp32; scales and zeros end in
// `dtype` (int8dyn: fp32). int8: per output channel, symmetric. int4: groups
// of quant.group input elements, asymmetric (min to max in 16 steps), as
// torchao's int4 weight-only and gpt-fast do. An error when `in` is not a
// multiple of the group.
QuantizedWeight QuantizeWeight(const at::Tensor& weight, const Quant& quant,
                               c10::ScalarType dtype);

// The weight the values and scales stand for, (out, in) in fp32.
at::Tensor Dequantize(const QuantizedWeight& q);

// One linear layer with a quantised weight, packed for its kernel.
class QuantizedLinear {
 public:
  QuantizedLinear() = default;
  // weight (out, in) and bias (out, or undefined) in the run's dtype, on its
  // device; throws where the kernel cannot take the shape or dtype.
  QuantizedLinear(const at::Tensor& weight, const at::Tensor& bias, const Quant& quant);

  bool quantized() const { return !quant_.none(); }
  // x (..., in) -> (..., out), in x's dtype.
  at::Tensor operator()(const at::Tensor& x) const;
  // Bytes it holds and a step reads: the packed weight, its scales and
  // zeros (and padding), the bias.
  int64_t bytes() const { return bytes_; }

 private:
  Quant quant_;
  int64_t in_ = 0, out_ = 0;
  at::Tensor weight_;  // int8: (out, in) int8; int4: the kernel's packing
  at::Tensor scales_;  // int8: (out); int4: (in / group, out padded, 2) scales and zeros
  at::Tensor bias_;
  c10::IValue prepacked_;          // int8dyn: FBGEMM's packed weight and bias
  bool int4_cpu_packing_ = false;  // the CPU kernel's packing (else the GPUs')
  int64_t bytes_ = 0;
};

// What quantising changed in a decode step's reads: `removed` bytes of
// weights it no longer reads, `added` bytes of quantised ones it reads now.
struct WeightChange {
  int64_t removed = 0;
  int64_t added = 0;
};

// A module whose linear layers can be quantised (PackableLinear, TiedHead).
class Quantizable {
 public:
  virtual ~Quantizable() = default;
  // After the weights are final and on the run's device and dtype; frees
  // the unquantised weight where nothing else reads it.
  virtual WeightChange Quantize(const Quant& quant) = 0;
};

// Quantises every Quantizable module of `module` (itself included) as
// spec.quant says; an error when CanQuantize says no, or when the model has
// nothing to quantise.
absl::StatusOr<WeightChange> QuantizeLinears(torch::nn::Module& module,
                                             const BenchSpec& spec);

}  // namespace ltb
