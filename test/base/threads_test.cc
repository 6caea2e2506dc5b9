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

TEST(ConfigureThreads, NoCountGivenUsesTheSuitesDefault) {
  ThreadSettings settings;
  settings.intra_op = 0;
  ASSERT_TRUE(ConfigureThreads(settings).ok());
  EXPECT_EQ(IntraOpThreads(), DefaultIntraOpThreads());
}

}  // namespace
}  // namespace ltb
