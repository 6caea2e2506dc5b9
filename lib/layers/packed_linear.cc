#include "layers/packed_linear.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mkldnn_linear.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "device/cpu_isa.h"
#include "device/device.h"
#include "family/spec.h"

namespace ltb {

bool CanPackLinear(const c10::Device& device, c10::ScalarType dtype, std::string* why) {
  std::string reason;
  if (!BackendOf(device).Caps().packed_linears) {
    reason =
        absl::StrCat("oneDNN linear layers run on the CPU, not ", DeviceName(device));
  } else if (!at::hasMKLDNN()) {
    reason = "this LibTorch is built without oneDNN (MKLDNN)";
  } else if (dtype != c10::kFloat && dtype != c10::kBFloat16) {
    reason = absl::StrCat("LibTorch's oneDNN linear runs fp32 and bf16, not ",
                          DtypeName(dtype));
  } else if (dtype == c10::kBFloat16) {
    OneDnnRunsBf16(&reason);
  }
  if (why != nullptr) *why = reason;
  return reason.empty();
}

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

at::Tensor PackableLinearImpl::forward(const at::Tensor& x) {
  if (quantized_.quantized()) return quantized_(x);
  if (packed_.packed()) return packed_(x);
  // ATen's linear, as Python's nn.Linear runs it: with a bias it is one
  // addmm, where LibTorch's C++ Linear multiplies a 3-d input first and then
  // adds the bias in a second pass over the output (a second kernel launch
  // on a GPU).
  return at::linear(x, weight, bias);
}

WeightChange PackableLinearImpl::Quantize(const Quant& quant) {
  quantized_ = QuantizedLinear(weight, bias, quant);
  WeightChange change;
  change.added = quantized_.bytes();
  for (at::Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    change.removed += t->nbytes();
    t->set_data(at::empty({0}, t->options()));
  }
  return change;
}

void PackableLinearImpl::PackForCpuInference() { packed_ = PackedLinear(weight, bias); }

at::Tensor TiedHeadImpl::forward(const at::Tensor& x) {
  if (quantized_.quantized()) return quantized_(x);
  return packed_.packed() ? packed_(x) : at::linear(x, weight_);
}

void TiedHeadImpl::PackForCpuInference() {
  packed_ = PackedLinear(weight_, at::Tensor());
}

WeightChange TiedHeadImpl::Quantize(const Quant& quant) {
  quantized_ = QuantizedLinear(weight_, at::Tensor(), quant);
  return {static_cast<int64_t>(weight_.nbytes()), quantized_.bytes()};
}

absl::StatusOr<int> PackLinears(torch::nn::Module& module, const c10::Device& device,
                                c10::ScalarType dtype) {
  std::string why;
  if (!CanPackLinear(device, dtype, &why)) {
    return absl::FailedPreconditionError(absl::StrCat("--cpu_linear=onednn: ", why));
  }
  int packed = 0;
  for (const std::shared_ptr<torch::nn::Module>& m :
       module.modules(/*include_self=*/true)) {
    if (auto* packable = dynamic_cast<CpuPackable*>(m.get())) {
      packable->PackForCpuInference();
      ++packed;
    }
  }
  if (packed == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--cpu_linear=onednn: ", module.name(),
                     " has no linear layers that can be packed"));
  }
  return packed;
}

}  // namespace ltb
