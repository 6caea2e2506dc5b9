#include "harness/spec.h"

#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "harness/device.h"

namespace ltb {
namespace {

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

}  // namespace

std::string BenchSpec::Name() const {
  std::string name;
  if (family == "Ops") {
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
      absl::StrCat("unknown --dtype '", text, "'; valid: fp32, bf16, fp16"));
}

int64_t DtypeBytes(c10::ScalarType dtype) {
  return static_cast<int64_t>(c10::elementSize(dtype));
}

absl::StatusOr<std::vector<int64_t>> ParsePositiveList(const std::string& flag,
                                                       const std::string& text) {
  std::vector<int64_t> values;
  std::set<int64_t> seen;
  for (const std::string& item : SplitList(text)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad --", flag, " value '", item, "' in '", text,
          "'; valid: positive integers separated by commas, e.g. --", flag, "=1,8,32"));
    }
    if (seen.insert(v).second) values.push_back(v);
  }
  return values;
}

absl::StatusOr<std::vector<c10::ScalarType>> ParseDtypeList(const std::string& text) {
  std::vector<c10::ScalarType> values;
  for (const std::string& item : SplitList(text)) {
    absl::StatusOr<c10::ScalarType> dtype = ParseDtype(item);
    if (!dtype.ok()) return dtype.status();
    if (std::find(values.begin(), values.end(), *dtype) == values.end()) {
      values.push_back(*dtype);
    }
  }
  return values;
}

absl::StatusOr<std::vector<c10::Device>> ParseDeviceList(const std::string& text) {
  std::vector<c10::Device> values;
  for (const std::string& item : SplitList(text)) {
    absl::StatusOr<c10::Device> device = ParseDevice(item);
    if (!device.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --devices: ", device.status().message()));
    }
    if (std::find(values.begin(), values.end(), *device) == values.end()) {
      values.push_back(*device);
    }
  }
  return values;
}

absl::StatusOr<std::vector<bool>> ParseMemoryFormats(const std::string& text) {
  std::vector<bool> values;
  for (const std::string& item : SplitList(text)) {
    bool channels_last = false;
    if (item == "channels_last") {
      channels_last = true;
    } else if (item != "contiguous") {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown --memory_format '", item, "'; valid: contiguous, channels_last"));
    }
    if (std::find(values.begin(), values.end(), channels_last) == values.end()) {
      values.push_back(channels_last);
    }
  }
  return values;
}

absl::StatusOr<bool> ParseBool(const std::string& flag, const std::string& text) {
  if (text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("bad --", flag, " value '", text, "'; valid: true, false"));
}

absl::StatusOr<int> ParseNonNegativeInt(const std::string& flag,
                                        const std::string& text) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --", flag, " value '", text, "'; valid: a whole number >= 0"));
  }
  return v;
}

absl::StatusOr<double> ParseNonNegativeDouble(const std::string& flag,
                                              const std::string& text) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad --", flag, " value '", text,
                                                   "'; valid: a number of seconds >= 0"));
  }
  return v;
}

}  // namespace ltb
