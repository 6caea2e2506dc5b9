#include "device/cpu_memory.h"

#include <ATen/ops/empty.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "device/backend.h"
#include "device/device.h"
#include "units.h"

namespace ltb {
namespace {

namespace fs = std::filesystem;

at::Tensor Bytes(int64_t n) { return at::empty({n}, at::kByte); }

TEST(CpuTracking, IsInstalledAsLibTorchsCpuAllocator) {
  EXPECT_TRUE(CpuTrackingInstalled());
}

TEST(CpuTracking, ReportsAKnownAllocationPatternExactly) {
  const int64_t base = CpuAllocatedBytes();
  ResetCpuPeak();
  EXPECT_EQ(CpuPeakBytes(), base);
  {
    at::Tensor a = Bytes(1 * kMiB);
    at::Tensor b = Bytes(2 * kMiB);
    EXPECT_EQ(CpuAllocatedBytes() - base, 3 * kMiB);
    a.reset();
    at::Tensor c = Bytes(kMiB / 2);
    EXPECT_EQ(CpuAllocatedBytes() - base, 2 * kMiB + kMiB / 2);
  }
  EXPECT_EQ(CpuPeakBytes() - base, 3 * kMiB);
  EXPECT_EQ(CpuAllocatedBytes(), base);

  // A reset forgets the old peak: only what comes after counts.
  ResetCpuPeak();
  { at::Tensor d = Bytes(kMiB); }
  EXPECT_EQ(CpuPeakBytes() - base, kMiB);
}

TEST(CpuTracking, CountsViewsOnceAndFreesWithTheLastReference) {
  const int64_t base = CpuAllocatedBytes();
  at::Tensor a = Bytes(kMiB);
  at::Tensor view = a.narrow(0, 0, 16);
  a.reset();
  EXPECT_EQ(CpuAllocatedBytes() - base, kMiB);
  view.reset();
  EXPECT_EQ(CpuAllocatedBytes(), base);
}

TEST(CpuTracking, PeakOfTheDeviceMatchesTheCpuPeak) {
  const c10::Device cpu = HostDevice();
  BackendOf(cpu).ResetPeakMemory(cpu);
  const int64_t base = CpuAllocatedBytes();
  { at::Tensor a = Bytes(4 * kMiB); }
  EXPECT_EQ(BackendOf(cpu).PeakMemory(cpu) - base, 4 * kMiB);
}

// /proc/meminfo of a 16 GiB machine with 6 GiB available and 4 GiB free.
constexpr char kMeminfo[] =
    "MemTotal:       16777216 kB\n"
    "MemFree:         4194304 kB\n"
    "MemAvailable:    6291456 kB\n"
    "Buffers:          102400 kB\n";

TEST(LastLevelCache, IsReadAndIsTheCpuBackendsCache) {
  const int64_t llc = LastLevelCacheBytes();
  EXPECT_EQ(BackendOf(HostDevice()).CacheBytes(HostDevice()), llc);
  if (llc == 0) GTEST_SKIP() << "neither sysfs nor sysconf names a cache size here";
  EXPECT_GE(llc, 256 * 1024);  // no CPU this runs on has a smaller last level
  EXPECT_LE(llc, 4 * kGiB);
}

TEST(HostMemory, IsMemAvailableOfMemTotal) {
  const HostMemory m = HostMemoryFrom(kMeminfo, CgroupMemory(), "");
  EXPECT_EQ(m.available, 6 * kGiB);
  EXPECT_EQ(m.total, 16 * kGiB);
  EXPECT_FALSE(m.cgroup_bound);
  EXPECT_EQ(HostMemoryNote(m), "");
  // Before Linux 3.14 there is no MemAvailable: MemFree, the lower figure.
  EXPECT_EQ(
      HostMemoryFrom("MemTotal: 16777216 kB\nMemFree: 4194304 kB\n", CgroupMemory(), "")
          .available,
      4 * kGiB);
  // Nothing readable: unknown, which the guard lets pass.
  EXPECT_EQ(HostMemoryFrom("", CgroupMemory(), "").available, -1);
}

TEST(HostMemory, NeverMoreThanTheCgroupLeavesNorThanMemTotal) {
  CgroupMemory cgroup;
  cgroup.limit = 8 * kGiB;
  cgroup.headroom = 3 * kGiB;
  const HostMemory m = HostMemoryFrom(kMeminfo, cgroup, "virtio_balloon");
  EXPECT_EQ(m.available, 3 * kGiB);
  EXPECT_EQ(m.total, 8 * kGiB);
  EXPECT_TRUE(m.cgroup_bound);
  // Growing the machine does not raise the cgroup's limit.
  EXPECT_EQ(m.grows, "");
  EXPECT_NE(HostMemoryNote(m).find("cgroup"), std::string::npos) << HostMemoryNote(m);

  // A limit above what the machine has changes nothing.
  cgroup.limit = 64 * kGiB;
  cgroup.headroom = 40 * kGiB;
  const HostMemory loose = HostMemoryFrom(kMeminfo, cgroup, "");
  EXPECT_EQ(loose.available, 6 * kGiB);
  EXPECT_EQ(loose.total, 16 * kGiB);
  EXPECT_FALSE(loose.cgroup_bound);

  // A MemAvailable above MemTotal (a balloon deflating between the lines'
  // updates) is held to MemTotal.
  EXPECT_EQ(HostMemoryFrom("MemTotal: 1048576 kB\nMemAvailable: 2097152 kB\n",
                           CgroupMemory(), "")
                .available,
            kGiB);
}

TEST(HostMemory, AMachineThatGrowsSaysSoAndHowToRunAnyway) {
  const HostMemory m = HostMemoryFrom(kMeminfo, CgroupMemory(), "virtio_balloon");
  EXPECT_EQ(m.available, 6 * kGiB);  // still what it has now: no guess
  const std::string note = HostMemoryNote(m);
  EXPECT_NE(note.find("virtio_balloon"), std::string::npos) << note;
  EXPECT_NE(note.find("of 16.00 GiB in all"), std::string::npos) << note;
  EXPECT_NE(note.find("--memory_guard=false"), std::string::npos) << note;
}

// A copy of /proc and /sys in a temporary directory.
class FakeRoot : public testing::Test {
 protected:
  FakeRoot()
      : root_(fs::temp_directory_path() /
              ("ltb_fake_root_" + std::to_string(::getpid()) + "_" +
               testing::UnitTest::GetInstance()->current_test_info()->name())) {}
  ~FakeRoot() override { fs::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    const fs::path p = root_ / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string Root() const { return root_.string(); }

  fs::path root_;
};

TEST_F(FakeRoot, CgroupV2TheTightestLevelAboveTheProcessCounts) {
  Write("proc/self/cgroup", "0::/job/task\n");
  // The job may use 8 GiB, uses 6 GiB of which 1 GiB is file cache it can
  // drop; the task itself has no limit.
  Write("sys/fs/cgroup/job/memory.max", "8589934592\n");
  Write("sys/fs/cgroup/job/memory.current", "6442450944\n");
  Write("sys/fs/cgroup/job/memory.stat", "anon 5368709120\ninactive_file 1073741824\n");
  Write("sys/fs/cgroup/job/task/memory.max", "max\n");
  Write("sys/fs/cgroup/job/task/memory.current", "6442450944\n");
  const CgroupMemory c = ReadCgroupMemory(Root());
  EXPECT_EQ(c.limit, 8 * kGiB);
  EXPECT_EQ(c.headroom, 3 * kGiB);
}

TEST_F(FakeRoot, CgroupV1UnlimitedIsNoLimit) {
  Write("proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory:/box\n");
  Write("sys/fs/cgroup/memory/box/memory.limit_in_bytes", "9223372036854771712\n");
  Write("sys/fs/cgroup/memory/box/memory.usage_in_bytes", "6024101888\n");
  EXPECT_EQ(ReadCgroupMemory(Root()).limit, -1);
  Write("sys/fs/cgroup/memory/box/memory.limit_in_bytes", "4294967296\n");
  Write("sys/fs/cgroup/memory/box/memory.usage_in_bytes", "3221225472\n");
  Write("sys/fs/cgroup/memory/box/memory.stat", "total_inactive_file 536870912\n");
  const CgroupMemory c = ReadCgroupMemory(Root());
  EXPECT_EQ(c.limit, 4 * kGiB);
  EXPECT_EQ(c.headroom, kGiB + kGiB / 2);
  // No cgroup file at all: no limit.
  EXPECT_EQ(ReadCgroupMemory(Root() + "/nowhere").limit, -1);
}

TEST_F(FakeRoot, MemoryGrowsThroughABoundBalloonOrMemoryOnlinedByTheKernel) {
  // Drivers present but bound to no device, hot-plug left offline.
  Write("sys/bus/virtio/drivers/virtio_balloon/bind", "");
  Write("sys/bus/virtio/drivers/virtio_balloon/uevent", "");
  Write("sys/bus/vmbus/drivers/hv_balloon/unbind", "");
  Write("sys/devices/system/memory/auto_online_blocks", "offline\n");
  EXPECT_EQ(MemoryGrowth(Root()), "");
  // A balloon device bound, and hot-plugged memory onlined by the kernel.
  Write("sys/bus/virtio/drivers/virtio_balloon/virtio0/uevent", "");
  Write("sys/devices/system/memory/auto_online_blocks", "online_movable\n");
  EXPECT_EQ(MemoryGrowth(Root()),
            "virtio_balloon, hot-plugged memory brought online "
            "(auto_online_blocks=online_movable)");
}

}  // namespace
}  // namespace ltb
