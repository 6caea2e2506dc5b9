#include "base/cache_dir.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ltb {

std::string UserCacheDir() {
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache != nullptr && *cache) {
    return absl::StrCat(cache, "/libtorch-bench");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr && *home ? home : "/tmp", "/.cache/libtorch-bench");
}

}  // namespace ltb
