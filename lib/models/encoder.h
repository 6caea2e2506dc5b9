// The Encoder family (shared/MODELS.md, "Encoder"): LibTorch's own
// Transformer encoder over random embeddings, registered once per sequence
// length so that time per token against length shows where attention's
// quadratic term takes over.
#pragma once

#include <torch/nn/modules/transformercoder.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "harness/family.h"

namespace ltb {

struct EncoderConfig {
  int64_t d_model = 512, heads = 8, d_ff = 2048, layers = 6;
};

struct EncoderSize {
  std::string name;
  EncoderConfig config;
  int64_t card_params;
};

// nano, default.
const std::vector<EncoderSize>& EncoderSizes();
absl::StatusOr<EncoderConfig> EncoderSizeConfig(const std::string& size);

torch::nn::TransformerEncoder MakeEncoder(const EncoderConfig& c);

// L(4 d^2 + 2 d d_ff + 9 d + d_ff) — attention with biases, FFN, two norms.
int64_t EncoderParamCount(const EncoderConfig& c);
// L(8 B T d^2 + 4 B T^2 d + 4 B T d d_ff).
double EncoderForwardFlops(const EncoderConfig& c, int64_t batch, int64_t seq);

Family EncoderFamily();

}  // namespace ltb
