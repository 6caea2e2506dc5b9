#include "measure/memory.h"

#include <gtest/gtest.h>

namespace ltb {
namespace {

TEST(ConfigureMalloc, KnowsItsModesAndRejectsOthers) {
  std::string description;
  EXPECT_TRUE(ConfigureMalloc("system", &description).ok());
  EXPECT_NE(description.find("default"), std::string::npos);
  EXPECT_TRUE(ConfigureMalloc("tuned", &description).ok());
  EXPECT_NE(description.find("M_MMAP_MAX=0"), std::string::npos);
  const absl::Status bad = ConfigureMalloc("jemalloc", &description);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("valid: tuned, system"), std::string::npos);
}

TEST(MallocDescription, SaysWhenAnotherLibraryServesMalloc) {
  // This process's malloc is glibc's: the settings are described as set.
  EXPECT_NE(MallocLibrary().find("libc.so"), std::string::npos) << MallocLibrary();
  const std::string tuned = "glibc malloc, tuned: M_MMAP_MAX=0";
  EXPECT_EQ(MallocDescription(tuned, "/lib/x86_64-linux-gnu/libc.so.6"), tuned);
  EXPECT_EQ(MallocDescription(tuned, ""), tuned);
  // A preloaded jemalloc serves it: glibc's settings did nothing.
  EXPECT_EQ(MallocDescription(tuned, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2's malloc (preloaded or linked "
            "before glibc's), so --malloc's glibc settings do not apply");
}

}  // namespace
}  // namespace ltb
