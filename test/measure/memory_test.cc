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

}  // namespace
}  // namespace ltb
