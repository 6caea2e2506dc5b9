// Byte units the tests share (one definition, so that the test files can be
// compiled together in a unity build).
#pragma once

#include <cstdint>

namespace ltb {

inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;

}  // namespace ltb
