// The decoder families as rows over models/decoder.h: Transformer, GPT2 and
// Llama, each a table of sizes (shared/MODELS.md), the reference model's
// names and checkpoint conventions, and what its benchmarks run. One plan
// (FLOPs, bytes, memory) and one build serve every row.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"
#include "models/decoder.h"
#include "models/size_table.h"
#include "models/weights.h"

namespace ltb {

using DecoderSize = NamedSize<DecoderOptions>;

// A decoder family: everything that differs between Transformer, GPT2 and
// Llama. Adding a decoder (Qwen2, Mistral) is adding one of these.
struct DecoderRow {
  std::string family;
  std::vector<DecoderSize> sizes;
  DecoderNames names;
  WeightNames checkpoint;  // how its checkpoints name the tensors (--weights)
  // Generates (greedy, with a cache, at a depth); else trains by the epoch.
  bool generates = true;
  // The benchmark's seq sets max_positions (RopePairs' tables are computed
  // for it); else a seq or generation beyond max_positions is refused.
  bool seq_sets_positions = false;
};

// Transformer, GPT2, Llama, in registration order.
const std::vector<DecoderRow>& DecoderRows();
// The row of `family`, or an error naming the decoder families.
absl::StatusOr<const DecoderRow*> FindDecoderRow(const std::string& family);
// The options of `family`'s `size`, or an error naming the valid sizes.
absl::StatusOr<DecoderOptions> DecoderSizeOptions(const std::string& family,
                                                  const std::string& size);
// A model of `family` with options `o` (a size's, perhaps changed), its
// weights drawn as the family draws them.
DecoderLM MakeDecoder(const std::string& family, const DecoderOptions& o);

// How `row`'s checkpoints name the tensors of a model with options `o`, as
// --weights loads them (LoadSpecWeights).
WeightNames DecoderWeightNames(const DecoderRow& row, const DecoderOptions& o);

// The decoder in slots over `cache` (one slot a row of it), as serve of
// generation drives it.
std::shared_ptr<SlotDecoder> MakeDecoderSlots(DecoderLM model,
                                              std::shared_ptr<KVCache> cache);

// Chunks of the depth filled at once: bounds the attention scores a chunk
// computes (chunk x depth per head) when the depth is long.
constexpr int64_t kDepthChunk = 512;

// The family of a row: its phases, sizes, plan and build; the caller sets
// its default suite and shapes.
Family DecoderFamily(const DecoderRow& row);

Family TransformerFamily();
Family GPT2Family();
Family LlamaFamily();

}  // namespace ltb
