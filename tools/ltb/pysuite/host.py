"""The process's settings made before anything is measured, as bench makes
them: the intra-op and inter-op threads (lib/base/threads.cc) and glibc
malloc's (lib/measure/memory.cc)."""
import math
import os

import torch

from ltb.pysuite import allowed_cpus
from ltb.pysuite.flags import MALLOC, BadFlag

# lib/measure/memory.cc ConfigureMalloc: glibc's mallopt parameters.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4


def physical_cores(root="", cpus=None):
    """lib/base/threads.cc DefaultIntraOpThreads: OMP_NUM_THREADS if set,
    else default_threads_on this machine and this process's CPUs."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return default_threads_on(root, allowed_cpus() if cpus is None else cpus)


def default_threads_on(root, cpus):
    """lib/base/threads.cc DefaultIntraOpThreadsOn: one thread per physical
    core (package, core) of `cpus`, a CPU without topology files a core of
    its own, no more than the cgroup's CPU quota rounded up, at least 1."""
    cores, unknown = set(), 0
    for cpu in cpus:
        topo = f"{root}/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(topo + "physical_package_id") as a, open(topo + "core_id") as b:
                cores.add((int(a.read()), int(b.read())))
        except (OSError, ValueError):
            unknown += 1
    threads = max(1, len(cores) + unknown)
    quota, _ = cpu_quota(root)
    if quota > 0:
        threads = min(threads, max(1, math.ceil(quota)))
    return threads


def read_text(path):
    """A file's text, stripped; "" where it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _quota_of(directory, v2):
    """lib/base/threads.cc QuotaOf: (CPUs, source) of one cgroup, or (-1, "")."""
    try:
        if v2:
            text = read_text(os.path.join(directory, "cpu.max"))
            words = text.split()
            if len(words) == 2 and int(words[0]) > 0 and int(words[1]) > 0:
                return int(words[0]) / int(words[1]), f"cgroup v2 cpu.max {text}"
        else:
            quota = int(read_text(os.path.join(directory, "cpu.cfs_quota_us")))
            period = int(read_text(os.path.join(directory, "cpu.cfs_period_us")))
            if quota > 0 and period > 0:
                return quota / period, (f"cgroup v1 cpu.cfs_quota_us {quota} per "
                                        f"cpu.cfs_period_us {period}")
    except ValueError:
        pass
    return -1, ""


def _walk_quota(directory, top, v2, best):
    """The tightest quota from `directory` up to `top` (lib/base/threads.cc
    WalkQuota); a path the cgroup namespace does not show is read at `top`."""
    if not os.path.isdir(directory):
        directory = top
    while True:
        here = _quota_of(directory, v2)
        if here[0] > 0 and (best[0] < 0 or here[0] < best[0]):
            best = here
        parent = os.path.dirname(directory)
        if directory == top or parent == directory:
            return best
        directory = parent


def cpu_quota(root=""):
    """lib/base/threads.cc ReadCpuQuota: (CPUs, source) of the tightest CPU
    quota of this process's cgroup and those above it, v2's cpu.max or v1's
    cpu.cfs_quota_us over cpu.cfs_period_us; (-1, "") where none is set."""
    best = (-1, "")
    for line in read_text(f"{root}/proc/self/cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        path = parts[2][1:]
        if parts[0] == "0" and parts[1] == "":
            for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                top = root + mount
                best = _walk_quota(os.path.join(top, path) if path else top, top, True, best)
        elif "cpu" in parts[1].split(","):
            for mount in ("cpu", parts[1]):
                top = f"{root}/sys/fs/cgroup/{mount}"
                best = _walk_quota(os.path.join(top, path) if path else top, top, False, best)
    return best


def cpu_quota_text(quota):
    """lib/base/threads.cc CpuQuotaText."""
    cpus, source = quota
    if cpus < 0:
        return "none (no cgroup CPU quota)"
    return f"{cpus:g} CPU{'' if cpus == 1 else 's'} ({source})"


def cpu_list_text(cpus):
    """lib/base/threads.cc CpuListText: [0, 1, 2, 3, 8] is "0-3,8"."""
    ranges, run = [], []
    for cpu in sorted(set(cpus)):
        if run and cpu != run[-1] + 1:
            ranges.append(run)
            run = []
        run.append(cpu)
    if run:
        ranges.append(run)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in ranges)


def affinity_text(cpus, online):
    """lib/base/threads.cc AffinityText: "0-1 (2 of 2 logical CPUs)"."""
    return f"{cpu_list_text(cpus)} ({len(cpus)} of {online} logical CPUs)"


def malloc_library():
    """lib/measure/memory.cc's MallocLibrary: the file of the library whose
    malloc the process calls ("" when unknown)."""
    import ctypes

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    try:
        libc = ctypes.CDLL(None)
        info = DlInfo()
        if libc.dladdr(ctypes.cast(libc.malloc, ctypes.c_void_p), ctypes.byref(info)):
            return (info.dli_fname or b"").decode(errors="replace")
    except (OSError, AttributeError):
        pass
    return ""


def malloc_description(glibc, library):
    """lib/measure/memory.cc's MallocDescription: glibc's settings where glibc
    serves malloc (or it is unknown), else the library that does."""
    file = os.path.basename(library)
    if not library or file.startswith(("libc.so", "libc-")):
        return glibc
    return (f"{library}'s malloc (preloaded or linked before glibc's), so --malloc's glibc "
            "settings do not apply")


def configure_malloc(mode):
    """bench's malloc settings: large blocks kept on the heap rather than
    unmapped on free and faulted in again at the next step."""
    if mode == "system":
        return malloc_description(MALLOC[mode], malloc_library())
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        ok = (libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1
              and libc.mallopt(M_TOP_PAD, 64 << 20) == 1)
    except (OSError, AttributeError):
        ok = False
    if not ok:
        raise BadFlag("mallopt rejected the tuned settings (not glibc?): give --malloc=system")
    return malloc_description(MALLOC[mode], malloc_library())


def configure_fp32(cuda=False, cpu_fp32=False):
    """lib/device/cuda_backend.cc: fp32 means fp32. PyTorch lets cuDNN run
    fp32 convolutions as TF32 by default (LibTorch too, which bench turns
    off), so that fp32's convolutions on a GPU would be TF32's, faster than
    bench's and with an mfu against the fp32 peak; matmuls are off already
    unless asked for, and stay so. A run on CUDA is refused where the
    environment keeps matmuls TF32 (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1), and
    one with CPU fp32 benchmarks where it lets oneDNN compute fp32 in a
    narrower type (ONEDNN_DEFAULT_FPMATH_MODE other than STRICT), as bench
    refuses them (lib/device/device.cc)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    if cuda and os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1":
        raise BadFlag("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes every fp32 matmul on CUDA "
                      "TF32, which fp32 names do not say: unset it")
    for name in ("ONEDNN_DEFAULT_FPMATH_MODE", "DNNL_DEFAULT_FPMATH_MODE"):
        value = os.environ.get(name, "")
        if cpu_fp32 and value and value.lower() != "strict":
            raise BadFlag(f"{name}={value} lets oneDNN compute fp32 in a narrower type, "
                          "which fp32 names do not say: unset it, and run --dtype=bf16 "
                          "(or fp16) for what a narrower type does")


