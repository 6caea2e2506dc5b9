// Test entry point: installs the tracking CPU allocator before any tensor
// exists, as bench does, so memory tests see every allocation.
#include <gtest/gtest.h>

#include "device/cpu_memory.h"

int main(int argc, char** argv) {
  ltb::InstallCpuTracking();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
