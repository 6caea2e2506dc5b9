// The precisions' names on the command line and in benchmark names.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ltb {

// "fp32", "bf16", "fp16" <-> ScalarType.
std::string DtypeName(c10::ScalarType dtype);
absl::StatusOr<c10::ScalarType> ParseDtype(const std::string& text);
int64_t DtypeBytes(c10::ScalarType dtype);

}  // namespace ltb
