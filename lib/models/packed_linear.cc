#include "models/packed_linear.h"

#include <ATen/Context.h>
#include <ATen/ops/mkldnn_linear.h>

namespace ltb {

bool CanPackLinear(const c10::Device& device, c10::ScalarType dtype) {
  return device.is_cpu() && at::hasMKLDNN() &&
         (dtype == c10::kFloat || dtype == c10::kBFloat16);
}

PackedLinear::PackedLinear(const torch::nn::Linear& layer)
    : PackedLinear(layer->weight, layer->bias) {}

PackedLinear::PackedLinear(const at::Tensor& weight, const at::Tensor& bias)
    : weight_(weight.detach().to_mkldnn()),
      bias_(bias.defined() ? bias.detach().to_mkldnn() : at::Tensor()),
      in_(weight.size(1)),
      out_(weight.size(0)) {}

at::Tensor PackedLinear::operator()(const at::Tensor& x) const {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out_;
  const at::Tensor x2 = x.reshape({-1, in_}).contiguous().to_mkldnn();  // (M, in)
  const at::Tensor y = bias_.defined() ? at::mkldnn_linear(x2, weight_, bias_)
                                       : at::mkldnn_linear(x2, weight_);
  return y.to_dense().view(shape);  // (..., out)
}

}  // namespace ltb
