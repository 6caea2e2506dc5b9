// SHA-256 digests of files (OpenSSL's libcrypto), for the run's context: what
// a --weights checkpoint held, by content.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ltb {

// The SHA-256 of one file, in lowercase hex.
absl::StatusOr<std::string> FileSha256(const std::string& path);

// The SHA-256 of a checkpoint: a file's alone; for a folder (or an index or
// model.safetensors in it) each of its .safetensors and .index.json files',
// as "name=hex" joined by ", " in name order.
absl::StatusOr<std::string> CheckpointSha256(const std::string& path);

}  // namespace ltb
