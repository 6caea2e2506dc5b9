#include "measure/guard.h"

#include <gtest/gtest.h>

#include "base/format.h"
#include "device/cpu_memory.h"
#include "units.h"

namespace ltb {
namespace {

TEST(CheckFits, AcceptsWhatFitsAndNamesBothNumbersOtherwise) {
  const c10::Device cpu(c10::kCPU);
  MemoryEstimate small;
  small.weights = kMiB;
  EXPECT_TRUE(CheckFits(small, cpu).ok());

  MemoryEstimate huge;
  huge.weights = int64_t{1} << 50;  // 1 PiB
  huge.optimizer = int64_t{1} << 40;
  const absl::Status s = CheckFits(huge, cpu);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(s.message());
  EXPECT_NE(msg.find(FormatBytes(huge.Total())), std::string::npos) << msg;
  EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer state 1024.00 GiB"), std::string::npos) << msg;
  // What the host's figure leaves out (a cgroup's limit, memory that grows
  // as it is used) is said beside it.
  const std::string note = HostMemoryNote(ReadHostMemory());
  if (!note.empty())
    EXPECT_NE(msg.find(" available (" + note + ")"), std::string::npos) << msg;
}

TEST(CheckFits, CountsTheFp32HostBuildOfAModelForAnyDevice) {
  // Small on the device, but too big to build on the host first.
  MemoryEstimate need;
  need.weights = kMiB;
  need.host_build = int64_t{1} << 50;
  for (const c10::Device& d : {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)}) {
    const absl::Status s = CheckFits(need, d);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("to build the fp32 model on the host"), std::string::npos)
        << s.message();
  }
}

}  // namespace
}  // namespace ltb
