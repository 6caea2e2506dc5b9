// Continuous batching's decode steps replayed from graphs (--cuda_graphs):
// a SlotDecoder over another whose decode step is captured once for each
// active-slot count and key bucket, before LoadGen's test starts, and
// replayed with each step's tokens and positions copied into static buffers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "device/backend.h"
#include "family/family.h"

namespace ltb {

// The smallest number of keys a graphed decode step attends over.
inline constexpr int64_t kLeastKeyBucket = 16;

// The key counts graphed decode steps attend over, for steps that attend to
// `least` keys or more in a cache of `context` positions: powers of two
// from kLeastKeyBucket, the last one the context, from the bucket that
// holds `least` up. A step reads its bucket's keys, so at most twice the
// keys its longest row needs (the eager step reads exactly those).
std::vector<int64_t> KeyBuckets(int64_t least, int64_t context);

// A SlotDecoder that runs another's steps; a decorator overrides those it
// changes.
class ForwardingSlots : public SlotDecoder {
 public:
  explicit ForwardingSlots(SlotDecoder& inner) : inner_(inner) {}
  int64_t slots() const override { return inner_.slots(); }
  int64_t context() const override { return inner_.context(); }
  int64_t vocab() const override { return inner_.vocab(); }
  at::Tensor Prefill(const at::Tensor& tokens, int64_t slot, int64_t position) override {
    return inner_.Prefill(tokens, slot, position);
  }
  at::Tensor Decode(const at::Tensor& tokens,
                    const std::vector<int64_t>& positions) override {
    return inner_.Decode(tokens, positions);
  }
  at::Tensor DecodeOver(const at::Tensor& tokens, const at::Tensor& positions,
                        int64_t keys) override {
    return inner_.DecodeOver(tokens, positions, keys);
  }
  void Move(int64_t from, int64_t to, int64_t length) override {
    inner_.Move(from, to, length);
  }
  void Clear() override { inner_.Clear(); }

 protected:
  SlotDecoder& inner_;
};

// `inner` with Decode replayed from graphs of its DecodeOver: one for each
// active-slot count S in 1..slots() and each of KeyBuckets(least_keys,
// context()), captured by Capture(). Decode copies the step's tokens and
// positions into rows [0, S) of static buffers and replays the graph of S
// and the smallest bucket that holds its longest row; the tokens it
// returns hold until the next Decode. The other steps are inner's, eager.
class GraphedSlots final : public ForwardingSlots {
 public:
  GraphedSlots(SlotDecoder& inner, std::unique_ptr<StepGraphs> graphs,
               const c10::Device& device, int64_t least_keys);

  // Captures every graph, in inference mode, each after an eager run of
  // its step. The eager runs write the cache: Clear() it before serving.
  void Capture();
  size_t graphs() const { return graph_.size(); }
  const std::vector<int64_t>& buckets() const { return buckets_; }

  at::Tensor Decode(const at::Tensor& tokens,
                    const std::vector<int64_t>& positions) override;

 private:
  std::unique_ptr<StepGraphs> graphs_;
  std::vector<int64_t> buckets_;
  at::Tensor tokens_, positions_, next_;  // (slots, 1), (slots), (slots, 1)
  std::vector<size_t> graph_;             // [(S - 1) * buckets + bucket]
};

}  // namespace ltb
