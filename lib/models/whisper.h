// The Whisper family (shared/MODELS.md, "Whisper"): an encoder over log-mel
// spectrograms and a text decoder with self- and cross-attention, built of
// the decoder's blocks (models/decoder.h) named as in the reference
// implementation. Generation keeps a self-attention cache and computes the
// cross-attention keys and values once per utterance.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "models/decoder.h"
#include "models/size_table.h"

namespace ltb {

struct WhisperOptions {
  WhisperOptions(int64_t width, int64_t heads, int64_t encoder_layers,
                 int64_t decoder_layers)
      : width_(width),
        heads_(heads),
        encoder_layers_(encoder_layers),
        decoder_layers_(decoder_layers) {}
  TORCH_ARG(int64_t, width);
  TORCH_ARG(int64_t, heads);
  TORCH_ARG(int64_t, encoder_layers);
  TORCH_ARG(int64_t, decoder_layers);
  TORCH_ARG(int64_t, vocab) = 51865;
  TORCH_ARG(int64_t, mels) = 80;
  TORCH_ARG(int64_t, frames) = 3000;     // 30 s of audio
  TORCH_ARG(int64_t, audio_ctx) = 1500;  // encoder positions: frames / 2
  TORCH_ARG(int64_t, text_ctx) = 448;    // decoder positions
  // false: explicit matmuls, for FLOP checks.
  TORCH_ARG(bool, fused_attention) = true;
};

using WhisperSize = NamedSize<WhisperOptions>;

// nano, tiny, base.
const std::vector<WhisperSize>& WhisperSizes();
absl::StatusOr<WhisperOptions> WhisperSizeOptions(const std::string& size);

int64_t WhisperParamCount(const WhisperOptions& o);
// The encoder on one batch of 30 s windows: both convolutions, then per
// layer 24 T w^2 + 4 T^2 w with T = 1500.
double WhisperEncodeFlops(const WhisperOptions& o, int64_t batch);
// Greedy decoding of `new_tokens` after a `prompt`: cross-attention keys and
// values once, the prompt, then one token per step, logits for the last
// position of each.
double WhisperGenerateFlops(const WhisperOptions& o, int64_t batch, int64_t prompt,
                            int64_t new_tokens);
// Bytes of decoder weights one decode step reads (cross-attention key and
// value projections and the position table excluded).
int64_t WhisperDecodeWeightCount(const WhisperOptions& o);

// The blocks' settings (decoder: with cross-attention over the encoder
// output): LayerNorm, exact GELU, biases but the key's, no positions of
// their own.
DecoderOptions WhisperBlocks(const WhisperOptions& o, bool decoder);

class WhisperEncoderImpl : public torch::nn::Module {
 public:
  explicit WhisperEncoderImpl(const WhisperOptions& o);
  // mel (B, mels, frames) -> (B, frames / 2, w).
  at::Tensor forward(const at::Tensor& mel);
  torch::nn::Conv1d conv1{nullptr}, conv2{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  Norm ln_post{nullptr};

 private:
  at::Tensor positional_embedding_;  // sinusoids, a buffer
};
TORCH_MODULE(WhisperEncoder);

class WhisperDecoderImpl : public torch::nn::Module {
 public:
  explicit WhisperDecoderImpl(const WhisperOptions& o);
  torch::nn::Embedding token_embedding{nullptr};
  at::Tensor positional_embedding;  // learned, (text_ctx, w)
  torch::nn::ModuleList blocks{nullptr};
  Norm ln{nullptr};
};
TORCH_MODULE(WhisperDecoder);

class WhisperImpl : public torch::nn::Module {
 public:
  explicit WhisperImpl(const WhisperOptions& o);

  // mel (B, 80, 3000) -> encoder output (B, 1500, w).
  at::Tensor Encode(const at::Tensor& mel);
  // tokens (B, T) from position 0 over xa -> logits (B, T, V); no cache.
  at::Tensor Decode(const at::Tensor& tokens, const at::Tensor& xa);
  // Allocates the self-attention cache and computes the cross keys/values.
  KVCache Start(const at::Tensor& xa, int64_t positions);
  // Computes the cross-attention keys and values of a new encoder output.
  void ComputeCross(const at::Tensor& xa, KVCache& cache);
  // tokens (B, T) at [position, position + T) -> logits of the last (B, V).
  at::Tensor DecodeCached(const at::Tensor& tokens, int64_t position, KVCache& cache);

  const WhisperOptions& options() const { return options_; }

  WhisperEncoder encoder{nullptr};
  WhisperDecoder decoder{nullptr};

 private:
  // The decoder's hidden states (B, T, w) of tokens at [position, position
  // + T) over the cache's cross keys and values, using and filling its
  // self-attention keys and values when it has them.
  at::Tensor Hidden(const at::Tensor& tokens, int64_t position, KVCache& cache);
  at::Tensor Logits(const at::Tensor& x);  // tied to the token embedding
  WhisperOptions options_;
};
TORCH_MODULE(Whisper);

// Greedy tokens (B, new_tokens) after `prompt` (B, P), over encoder output xa.
at::Tensor WhisperGenerateWithCache(Whisper& model, const at::Tensor& xa,
                                    const at::Tensor& prompt, int64_t new_tokens);
at::Tensor WhisperGenerateByRecompute(Whisper& model, const at::Tensor& xa,
                                      const at::Tensor& prompt, int64_t new_tokens);

Family WhisperFamily();

}  // namespace ltb