def tf32_text():
    """The context's cuda_tf32, in bench's words."""
    on = {True: "on", False: "off"}
    return (f"matmul {on[torch.backends.cuda.matmul.allow_tf32]}, "
            f"convolution {on[torch.backends.cudnn.allow_tf32]}")


def configure_threads(args):
    """The intra-op threads, set; BadFlag where OpenMP's own settings would
    run fewer than that, as bench refuses them (lib/base/threads.cc)."""
    intra = args.threads or physical_cores()
    limit = os.environ.get("OMP_THREAD_LIMIT", "").strip()
    if limit.isdigit() and 0 < int(limit) < intra:
        raise BadFlag(f"OMP_THREAD_LIMIT={limit} holds OpenMP to {int(limit)} "
                      f"thread{'' if int(limit) == 1 else 's'}, fewer than the {intra} intra-op "
                      "threads this run would report (--threads, OMP_NUM_THREADS or the "
                      f"cores): unset it, or run --threads={int(limit)}")
    if os.environ.get("OMP_DYNAMIC", "").strip().lower() == "true":
        raise BadFlag("OMP_DYNAMIC=true lets OpenMP run fewer threads than asked as the "
                      "machine's load goes, so no step's thread count is known: unset it")
    torch.set_num_threads(intra)  # also MKL's and OpenMP's, as at::set_num_threads
    try:
        torch.set_num_interop_threads(args.interop_threads)
    except RuntimeError:
        pass  # already started: the count is fixed
    return intra

