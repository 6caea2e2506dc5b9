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
TEST(ValidUtf8, KeepsUtf8AndReplacesEveryOtherByte) {
  EXPECT_EQ(ValidUtf8("plain/path.safetensors"), "plain/path.safetensors");
  // Two-, three- and four-byte characters pass whole: é, €, 𝄞.
  EXPECT_EQ(ValidUtf8("\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E"),
            "\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E");
  const std::string bad = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(ValidUtf8("bad\xff"), "bad" + bad);
  EXPECT_EQ(ValidUtf8("\xC3"), bad) << "a sequence cut short";
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), bad + bad) << "an overlong '/'";
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), bad + bad + bad) << "a surrogate";
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80"), bad + bad + bad + bad) << "past U+10FFFF";
  EXPECT_EQ(ValidUtf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

}  // namespace ltb
