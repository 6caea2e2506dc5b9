#include "base/threads.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "scoped_env.h"

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

// A sysfs-like tree: cpu<N>/topology/{physical_package_id,core_id}.
class FakeTopology : public testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TempDir() + "/ltb_topology_" + std::to_string(::getpid());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void AddCpu(int cpu, int package, int core) {
    const std::string dir = root_ + "/cpu" + std::to_string(cpu) + "/topology";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/physical_package_id") << package << "\n";
    std::ofstream(dir + "/core_id") << core << "\n";
  }
  std::string root_;
};

TEST_F(FakeTopology, CountsHyperThreadSiblingsOnce) {
  // Two packages of two cores, two threads each: cpu 0-3 on package 0,
  // 4-7 on package 1; core ids repeat across packages.
  for (int cpu = 0; cpu < 8; ++cpu) AddCpu(cpu, cpu / 4, (cpu % 4) / 2);
  EXPECT_EQ(CountPhysicalCores(root_, {0, 1, 2, 3, 4, 5, 6, 7}), 4);
  EXPECT_EQ(CountPhysicalCores(root_, {0, 1}), 1);         // siblings
  EXPECT_EQ(CountPhysicalCores(root_, {0, 2}), 2);         // two cores
  EXPECT_EQ(CountPhysicalCores(root_, {1, 5}), 2);         // same core id, two packages
  EXPECT_EQ(CountPhysicalCores(root_, {0, 1, 9, 10}), 3);  // no topology: a core each
}

TEST_F(FakeTopology, NamesACoreByItsLowestCpuOnTheMachine) {
  // Two packages of two cores, hyper-threads numbered as Linux numbers them:
  // cpu N and N + 4 are one core's.
  for (int cpu = 0; cpu < 8; ++cpu) AddCpu(cpu, (cpu % 4) / 2, cpu % 2);
  EXPECT_EQ(PhysicalCoreIds(root_, {0, 1, 2, 3, 4, 5, 6, 7}),
            (std::vector<int>{0, 1, 2, 3}));
  // A process allowed only the second threads names their cores as one
  // allowed the first does.
  EXPECT_EQ(PhysicalCoreIds(root_, {5, 6}), (std::vector<int>{1, 2}));
  EXPECT_EQ(PhysicalCoreIds(root_, {4, 0}), (std::vector<int>{0}));
  // No topology: a core of its own.
  EXPECT_EQ(PhysicalCoreIds(root_, {9, 4}), (std::vector<int>{0, 9}));
}

TEST(AllowedCpus, TheCpusThisProcessMayRunOn) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(static_cast<int>(cpus.size()), CPU_COUNT(&set));
}

TEST(DefaultIntraOpThreads, HonoursOmpNumThreadsElseCountsCores) {
  {
    ScopedEnv env({{"OMP_NUM_THREADS", "3"}});
    EXPECT_EQ(DefaultIntraOpThreads(), 3);
  }
  ScopedEnv env({{"OMP_NUM_THREADS", nullptr}});
  const int cores = DefaultIntraOpThreads();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::thread::hardware_concurrency()));
}

// A root of /proc and /sys: a process's cgroups, their CPU quotas, and the
// topology of a machine of two cores with two threads each (cpu 0 and 2,
// 1 and 3 are one core's).
class FakeCgroups : public testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TempDir() + "/ltb_cgroups_" + std::to_string(::getpid());
    std::filesystem::remove_all(root_);
    for (int cpu = 0; cpu < 4; ++cpu) {
      Write("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                "/topology/physical_package_id",
            "0\n");
      Write("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/core_id",
            std::to_string(cpu % 2) + "\n");
    }
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(
        std::filesystem::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  std::string root_;
};

TEST_F(FakeCgroups, NoQuotaWhereNoLevelSetsOne) {
  Write("/proc/self/cgroup", "0::/app\n");
  Write("/sys/fs/cgroup/app/cpu.max", "max 100000\n");
  EXPECT_LT(ReadCpuQuota(root_).cpus, 0);
  EXPECT_EQ(CpuQuotaText(ReadCpuQuota(root_)), "none (no cgroup CPU quota)");
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 1, 2, 3}), 2);  // a thread per core
  // Nothing to read (no /proc, no cgroups): none either.
  EXPECT_LT(ReadCpuQuota(root_ + "/nowhere").cpus, 0);
}

