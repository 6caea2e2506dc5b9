// Where the suite keeps what outlives a run (the on-disk dataset, the record
// of measured peaks): $XDG_CACHE_HOME/libtorch-bench, else
// ~/.cache/libtorch-bench (/tmp/.cache/libtorch-bench without a HOME).
#pragma once

#include <string>

namespace ltb {

std::string UserCacheDir();

}  // namespace ltb
