// Numbers as people read them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ltb {

// "1.23 GiB"-style rendering.
std::string FormatBytes(int64_t bytes);

// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD:
// a path or a file's bytes quoted in an error would otherwise make the
// whole JSON result unreadable.
std::string ValidUtf8(std::string_view text);

}  // namespace ltb
