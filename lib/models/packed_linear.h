// Linear layers for CPU inference through oneDNN, with each weight reordered
// into oneDNN's layout once, as deployments (and torch.compile's CPU
// freezing) do. On CPUs where MKL's small-batch GEMV is slow, this is what
// lets single-token decoding stream weights near memory bandwidth.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/modules/linear.h>

namespace ltb {

// Whether LibTorch can run packed linears for `device` and `dtype`.
bool CanPackLinear(const c10::Device& device, c10::ScalarType dtype);

class PackedLinear {
 public:
  PackedLinear() = default;
  // Packs a layer's current weight and bias; the layer is not changed.
  explicit PackedLinear(const torch::nn::Linear& layer);
  PackedLinear(const at::Tensor& weight, const at::Tensor& bias);

  bool packed() const { return weight_.defined(); }
  // x (..., in) -> (..., out), dense in and out.
  at::Tensor operator()(const at::Tensor& x) const;

 private:
  at::Tensor weight_, bias_;  // oneDNN layout
  int64_t in_ = 0, out_ = 0;
};

// The packed layer when there is one, else the layer itself.
inline at::Tensor Project(torch::nn::Linear& layer, const PackedLinear& packed,
                          const at::Tensor& x) {
  return packed.packed() ? packed(x) : layer(x);
}

}  // namespace ltb
