#include "harness/threads.h"

#include <gtest/gtest.h>

namespace ltb {
namespace {

TEST(ConfigureThreads, SetsIntraOpAndBlasThreadsTogether) {
  ThreadSettings settings;
  settings.intra_op = 1;
  ASSERT_TRUE(ConfigureThreads(settings).ok());
  EXPECT_EQ(IntraOpThreads(), 1);
  const int blas = BlasThreads();
  if (blas != -1) EXPECT_EQ(blas, 1);
}

TEST(ConfigureThreads, RejectsNegativeCounts) {
  ThreadSettings settings;
  settings.intra_op = -1;
  EXPECT_FALSE(ConfigureThreads(settings).ok());
  settings.intra_op = 1;
  settings.inter_op = 0;
  EXPECT_FALSE(ConfigureThreads(settings).ok());
}

TEST(BlasLibrary, NamesTheLibrary) {
  const std::string blas = BlasLibrary();
  EXPECT_FALSE(blas.empty());
  EXPECT_EQ(blas.find("unknown"), std::string::npos) << blas;
}

}  // namespace
}  // namespace ltb
