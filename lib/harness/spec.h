// What one benchmark measures (family, size, device, phase and settings) and
// the stable name tools and compare.py match results by.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ltb {

struct BenchSpec {
  std::string family;  // "Transformer"
  std::string size;    // "small"; for Ops, the operation
  std::string phase;   // "forward"; for Ops, the shape
  c10::Device device = c10::Device(c10::kCPU);
  c10::ScalarType dtype = c10::kFloat;
  int64_t batch = 0;       // 0: the family has no batch setting
  int64_t seq = 0;         // 0: the family has no sequence setting
  int64_t prompt = 0;      // generate: prompt tokens per sequence
  int64_t new_tokens = 0;  // generate: tokens generated per sequence
  bool sync = true;
  bool channels_last = false;  // convolution models' input and weights
  // CPU inference phases run linear layers through oneDNN with packed
  // weights (families that support it); false: LibTorch's default path.
  bool pack_cpu_linears = true;

  // Model families: Family/size/device/phase/batch:B/seq:T/dtype[/nosync];
  // generation: .../batch:B/prompt:P/new:N/dtype[/nosync];
  // convolution models in channels_last: .../dtype/channels_last[/nosync].
  // Ops: Ops/op/shape/device/dtype[/nosync].
  std::string Name() const;
};

// "fp32", "bf16", "fp16" <-> ScalarType.
std::string DtypeName(c10::ScalarType dtype);
absl::StatusOr<c10::ScalarType> ParseDtype(const std::string& text);
int64_t DtypeBytes(c10::ScalarType dtype);

// Comma-separated flag values. Errors name the flag and the valid values.
absl::StatusOr<std::vector<int64_t>> ParsePositiveList(const std::string& flag,
                                                       const std::string& text);
absl::StatusOr<std::vector<c10::ScalarType>> ParseDtypeList(const std::string& text);
absl::StatusOr<std::vector<c10::Device>> ParseDeviceList(const std::string& text);
// --memory_format: contiguous and/or channels_last -> channels_last flags.
absl::StatusOr<std::vector<bool>> ParseMemoryFormats(const std::string& text);
absl::StatusOr<bool> ParseBool(const std::string& flag, const std::string& text);
absl::StatusOr<int> ParseNonNegativeInt(const std::string& flag, const std::string& text);
absl::StatusOr<double> ParseNonNegativeDouble(const std::string& flag,
                                              const std::string& text);

}  // namespace ltb
