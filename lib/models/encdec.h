// The EncDec family (shared/MODELS.md, "EncDec"): LibTorch's own
// encoder-decoder Transformer with one token embedding shared by source and
// target (scaled by sqrt(d_model)), fixed sinusoidal positions and an output
// projection, trained on synthetic token pairs.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/transformer.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "family/registry.h"
#include "models/size_table.h"

namespace ltb {

// As LibTorch's TransformerOptions, plus the vocabulary.
struct EncDecOptions {
  static constexpr int64_t kDefaultVocab = 8192;
  EncDecOptions(int64_t d_model, int64_t heads, int64_t encoder_layers,
                int64_t decoder_layers, int64_t d_ff)
      : d_model_(d_model),
        heads_(heads),
        encoder_layers_(encoder_layers),
        decoder_layers_(decoder_layers),
        d_ff_(d_ff) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(int64_t, encoder_layers);
  TORCH_ARG(int64_t, decoder_layers);
  TORCH_ARG(int64_t, d_ff);
  TORCH_ARG(int64_t, vocab) = kDefaultVocab;
};

using EncDecSize = NamedSize<EncDecOptions>;

// nano, tiny, small, base, xl.
const std::vector<EncDecSize>& EncDecSizes();

// Architecture numbers given on the command line, applied to every size.
struct EncDecOverrides {
  std::optional<int64_t> d_model, heads, encoder_layers, decoder_layers, d_ff;
  bool any() const {
    return d_model || heads || encoder_layers || decoder_layers || d_ff;
  }
};

// A preset, or "custom_d<d>_h<h>_e<enc>_d<dec>_ff<ff>" for an overridden one
// ("_v<vocab>" appended when the vocabulary is not the default).
absl::StatusOr<EncDecOptions> EncDecSizeOptions(const std::string& size);
std::string CustomName(const EncDecOptions& o);
// The presets with the overrides applied; errors when heads do not divide d_model.
absl::StatusOr<std::vector<std::string>> EncDecSizeNames(const EncDecOverrides& o);

int64_t EncDecParamCount(const EncDecOptions& o);
// Forward FLOPs of a batch of (src, tgt) pairs: encoder layers
// 8 B S d^2 + 4 B S^2 d + 4 B S d f; decoder layers self and cross
// attention and FFN; the output projection 2 B T d V.
double EncDecForwardFlops(const EncDecOptions& o, int64_t batch, int64_t src,
                          int64_t tgt);

class EncDecImpl : public torch::nn::Module {
 public:
  explicit EncDecImpl(const EncDecOptions& o);
  // src (B, S), tgt (B, T) token ids -> logits (B, T, V); the decoder is
  // causal over tgt.
  at::Tensor forward(const at::Tensor& src, const at::Tensor& tgt);

  torch::nn::Embedding embedding{nullptr};
  torch::nn::Transformer transformer{nullptr};
  torch::nn::Linear output{nullptr};

 private:
  at::Tensor Embed(const at::Tensor& tokens);  // (B, L) -> (L, B, d)
  // Fixed positions (L, d) and the decoder's causal mask (T, T), in the
  // weights' dtype on their device: made once, not in every step.
  at::Tensor Positions(int64_t len, const c10::TensorOptions& options);
  at::Tensor CausalMask(int64_t len, const c10::TensorOptions& options);
  EncDecOptions options_;
  at::Tensor positions_, mask_;  // caches; not parameters
};
TORCH_MODULE(EncDec);

// Cross-entropy of the target shifted by one: `pairs` (B, S + T) holds the
// source then the target of each sample.
at::Tensor EncDecLoss(EncDec& model, const at::Tensor& pairs, int64_t src_len);

Family EncDecFamily(const EncDecOverrides& overrides = {});
// The family with the run's architecture (--d_model, --nhead, ...) applied;
// an error when it does not fit together.
absl::StatusOr<Family> EncDecFamilyFromOptions(const FamilyOptions& options);

}  // namespace ltb
