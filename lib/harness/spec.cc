#include "harness/spec.h"

#include "absl/strings/str_cat.h"
#include "harness/device.h"

namespace ltb {
std::string BenchSpec::Name() const {
  std::string name;
  if (phase_before_device) {
    name = absl::StrCat(family, "/", size, "/", phase, "/", DeviceName(device), "/",
                        DtypeName(dtype));
  } else {
    name = absl::StrCat(family, "/", size, "/", DeviceName(device), "/", phase);
    if (batch > 0) absl::StrAppend(&name, "/batch:", batch);
    if (seq > 0) absl::StrAppend(&name, "/seq:", seq);
    if (prompt > 0) absl::StrAppend(&name, "/prompt:", prompt, "/new:", new_tokens);
    absl::StrAppend(&name, "/", DtypeName(dtype));
  }
  if (channels_last) absl::StrAppend(&name, "/channels_last");
  if (pack_cpu_linears) absl::StrAppend(&name, "/onednn");
  if (!backend.empty()) absl::StrAppend(&name, "/", backend);
  if (!sync) absl::StrAppend(&name, "/nosync");
  return name;
}

std::string DtypeName(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return "fp32";
    case c10::kBFloat16:
      return "bf16";
    case c10::kHalf:
      return "fp16";
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
