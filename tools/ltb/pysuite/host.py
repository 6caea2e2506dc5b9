"""The process's settings made before anything is measured, as bench makes
them: the intra-op and inter-op threads (lib/base/threads.cc) and glibc
malloc's (lib/measure/memory.cc)."""
import os

import torch

from ltb.pysuite.flags import MALLOC, BadFlag

# lib/measure/memory.cc ConfigureMalloc: glibc's mallopt parameters.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4


def physical_cores():
    """lib/base/threads.cc DefaultIntraOpThreads: OMP_NUM_THREADS if set,
    else the physical cores (package, core) of this process's CPUs."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores, unknown = set(), 0
    for cpu in sorted(os.sched_getaffinity(0)):
        topo = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(topo + "physical_package_id") as a, open(topo + "core_id") as b:
                cores.add((int(a.read()), int(b.read())))
        except (OSError, ValueError):
            unknown += 1
    return max(1, len(cores) + unknown)


def configure_malloc(mode):
    """bench's malloc settings: large blocks kept on the heap rather than
    unmapped on free and faulted in again at the next step."""
    if mode == "system":
        return MALLOC[mode]
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        ok = (libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1
              and libc.mallopt(M_TOP_PAD, 64 << 20) == 1)
    except (OSError, AttributeError):
        ok = False
    if not ok:
        raise BadFlag("mallopt rejected the tuned settings (not glibc?): give --malloc=system")
    return MALLOC[mode]


def configure_fp32(cuda=False):
    """lib/device/cuda_backend.cc: fp32 means fp32. PyTorch lets cuDNN run
    fp32 convolutions as TF32 by default (LibTorch too, which bench turns
    off), so that fp32's convolutions on a GPU would be TF32's, faster than
    bench's and with an mfu against the fp32 peak; matmuls are off already
    unless asked for, and stay so. A run on CUDA is refused where the
    environment keeps matmuls TF32 (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1), as
    bench refuses it (lib/device/device.cc, CheckTf32Environment)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    if cuda and os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1":
        raise BadFlag("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes every fp32 matmul on CUDA "
                      "TF32, which fp32 names do not say: unset it")


def tf32_text():
    """The context's cuda_tf32, in bench's words."""
    on = {True: "on", False: "off"}
    return (f"matmul {on[torch.backends.cuda.matmul.allow_tf32]}, "
            f"convolution {on[torch.backends.cudnn.allow_tf32]}")


def configure_threads(args):
    intra = args.threads or physical_cores()
    torch.set_num_threads(intra)  # also MKL's and OpenMP's, as at::set_num_threads
    try:
        torch.set_num_interop_threads(args.interop_threads)
    except RuntimeError:
        pass  # already started: the count is fixed
    return intra

