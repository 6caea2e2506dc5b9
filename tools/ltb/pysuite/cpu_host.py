"""What of the host decides how fast a CPU run goes, as bench's context
records it (lib/base/cpu_host.cc): huge pages, frequency scaling, SMT,
NUMA, the kernel, a hypervisor. Each reader takes `root` ("" for this
machine; a test's copy of /proc and /sys otherwise)."""
import os
import platform
import re

from ltb.pysuite.host import (affinity_text, cpu_list_text, cpu_quota, cpu_quota_text,
                              read_text)


def _line(path):
    return (read_text(path).splitlines() or [""])[0].strip()


def _chosen(text):
    """The bracketed choice of a sysfs setting: "madvise" of "always
    [madvise] never"."""
    m = re.search(r"\[([^\]]*)\]", text)
    return m[1] if m else text


def _numbered(directory, prefix):
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(n[len(prefix):]) for n in names
                  if n.startswith(prefix) and n[len(prefix):].isdigit())


def parse_cpu_list(text):
    """The kernel's CPU list ("0-3,8") as numbers."""
    cpus = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def transparent_hugepages(root=""):
    """lib/base/cpu_host.cc TransparentHugePages: "madvise (defrag:
    madvise)"; "" where /sys does not say."""
    directory = f"{root}/sys/kernel/mm/transparent_hugepage/"
    enabled = _line(directory + "enabled")
    if not enabled:
        return ""
    defrag = _line(directory + "defrag")
    return f"{_chosen(enabled)} (defrag: {_chosen(defrag)})" if defrag else _chosen(enabled)


def cpu_frequency_scaling(root, cpus):
    """lib/base/cpu_host.cc CpuFrequencyScaling: the governors of `cpus`,
    the driver, the energy preference and turbo or boost; absent, and said
    so, where /sys has no cpufreq."""
    sys_cpu = f"{root}/sys/devices/system/cpu/"
    governors, drivers, preference = {}, set(), ""
    for cpu in cpus:
        directory = f"{sys_cpu}cpu{cpu}/cpufreq/"
        governor = _line(directory + "scaling_governor")
        if not governor:
            continue
        governors.setdefault(governor, []).append(cpu)
        driver = _line(directory + "scaling_driver")
        if driver:
            drivers.add(driver)
        preference = preference or _line(directory + "energy_performance_preference")
    if not governors:
        return "absent (no cpufreq in /sys: the hypervisor or the firmware sets the frequency)"
    parts = [g if len(governors) == 1 else f"{g} on {cpu_list_text(on)}"
             for g, on in governors.items()]
    notes = []
    if drivers:
        notes.append("driver " + ", ".join(sorted(drivers)))
    if preference:
        notes.append("energy preference " + preference)
    no_turbo = _line(sys_cpu + "intel_pstate/no_turbo")
    boost = _line(sys_cpu + "cpufreq/boost")
    if no_turbo in ("0", "1"):
        notes.append("turbo on" if no_turbo == "0" else "turbo off")
    elif boost in ("0", "1"):
        notes.append("boost on" if boost == "1" else "boost off")
    text = ", ".join(parts)
    return f"{text} ({', '.join(notes)})" if notes else text


def threads_per_core(root=""):
    """lib/base/cpu_host.cc ThreadsPerCore: "2 threads per core (SMT on)";
    "" where the topology files are missing."""
    sys_cpu = f"{root}/sys/devices/system/cpu/"
    threads = {}
    for cpu in _numbered(sys_cpu, "cpu"):
        topo = f"{sys_cpu}cpu{cpu}/topology/"
        package, core = _line(topo + "physical_package_id"), _line(topo + "core_id")
        if package and core:
            threads[(package, core)] = threads.get((package, core), 0) + 1
    if not threads:
        return ""
    most = max(threads.values())
    text = f"{most} thread{'' if most == 1 else 's'} per core"
    control = _line(sys_cpu + "smt/control")
    words = {"notsupported": "no SMT", "forceoff": "SMT forced off",
             "notimplemented": "SMT control not implemented"}
    return f"{text} ({words.get(control, f'SMT {control}')})" if control else text


def numa_nodes(root, cpus):
    """lib/base/cpu_host.cc NumaNodes: "2 (this process's CPUs on node
    0)"; "" where /sys has no node directory."""
    directory = f"{root}/sys/devices/system/node/"
    nodes = _numbered(directory, "node")
    if not nodes:
        return ""
    mine = set(cpus)
    used = [n for n in nodes
            if mine & set(parse_cpu_list(_line(f"{directory}node{n}/cpulist")))]
    return (f"{len(nodes)} (this process's CPUs on node{' ' if len(used) == 1 else 's '}"
            f"{cpu_list_text(used) if used else 'unknown'})")


def kernel_release():
    """lib/base/cpu_host.cc KernelRelease: "Linux 6.8.0-45-generic"."""
    return f"{platform.system()} {platform.release()}"


def virtual_machine(root=""):
    """lib/base/cpu_host.cc VirtualMachine: the hypervisor flag of
    /proc/cpuinfo, with the machine's name where Xen or DMI gives it; ""
    where /proc/cpuinfo has no flags."""
    try:
        with open(f"{root}/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), None)
    except (OSError, UnicodeDecodeError):
        flags = None
    if flags is None:
        return ""
    if "hypervisor" not in flags.partition(":")[2].split():
        return "no (no hypervisor flag)"
    machine = _line(f"{root}/sys/hypervisor/type")
    if not machine:
        machine = " ".join(w for w in (_line(f"{root}/sys/class/dmi/id/sys_vendor"),
                                       _line(f"{root}/sys/class/dmi/id/product_name")) if w)
    return f"yes (hypervisor flag; {machine})" if machine else "yes (hypervisor flag)"


def entries(cpus, online):
    """The CPU backend's context entries of the host (lib/device/
    cpu_backend.cc), in bench's order: the affinity and the quota always,
    the rest where /proc and /sys say."""
    c = {"cpu_affinity": affinity_text(cpus, online),
         "cpu_quota": cpu_quota_text(cpu_quota())}
    for key, value in (("cpu_threads_per_core", threads_per_core()),
                       ("numa_nodes", numa_nodes("", cpus)),
                       ("cpu_frequency_scaling", cpu_frequency_scaling("", cpus)),
                       ("transparent_hugepages", transparent_hugepages()),
                       ("kernel", kernel_release()),
                       ("virtual_machine", virtual_machine())):
        if value:
            c[key] = value
    return c
