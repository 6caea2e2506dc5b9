#include "serve/slot_buckets.h"

#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <utility>

namespace ltb {

std::vector<int64_t> KeyBuckets(int64_t least, int64_t context) {
  std::vector<int64_t> buckets;
  for (int64_t b = kLeastKeyBucket; b < context; b *= 2) {
    if (b >= least) buckets.push_back(b);
  }
  buckets.push_back(context);
  return buckets;
}

BucketedSlots::BucketedSlots(SlotDecoder& inner, std::unique_ptr<StepGraphs> graphs,
                             const c10::Device& device, int64_t least_keys)
    : ForwardingSlots(inner),
      graphs_(std::move(graphs)),
      buckets_(KeyBuckets(least_keys, inner.context())) {
  c10::InferenceMode guard;
  const auto ids = at::TensorOptions().dtype(at::kLong).device(device);
  tokens_ = at::zeros({inner.slots(), 1}, ids);
  positions_ = at::zeros({inner.slots()}, ids);
  next_ = at::zeros({inner.slots(), 1}, ids);
}

void BucketedSlots::Step(size_t shape) {
  const int64_t s = static_cast<int64_t>(shape / buckets_.size()) + 1;
  const int64_t keys = buckets_[shape % buckets_.size()];
  next_.narrow(0, 0, s).copy_(
      inner_.DecodeOver(tokens_.narrow(0, 0, s), positions_.narrow(0, 0, s), keys));
}

void BucketedSlots::RunEachShape() {
  c10::InferenceMode guard;
  for (size_t shape = 0; shape < buckets_.size() * static_cast<size_t>(slots());
       ++shape) {
    Step(shape);
  }
}

void BucketedSlots::Capture() {
  TORCH_CHECK(graphs_, "no graphs to capture the decode steps in");
  c10::InferenceMode guard;
  graph_.clear();
  for (size_t shape = 0; shape < buckets_.size() * static_cast<size_t>(slots());
       ++shape) {
    // Each shape runs eagerly once first: its kernels' lazy set-up (a
    // GEMM's or an attention kernel's, for these sizes) cannot be captured.
    Step(shape);
    graph_.push_back(graphs_->Capture([this, shape] { Step(shape); }));
  }
}

at::Tensor BucketedSlots::Decode(const at::Tensor& tokens,
                                 const std::vector<int64_t>& positions) {
  const int64_t s = tokens.size(0);
  TORCH_CHECK(s > 0 && s <= slots() && s == static_cast<int64_t>(positions.size()), s,
              " tokens and ", positions.size(), " positions for ", slots(), " slots");
  TORCH_CHECK(!graphs_ || !graph_.empty(), "the decode graphs were not captured");
  const int64_t keys = *std::max_element(positions.begin(), positions.end()) + 1;
  // The smallest bucket that holds the longest row (the first, for a step
  // shorter than the least the buckets were made for).
  const auto bucket = std::lower_bound(buckets_.begin(), buckets_.end(), keys);
  TORCH_CHECK(bucket != buckets_.end(), "position ", keys - 1, " is beyond the cache's ",
              context(), " positions");
  if (!graphs_) {
    return inner_.DecodeOver(tokens, at::tensor(positions, at::kLong).to(tokens.device()),
                             *bucket);
  }
  tokens_.narrow(0, 0, s).copy_(tokens);
  positions_.narrow(0, 0, s).copy_(at::tensor(positions, at::kLong));
  graphs_->Replay(graph_[static_cast<size_t>(s - 1) * buckets_.size() +
                         static_cast<size_t>(bucket - buckets_.begin())]);
  return next_.narrow(0, 0, s);
}

}  // namespace ltb
