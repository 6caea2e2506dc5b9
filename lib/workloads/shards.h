// The on-disk dataset of the epoch benchmarks: token shards with a checked
// header, and a manifest that lets a later run with the same parameters
// reuse them. Every way a shard can be wrong — truncated, corrupt, another
// dataset's — is an error naming the file.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ltb {

// What a dataset is: `samples` rows of `sample_tokens` random token ids
// below `vocab`, from `seed`, in shards of about `shard_mb` MB.
struct DatasetSpec {
  int64_t samples = 0;
  int64_t sample_tokens = 0;
  int64_t vocab = 0;
  int64_t shard_mb = 128;
  uint64_t seed = 0;

  int64_t SamplesPerShard() const;
  int64_t Shards() const;
  bool operator==(const DatasetSpec& o) const;
};

// The tokens of shard `index`, (n, sample_tokens) int64: the same whether
// generated for memory or written to disk.
at::Tensor GenerateShard(const DatasetSpec& spec, int64_t index);

// Shard files: a 64-byte header (magic "LTBSHARD", format version, sample
// count, tokens per sample, vocabulary, token width, CRC-32 of the payload)
// then the tokens as little-endian uint16.
absl::Status WriteShard(const std::string& path, const at::Tensor& tokens, int64_t vocab);
// Reads and checks a shard against what the dataset says it holds.
absl::StatusOr<at::Tensor> ReadShard(const std::string& path, int64_t sample_tokens,
                                     int64_t vocab);

// Makes sure `dir` holds the dataset: writes it (shards, then manifest.txt)
// unless a manifest with the same parameters is there, or `regenerate`.
// Returns the shard paths; *wrote says whether anything was written.
absl::StatusOr<std::vector<std::string>> PrepareDataset(const std::string& dir,
                                                        const DatasetSpec& spec,
                                                        bool regenerate, bool* wrote);

}  // namespace ltb