TEST_F(FakeCgroups, V2QuotaIsTheTightestLevelsAndBoundsTheDefaultThreads) {
  Write("/proc/self/cgroup", "0::/kube/pod/app\n");
  Write("/sys/fs/cgroup/kube/cpu.max", "150000 100000\n");
  Write("/sys/fs/cgroup/kube/pod/cpu.max", "max 100000\n");
  Write("/sys/fs/cgroup/kube/pod/app/cpu.max", "300000 100000\n");
  const CpuQuota quota = ReadCpuQuota(root_);
  EXPECT_DOUBLE_EQ(quota.cpus, 1.5);
  EXPECT_EQ(CpuQuotaText(quota), "1.5 CPUs (cgroup v2 cpu.max 150000 100000)");
  // 1.5 CPUs: 2 threads, the cores' count.
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 1, 2, 3}), 2);
  Write("/sys/fs/cgroup/kube/cpu.max", "50000 100000\n");
  EXPECT_EQ(CpuQuotaText(ReadCpuQuota(root_)),
            "0.5 CPUs (cgroup v2 cpu.max 50000 100000)");
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 1, 2, 3}), 1);
}

TEST_F(FakeCgroups, AContainersOwnCgroupIsTheRootOfItsNamespace) {
  // In a cgroup namespace the path is "/" and /sys/fs/cgroup is the
  // container's own cgroup, quota included.
  Write("/proc/self/cgroup", "0::/\n");
  Write("/sys/fs/cgroup/cpu.max", "100000 100000\n");
  EXPECT_EQ(CpuQuotaText(ReadCpuQuota(root_)), "1 CPU (cgroup v2 cpu.max 100000 100000)");
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 1, 2, 3}), 1);
  // A path the namespace does not show is read at its root.
  Write("/proc/self/cgroup", "0::/../elsewhere\n");
  EXPECT_DOUBLE_EQ(ReadCpuQuota(root_).cpus, 1);
}

TEST_F(FakeCgroups, V1QuotaOverPeriodUnderCpuOrCpuCpuacct) {
  Write("/proc/self/cgroup", "4:memory:/docker/x\n3:cpu,cpuacct:/docker/x\n");
  Write("/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "100000\n");
  Write("/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n");
  Write("/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "-1\n");
  Write("/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CpuQuotaText(ReadCpuQuota(root_)),
            "1 CPU (cgroup v1 cpu.cfs_quota_us 100000 per cpu.cfs_period_us 100000)");
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 1, 2, 3}), 1);
  // Unlimited (-1): none.
  Write("/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "-1\n");
  EXPECT_LT(ReadCpuQuota(root_).cpus, 0);
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 1, 2, 3}), 2);
}

TEST_F(FakeCgroups, TheDefaultThreadsFollowTheAffinity) {
  Write("/proc/self/cgroup", "0::/\n");
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0}), 1);     // taskset -c 0
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 2}), 1);  // one core's two threads
  EXPECT_EQ(DefaultIntraOpThreadsOn(root_, {0, 3}), 2);
}

TEST(CpuListText, NamesRangesAsTheKernelDoes) {
  EXPECT_EQ(CpuListText({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(CpuListText({5}), "5");
  EXPECT_EQ(CpuListText({3, 1, 0}), "0-1,3");
  EXPECT_EQ(AffinityText({0}, 2), "0 (1 of 2 logical CPUs)");
  EXPECT_EQ(AffinityText({0, 1}, 2), "0-1 (2 of 2 logical CPUs)");
}

TEST(ConfigureThreads, NoCountGivenUsesTheSuitesDefault) {
  ThreadSettings settings;
  settings.intra_op = 0;
  ASSERT_TRUE(ConfigureThreads(settings).ok());
  EXPECT_EQ(IntraOpThreads(), DefaultIntraOpThreads());
}

}  // namespace
}  // namespace ltb
