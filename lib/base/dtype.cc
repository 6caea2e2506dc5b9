#include "base/dtype.h"

#include "absl/strings/str_cat.h"

namespace ltb {

std::string DtypeName(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return "fp32";
    case c10::kBFloat16:
      return "bf16";
    case c10::kHalf:
      return "fp16";
    case c10::kDouble:  // a --model file's inputs may be
      return "fp64";
    default:
      return c10::toString(dtype);
  }
}

absl::StatusOr<c10::ScalarType> ParseDtype(const std::string& text) {
  if (text == "fp32") return c10::kFloat;
  if (text == "bf16") return c10::kBFloat16;
  if (text == "fp16") return c10::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", text, "'; valid: fp32, bf16, fp16"));
}

int64_t DtypeBytes(c10::ScalarType dtype) {
  return static_cast<int64_t>(c10::elementSize(dtype));
}

}  // namespace ltb
