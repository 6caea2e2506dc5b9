#include "base/cpu_host.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"

namespace ltb {
namespace {

// A root of /proc and /sys to write a machine into.
class FakeHost : public testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TempDir() + "/ltb_cpu_host_" + std::to_string(::getpid());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(
        std::filesystem::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  // cpu<N>/topology of `cpus` CPUs, `per_core` threads a core, numbered as
  // Linux numbers them (cpu N and N + cores are one core's).
  void Topology(int cpus, int per_core) {
    for (int cpu = 0; cpu < cpus; ++cpu) {
      const std::string topo =
          "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      Write(topo + "physical_package_id", "0\n");
      Write(topo + "core_id", std::to_string(cpu % (cpus / per_core)) + "\n");
    }
  }
  std::string root_;
};

TEST_F(FakeHost, NothingToReadSaysNothing) {
  EXPECT_EQ(TransparentHugePages(root_), "");
  EXPECT_EQ(ThreadsPerCore(root_), "");
  EXPECT_EQ(NumaNodes(root_, {0, 1}), "");
  EXPECT_EQ(VirtualMachine(root_), "");
  // No cpufreq (a VM's): absent, and said so.
  EXPECT_TRUE(absl::StartsWith(CpuFrequencyScaling(root_, {0, 1}), "absent (no cpufreq"));
}

TEST_F(FakeHost, TransparentHugePagesAreTheBracketedChoices) {
  Write("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  Write("/sys/kernel/mm/transparent_hugepage/defrag",
        "always defer defer+madvise [madvise] never\n");
  EXPECT_EQ(TransparentHugePages(root_), "madvise (defrag: madvise)");
  Write("/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n");
  Write("/sys/kernel/mm/transparent_hugepage/defrag", "always [defer] madvise never\n");
  EXPECT_EQ(TransparentHugePages(root_), "always (defrag: defer)");
}

TEST_F(FakeHost, FrequencyScalingNamesGovernorsDriverAndTurbo) {
  for (int cpu = 0; cpu < 4; ++cpu) {
    const std::string dir =
        "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpufreq/";
    Write(dir + "scaling_governor", cpu < 2 ? "performance\n" : "powersave\n");
    Write(dir + "scaling_driver", "intel_pstate\n");
    Write(dir + "energy_performance_preference", "performance\n");
  }
  Write("/sys/devices/system/cpu/intel_pstate/no_turbo", "0\n");
  EXPECT_EQ(CpuFrequencyScaling(root_, {0, 1}),
            "performance (driver intel_pstate, energy preference performance, turbo on)");
  EXPECT_EQ(
      CpuFrequencyScaling(root_, {0, 1, 2, 3}),
      "performance on 0-1, powersave on 2-3 (driver intel_pstate, energy preference "
      "performance, turbo on)");
  Write("/sys/devices/system/cpu/intel_pstate/no_turbo", "1\n");
  EXPECT_TRUE(absl::EndsWith(CpuFrequencyScaling(root_, {0}), "turbo off)"));
}

TEST_F(FakeHost, AcpiCpufreqSaysWhetherBoostIsOn) {
  Write("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "schedutil\n");
  Write("/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver", "acpi-cpufreq\n");
  Write("/sys/devices/system/cpu/cpufreq/boost", "1\n");
  EXPECT_EQ(CpuFrequencyScaling(root_, {0}), "schedutil (driver acpi-cpufreq, boost on)");
  Write("/sys/devices/system/cpu/cpufreq/boost", "0\n");
  EXPECT_EQ(CpuFrequencyScaling(root_, {0}),
            "schedutil (driver acpi-cpufreq, boost off)");
}

TEST_F(FakeHost, ThreadsPerCoreFromTheTopology) {
  Topology(4, 2);
  Write("/sys/devices/system/cpu/smt/control", "on\n");
  EXPECT_EQ(ThreadsPerCore(root_), "2 threads per core (SMT on)");
  std::filesystem::remove_all(root_ + "/sys");
  Topology(2, 1);
  Write("/sys/devices/system/cpu/smt/control", "notsupported\n");
  EXPECT_EQ(ThreadsPerCore(root_), "1 thread per core (no SMT)");
  Write("/sys/devices/system/cpu/smt/control", "forceoff\n");
  EXPECT_EQ(ThreadsPerCore(root_), "1 thread per core (SMT forced off)");
}

TEST_F(FakeHost, NumaNodesAndThoseOfThisProcesssCpus) {
  Write("/sys/devices/system/node/node0/cpulist", "0-3,8-11\n");
  Write("/sys/devices/system/node/node1/cpulist", "4-7,12-15\n");
  Write("/sys/devices/system/node/online", "0-1\n");
  EXPECT_EQ(NumaNodes(root_, {0, 1}), "2 (this process's CPUs on node 0)");
  EXPECT_EQ(NumaNodes(root_, {12}), "2 (this process's CPUs on node 1)");
  EXPECT_EQ(NumaNodes(root_, {3, 4}), "2 (this process's CPUs on nodes 0-1)");
}

TEST_F(FakeHost, AVirtualMachineByItsHypervisorFlag) {
  Write("/proc/cpuinfo",
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu vme avx2 hypervisor "
        "lahf_lm\n\nprocessor\t: 1\n");
  EXPECT_EQ(VirtualMachine(root_), "yes (hypervisor flag)");
  Write("/sys/class/dmi/id/sys_vendor", "QEMU\n");
  Write("/sys/class/dmi/id/product_name", "Standard PC (Q35 + ICH9, 2009)\n");
  EXPECT_EQ(VirtualMachine(root_),
            "yes (hypervisor flag; QEMU Standard PC (Q35 + ICH9, 2009))");
  Write("/sys/hypervisor/type", "xen\n");
  EXPECT_EQ(VirtualMachine(root_), "yes (hypervisor flag; xen)");
  // "hypervisor" must be a flag of its own, not part of one.
  Write("/proc/cpuinfo", "flags\t\t: fpu vme avx2 not_hypervisor\n");
  EXPECT_EQ(VirtualMachine(root_), "no (no hypervisor flag)");
}

}  // namespace
}  // namespace ltb
