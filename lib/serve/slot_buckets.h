// Continuous batching's decode steps at a few shapes: a SlotDecoder over
// another whose decode step attends over a bucket of keys, so that serving
// meets one shape for each active-slot count and bucket, each of which runs
// before LoadGen's test starts (a device that builds a kernel plan for each
// new shape, as cuDNN's attention does, builds it then, not in a request's
// latency); with --cuda_graphs each is also captured, and replayed with the
// step's tokens and positions copied into static buffers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "device/backend.h"
#include "family/family.h"

namespace ltb {

// The smallest number of keys a served decode step attends over.
inline constexpr int64_t kLeastKeyBucket = 16;

// The key counts served decode steps attend over, for steps that attend to
// `least` keys or more in a cache of `context` positions: powers of two
// from kLeastKeyBucket, the last one the context, from the bucket that
// holds `least` up. A step reads its bucket's keys, so at most twice the
// keys its longest row needs (the generate phase reads exactly those).
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

// `inner` with Decode run as its DecodeOver at one of a few shapes: one
// for each active-slot count S in 1..slots() and each of
// KeyBuckets(least_keys, context()). Decode runs S's step over the
// smallest bucket that holds its longest row (masked to each row's own
// length, so the tokens are those of the exact step); with graphs
// (Capture()), it copies the step's tokens and positions into rows [0, S)
// of static buffers and replays that shape's graph, and the tokens it
// returns hold until the next Decode. The other steps are inner's, eager.
class BucketedSlots final : public ForwardingSlots {
 public:
  // `graphs` may be null: eager steps.
  BucketedSlots(SlotDecoder& inner, std::unique_ptr<StepGraphs> graphs,
                const c10::Device& device, int64_t least_keys);

  // With graphs: captures every shape's step, each after an eager run.
  void Capture();
  // Runs every shape's step once, eagerly, on the calling thread: a
  // device's per-thread caches (cuDNN's attention plans) are then that
  // thread's. Both write the cache: Clear() it before serving.
  void RunEachShape();
  size_t graphs() const { return graph_.size(); }
  const std::vector<int64_t>& buckets() const { return buckets_; }

  at::Tensor Decode(const at::Tensor& tokens,
                    const std::vector<int64_t>& positions) override;

 private:
  // Shape i's step: S = i / buckets + 1 slots over bucket i % buckets.
  void Step(size_t shape);

  std::unique_ptr<StepGraphs> graphs_;
  std::vector<int64_t> buckets_;
  at::Tensor tokens_, positions_, next_;  // (slots, 1), (slots), (slots, 1)
  std::vector<size_t> graph_;             // [(S - 1) * buckets + bucket]
};

}  // namespace ltb
