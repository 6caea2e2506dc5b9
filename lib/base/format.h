// Numbers as people read them.
#pragma once

#include <cstdint>
#include <string>

namespace ltb {

// "1.23 GiB"-style rendering.
std::string FormatBytes(int64_t bytes);

}  // namespace ltb
