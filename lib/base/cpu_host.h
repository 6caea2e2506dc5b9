// What of the host, besides the CPU's model and the threads, decides how fast
// a CPU run goes: huge pages, frequency scaling, SMT, NUMA, the kernel, a
// hypervisor. The CPU backend's context entries (docs/measurement.md, "The
// run context"); each reader takes `root` ("" for this machine; a test's
// copy of /proc and /sys otherwise).
#pragma once

#include <string>
#include <vector>

namespace ltb {

// Transparent huge pages: the kernel's setting and its defrag policy
// ("madvise (defrag: madvise)"); "" where /sys does not say. "always" backs
// large tensors with 2 MiB pages, "madvise" only what asks for them
// (LibTorch's allocator does with THP_MEM_ALLOC_ENABLE=1).
std::string TransparentHugePages(const std::string& root);

// Frequency scaling of `cpus`: the governors, the driver and whether turbo
// or boost is on ("performance (driver intel_pstate, turbo on)"); where /sys
// has no cpufreq (most VMs), says so.
std::string CpuFrequencyScaling(const std::string& root, const std::vector<int>& cpus);

// Threads per core, the most any core has online ("2 threads per core (SMT
// on)"); "" where the topology files are missing.
std::string ThreadsPerCore(const std::string& root);

// The NUMA nodes and those of `cpus` ("2 (this process's CPUs on node
// 0)"); "" where /sys has no node directory.
std::string NumaNodes(const std::string& root, const std::vector<int>& cpus);

// The kernel ("Linux 6.8.0-45-generic").
std::string KernelRelease();

// Whether the CPU reports running under a hypervisor (the "hypervisor" flag
// of /proc/cpuinfo), with the machine's name where DMI or Xen gives it:
// "yes (hypervisor flag; QEMU Standard PC)", "no (no hypervisor flag)";
// "" where /proc/cpuinfo has no flags.
std::string VirtualMachine(const std::string& root);

}  // namespace ltb
