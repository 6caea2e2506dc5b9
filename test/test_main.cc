// Test entry point: completes a simulated older CPU and installs the tracking
// CPU allocator before any tensor exists, as bench does, so memory tests see
// every allocation.
#include <gtest/gtest.h>

#include "device/cpu_isa.h"
#include "device/cpu_memory.h"

int main(int argc, char** argv) {
  // ATEN_CPU_CAPABILITY alone simulates an older CPU for oneDNN too, as in bench.
  ltb::MatchCpuSimulation();
  ltb::InstallCpuTracking();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
