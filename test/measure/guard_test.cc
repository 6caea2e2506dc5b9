#include "measure/guard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/format.h"
#include "device/cpu_memory.h"
#include "device/device.h"
#include "distributed/distributed.h"
#include "run_ranks.h"
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

TEST(CheckFits, AdvisesWhatCanMakeItFit) {
  const c10::Device cpu(c10::kCPU);
  // Weights and training state alone past the machine: no batch or seq helps.
  MemoryEstimate state;
  state.weights = int64_t{1} << 50;
  state.optimizer = int64_t{1} << 40;
  std::string msg(CheckFits(state, cpu).message());
  EXPECT_NE(msg.find("; its weights and their training state alone need " +
                     FormatBytes(state.weights + state.optimizer) +
                     ", which no --batch or --seq changes: try a smaller size"),
            std::string::npos)
      << msg;
  // Inference's weights alone: a narrower dtype halves fp32's.
  MemoryEstimate weights;
  weights.weights = int64_t{1} << 50;
  msg = std::string(CheckFits(weights, cpu).message());
  EXPECT_NE(msg.find("alone need " + FormatBytes(weights.weights) +
                     ", which no --batch or --seq changes: try a smaller size or a "
                     "narrower --dtype"),
            std::string::npos)
      << msg;
  // Activations past it: the batch or the sequence can.
  MemoryEstimate activations;
  activations.weights = kMiB;
  activations.activations = int64_t{1} << 50;
  msg = std::string(CheckFits(activations, cpu).message());
  EXPECT_NE(msg.find("; try a smaller size, --batch or --seq"), std::string::npos) << msg;
}

// Under the tuned malloc the heap keeps what a step frees: Encoder/nano's
// forward_backward at batch 8 x 4096 passed with 23 GB estimated and was
// killed at 24.4 GB resident. The activations count twice there.
TEST(CheckFits, TheHeapsFreedBlocksCountWhereItKeepsThem) {
  const int64_t available = DeviceAvailableBytes(HostDevice());
  if (available <= 0) GTEST_SKIP() << "this machine does not say what memory it has";
  MemoryEstimate need;  // three fifths of the host, in activations
  need.weights = kMiB;
  need.activations = available / 5 * 3;
  const c10::Device cpu(c10::kCPU);
  EXPECT_TRUE(CheckFits(need, cpu, 1, /*heap_keeps_freed=*/false).ok());
  const absl::Status kept = CheckFits(need, cpu, 1, /*heap_keeps_freed=*/true);
  ASSERT_FALSE(kept.ok());
  EXPECT_NE(
      kept.message().find(FormatBytes(need.Total() + need.activations) + " (weights "),
      std::string::npos)
      << kept.message();
  EXPECT_NE(kept.message().find("and as much as the activations again for the freed "
                                "blocks the heap keeps under --malloc=tuned)"),
            std::string::npos)
      << kept.message();
}

TEST(CheckFits, CountsTheFp32HostBuildOfAModelForAnyDevice) {
  // Small on the device, but too big to build on the host first.
  MemoryEstimate need;
  need.weights = kMiB;
  need.host_build = int64_t{1} << 50;
  for (const c10::Device& d : {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)}) {
    const absl::Status s = CheckFits(need, d);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("of host memory (to build the model"), std::string::npos)
        << s.message();
  }
}

TEST(CheckFits, DataParallelRanksOnOneMachineEachNeedTheirOwnMemory) {
  const int64_t available = DeviceAvailableBytes(HostDevice());
  if (available <= 0) GTEST_SKIP() << "this machine does not say what memory it has";
  // Three fifths of the host: one rank fits, two on this machine do not.
  MemoryEstimate need;
  need.weights = available / 5 * 3;
  const c10::Device cpu(c10::kCPU);
  EXPECT_TRUE(CheckFits(need, cpu).ok());
  EXPECT_TRUE(CheckFits(need, cpu, /*host_ranks=*/1).ok());
  const absl::Status two = CheckFits(need, cpu, /*host_ranks=*/2);
  ASSERT_FALSE(two.ok());
  const std::string msg(two.message());
  EXPECT_NE(msg.find("for each of the 2 data-parallel ranks on this machine, " +
                     FormatBytes(2 * need.Total()) + " in all, but cpu has"),
            std::string::npos)
      << msg;
  // On a GPU each rank still builds its fp32 model on the host first.
  MemoryEstimate build;
  build.weights = kMiB;
  build.host_build = available / 5 * 3;
  const c10::Device gpu(c10::kCUDA, 0);
  const absl::Status built = CheckFits(build, gpu, 2);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(
      built.message().find("of host memory (to build the model before it is converted or "
                           "moved, or a transfer's host copy) for each of the 2"),
      std::string::npos)
      << built.message();
}

TEST(RanksOnThisHost, OneWithoutAGroup) { EXPECT_EQ(RanksOnThisHost(nullptr), 1); }

// The ranks' side of the test below: each writes how many ranks it counts
// on its machine.
TEST(GuardRank, CountRanksOnThisHost) {
  const char* out = std::getenv("LTB_GUARD_RANKS_OUT");
  if (out == nullptr)
    GTEST_SKIP() << "run by RanksOnThisHost.CountsEveryRankOfOneMachine";
  const DistEnv env = ReadDistEnv().value();
  auto group = JoinProcessGroup(env, c10::Device(c10::kCPU));
  ASSERT_TRUE(group.ok()) << group.status();
  SetCurrentProcessGroup(std::move(*group));
  std::ofstream(out) << RanksOnThisHost(CurrentProcessGroup()) << "\n";
  CurrentProcessGroup()->Barrier();
  SetCurrentProcessGroup(nullptr);
}

TEST(RanksOnThisHost, CountsEveryRankOfOneMachine) {
  const std::string dir =
      testing::TempDir() + "/ltb_guard_ranks_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(RunRanks("GuardRank.CountRanksOnThisHost",
                       {"LTB_GUARD_RANKS_OUT=" + dir + "/rank%r"}, /*world=*/3))
      << "a rank failed";
  for (int rank = 0; rank < 3; ++rank) {
    int counted = 0;
    std::ifstream(dir + "/rank" + std::to_string(rank)) >> counted;
    EXPECT_EQ(counted, 3) << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ltb
