#include "base/format.h"

#include <gtest/gtest.h>

#include "units.h"

namespace ltb {
namespace {

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3 * kMiB), "3.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 30), "5.00 GiB");
}

}  // namespace
}  // namespace ltb
