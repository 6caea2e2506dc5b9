// The Encoder family (shared/MODELS.md, "Encoder"): LibTorch's own
// Transformer encoder over random embeddings, registered once per sequence
// length so that time per token against length shows where attention's
// quadratic term takes over.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/transformercoder.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "models/size_table.h"

namespace ltb {

struct EncoderOptions {
  EncoderOptions(int64_t d_model, int64_t heads, int64_t d_ff, int64_t layers)
      : d_model_(d_model), heads_(heads), d_ff_(d_ff), layers_(layers) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(int64_t, d_ff);
  TORCH_ARG(int64_t, layers);
};

using EncoderSize = NamedSize<EncoderOptions>;

// nano, default.
const std::vector<EncoderSize>& EncoderSizes();
absl::StatusOr<EncoderOptions> EncoderSizeOptions(const std::string& size);

// L(4 d^2 + 2 d d_ff + 9 d + d_ff) — attention with biases, FFN, two norms.
int64_t EncoderParamCount(const EncoderOptions& o);
// L(8 B T d^2 + 4 B T^2 d + 4 B T d d_ff).
double EncoderForwardFlops(const EncoderOptions& o, int64_t batch, int64_t seq);

// LibTorch's TransformerEncoder, no final norm. Its layer list is registered
// here as "layers", so parameters are named as in a Python
// nn.TransformerEncoder (layers.0.self_attn.in_proj_weight, ...), not with
// a prefix for the wrapper.
class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const EncoderOptions& o);
  // x: (T, B, d_model) -> (T, B, d_model).
  at::Tensor forward(const at::Tensor& x);

  torch::nn::ModuleList layers{nullptr};

 private:
  // Runs the layers; not registered itself, so its parameters are counted
  // and moved once, through `layers`.
  torch::nn::TransformerEncoder encoder_;
};
TORCH_MODULE(Encoder);

Family EncoderFamily();

}  // namespace ltb
