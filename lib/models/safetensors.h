// Reading Hugging Face safetensors checkpoints: one .safetensors file, or a
// folder (or its model.safetensors.index.json) whose index maps each tensor
// to a shard. A file is an 8-byte little-endian header length N, N bytes of
// JSON ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {...}}), then the data, every byte of it some tensor's. Each file is
// checked whole when it is opened: the length (at most 100 MB of header,
// within the file), the JSON (nlohmann-json), each tensor's dtype, shape and
// offsets (inside the data, the size its shape and dtype need), and that the
// tensors tile the data with no overlap and no gap. Tensors are memory-mapped
// and loaded without a copy when their dtype is the one asked for, converted
// otherwise (BF16, F16, F32, F64).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace at {
class Tensor;
}

namespace ltb {

struct SafetensorsEntry {
  c10::ScalarType dtype = c10::kFloat;
  std::string dtype_name;  // as the header says: "BF16", "F32", ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // within the file's data
  size_t file = 0;             // which of the checkpoint's files
};

class MappedFile;

class Checkpoint {
 public:
  // A .safetensors file, a folder holding model.safetensors or
  // model.safetensors.index.json, or such an index. An error names the file
  // and what is wrong with it, in one sentence.
  static absl::StatusOr<Checkpoint> Open(const std::string& path);

  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::vector<std::string>& files() const { return files_; }

  // The tensor `name` on the CPU as `dtype`: a view of the mapped file when
  // the file holds that dtype (private pages: writing it copies them, never
  // the file), else a converted copy.
  absl::StatusOr<at::Tensor> Load(const std::string& name, c10::ScalarType dtype) const;
  // Whether Load(name, dtype) maps the file rather than copying.
  bool Mapped(const std::string& name, c10::ScalarType dtype) const;

 private:
  std::vector<std::string> files_;
  std::vector<std::shared_ptr<MappedFile>> mapped_;
  std::map<std::string, SafetensorsEntry> entries_;
};

// The header of one safetensors file's bytes (whole files, for tests and for
// Checkpoint::Open): its entries, or an error naming `path`.
absl::StatusOr<std::map<std::string, SafetensorsEntry>> ParseSafetensorsHeader(
    const std::string& path, const char* bytes, size_t size, int64_t* data_start);

}  // namespace ltb
