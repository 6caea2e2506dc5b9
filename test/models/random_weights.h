// Checks of a language model's random weights as Hugging Face draws them
// (models/decoder.h InitLikeHuggingFace), for the decoder rows drawn
// that way.
#pragma once

#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>

#include <cmath>
#include <functional>
#include <string>

#include "absl/strings/match.h"

namespace ltb {

// Every matrix and embedding of mean 0 and standard deviation `std_of(name)`,
// every bias zero, every norm's weight one.
inline void ExpectHuggingFaceWeights(
    const torch::nn::Module& module,
    const std::function<double(const std::string&)>& std_of) {
  for (const auto& p : module.named_parameters()) {
    const at::Tensor w = p.value().detach();
    if (w.dim() < 2) {
      const double want = absl::EndsWith(p.key(), "bias") ? 0 : 1;
      EXPECT_EQ(w.sub(want).abs().max().item<float>(), 0) << p.key();
      continue;
    }
    const double want = std_of(p.key());
    EXPECT_NEAR(w.std().item<double>(), want, 0.1 * want) << p.key();
    EXPECT_NEAR(w.mean().item<double>(), 0, 0.1 * want) << p.key();
  }
}

// The next-token loss of `forward` (ids (B, T) -> logits (B, T, vocab)) on
// random tokens: about ln vocab for a model that predicts about uniformly.
inline double RandomTokensLoss(
    const std::function<at::Tensor(const at::Tensor&)>& forward, int64_t vocab) {
  const at::Tensor ids = torch::randint(0, vocab, {4, 33}, torch::kLong);
  c10::InferenceMode guard;
  const at::Tensor logits = forward(ids.narrow(1, 0, 32));
  return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}),
                                              ids.narrow(1, 1, 32).reshape({-1}))
      .item<double>();
}

}  // namespace ltb
