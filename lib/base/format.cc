#include "base/format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ltb {

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= 1024.0 * 1024) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (b >= 1024.0) return absl::StrFormat("%.1f KiB", b / 1024);
  return absl::StrCat(bytes, " B");
}

}  // namespace ltb
