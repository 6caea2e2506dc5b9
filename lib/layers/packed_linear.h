// Linear layers for CPU inference through oneDNN, with each weight reordered
// into oneDNN's layout once, as deployments (and torch.compile's CPU
// freezing) do: the --cpu_linear=onednn setting. Models build their linear
// layers as PackableLinear (parameter names stay a Linear's: weight, bias);
// PrepareModel packs every one of them when a benchmark asks for it.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "layers/quant.h"

namespace ltb {

// Whether LibTorch can run packed linears for `device` and `dtype`; `why`
// says what is missing when it cannot.
bool CanPackLinear(const c10::Device& device, c10::ScalarType dtype,
                   std::string* why = nullptr);

// One weight (and bias) in oneDNN's layout.
class PackedLinear {
 public:
  PackedLinear() = default;
  PackedLinear(const at::Tensor& weight, const at::Tensor& bias);

  bool packed() const { return weight_.defined(); }
  // x (..., in) -> (..., out), dense in and out.
  at::Tensor operator()(const at::Tensor& x) const;

 private:
  at::Tensor weight_, bias_;  // oneDNN layout
  int64_t in_ = 0, out_ = 0;
};

// A module that can pack its linear layers for CPU inference; PackLinears
// calls it on every module of a model.
class CpuPackable {
 public:
  virtual ~CpuPackable() = default;
  // After the weights are final: later changes to them are not seen.
  virtual void PackForCpuInference() = 0;
};

// torch::nn::Linear, packed or quantised on request.
class PackableLinearImpl : public torch::nn::LinearImpl,
                           public CpuPackable,
                           public Quantizable {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  at::Tensor forward(const at::Tensor& x);
  void PackForCpuInference() override;
  // Frees the unquantised weight and bias (left empty, in their dtype).
  WeightChange Quantize(const Quant& quant) override;

 private:
  PackedLinear packed_;
  QuantizedLinear quantized_;
};
TORCH_MODULE(PackableLinear);

// An output layer multiplying by another layer's weight (a head tied to the
// embedding): no parameter of its own, so the model's names stay the
// reference's. Packed or quantised, it holds a copy and leaves the weight
// to the layer that owns it (the lookup keeps reading it in the run's dtype).
class TiedHeadImpl : public torch::nn::Module, public CpuPackable, public Quantizable {
 public:
  // `weight` (out, in) shares the owner's tensor, so that it follows the
  // model's moves, casts and loaded checkpoints (all through set_data).
  explicit TiedHeadImpl(at::Tensor weight) : weight_(std::move(weight)) {}
  at::Tensor forward(const at::Tensor& x);
  void PackForCpuInference() override;
  // A decode step reads the quantised copy instead of the whole weight.
  WeightChange Quantize(const Quant& quant) override;

 private:
  at::Tensor weight_;
  PackedLinear packed_;
  QuantizedLinear quantized_;
};
TORCH_MODULE(TiedHead);

// Packs every CpuPackable module of `module` (itself included) for inference
// on `device` in `dtype`; an error when oneDNN cannot, or when the model has
// nothing to pack. Returns how many modules were packed.
absl::StatusOr<int> PackLinears(torch::nn::Module& module, const c10::Device& device,
                                c10::ScalarType dtype);

}  // namespace ltb
