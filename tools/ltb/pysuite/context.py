"""The run's context (lib/report/context.cc): what decides a comparison
with bench (threads, grad mode, warm-up, malloc, torch's version and its
BLAS, the peaks and how they were found, the compile cache), under
bench's keys."""
import datetime
import os
import platform
import re
import socket
import subprocess
import sys

import torch

from ltb.base import REPO
from ltb.pysuite import allowed_cpus, cpu_host, weights
from ltb.pysuite.flags import COMPILE_CACHES
from ltb.pysuite.host import tf32_text


# lib/suite/suite.cc kPrecision: what a dtype in a name means by phase.
PRECISION = ("inference phases: weights, activations and caches in the dtype; training phases "
             "(/bf16, /fp16): fp32 weights, forward and loss under autocast to the dtype, fp16 "
             "with dynamic loss scaling")


def shared_cache_text():
    """Where Inductor's on-disk cache is and how many files it held when
    the run started: a compile_s over a cache that held the same graphs
    is a warm-cache time."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    where = cache_dir()
    files = sum(len(names) for _, _, names in os.walk(where))
    return f"shared: {where}, {files} files at the start"


def git_commit():
    try:
        out = subprocess.run(["git", "-C", REPO, "describe", "--always",
                              "--dirty", "--abbrev=12"], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def blas():
    config = torch.__config__.show()
    m = re.search(r"BLAS_INFO=([^,\n]+)", config)
    return (m[1].strip() if m else "unknown") + " (linked into LibTorch)"


def blas_threads():
    """lib/base/threads.cc BlasThreads: MKL's own count, as LibTorch's
    parallel summary reads it, else the intra-op count (which torch sets
    the BLAS's to)."""
    m = re.search(r"mkl_get_max_threads\(\) : (\d+)", torch.__config__.parallel_info())
    return m[1] if m else str(torch.get_num_threads())


def mkl_version_in(config):
    """lib/report/context.cc MklVersionIn."""
    m = re.search(r"Math Kernel Library Version (\S.*?) for ", config)
    return m[1] if m else ""


def onednn_version_in(config):
    """lib/report/context.cc OneDnnVersionIn."""
    m = re.search(r"(?:MKL-DNN|oneDNN) v(\S+)(?: \(Git Hash ([0-9a-f]{12}))?", config)
    if not m:
        return ""
    return f"{m[1]} (git {m[2]})" if m[2] else m[1]


def versions():
    """The context's blas_version and onednn_version, as bench writes them."""
    config = torch.__config__.show()
    if "BLAS_INFO=mkl" in config:
        mkl = mkl_version_in(config)
        blas_version = f"MKL {mkl}" if mkl else "MKL, version unknown"
    else:
        blas_version = "unknown"
    if not torch.backends.mkldnn.is_available():
        onednn = "none (LibTorch built without oneDNN)"
    else:
        onednn = onednn_version_in(config) or "unknown"
    return {"blas_version": blas_version, "onednn_version": onednn}


def context(args, threads, peaks):
    grad = {"inference_mode": "inference phases under torch.inference_mode (bench: "
            "c10::InferenceMode)", "no_grad": "inference phases under torch.no_grad",
            "grad": "inference phases with autograd on"}[args.grad_mode]
    c = {
        "date": datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(
            timespec="seconds"),
        "host_name": socket.gethostname(), "executable": os.path.abspath(sys.argv[0]),
        "num_cpus": os.cpu_count(), "mhz_per_cpu": 0, "cpu_scaling_enabled": False,
        "caches": [], "load_avg": list(os.getloadavg()), "library_build_type": "release",
        "runtime": "python", "python_version": platform.python_version(),
        "torch_version": torch.__version__.split("+")[0],
        "libtorch_version": torch.__version__.split("+")[0],
        "blas": blas(), "blas_threads": blas_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_model": cpu_model(), "cpu_logical_cores": str(os.cpu_count()),
        "cpu_tensor_allocator": "PyTorch's default CPU allocator (no statistics: no "
                                "peak_mem on the CPU)",
        "intra_op_threads": str(threads), "inter_op_threads": str(torch.get_num_interop_threads()),
        "malloc": args.malloc_text, "grad_mode": args.grad_mode,
        "precision": PRECISION,
        "grad_mode_detail": grad + "; training phases with "
                     "autograd, AdamW(lr=1e-4) for train_step (vision: SGD, lr 0.1, "
                     "momentum 0.9)",
        "min_time": (f"{args.min_time:g} s (the default suite's)" if args.default_suite
                     and not args.min_time_given else
                     f"as given: --benchmark_min_time={args.benchmark_min_time}"
                     if args.min_time_given else
                     "Google Benchmark's 0.5 s (no --benchmark_min_time)"),
        "warmup": f">= {args.warmup_steps} steps and >= {args.warmup_seconds:g} s",
        "warmup_epochs": f"{args.warmup_epochs} (train_epoch: whole epochs before the "
                         "measured ones)",
        "train_epoch_data": "memory: the dataset generated in RAM once, before the epochs",
        "seed": str(args.seed), "suite_commit": git_commit(), "sync": args.sync,
        "cuda_tf32": tf32_text(),
        "world_size": "1", "process_group": "none",
    }
    c.update(versions())
    # As bench's CPU backend: what this process may use of the machine, and
    # the machine around the cores.
    c.update(cpu_host.entries(allowed_cpus(), os.cpu_count()))
    # As bench records them: settings that simulate an older CPU, round fp32
    # in oneDNN or turn TF32 on or off behind torch's back, how OpenMP's
    # threads wait and where they run, huge pages asked for by the CPU
    # allocator, oneDNN's primitive cache and a preloaded library (jemalloc,
    # tcmalloc: the context's malloc settings then do nothing).
    # And, as bench, every variable of PyTorch's and NVIDIA's libraries (the
    # CUDA allocator's configuration, a launch waiting for the last, an
    # attention kernel passed over, cuBLAS's workspace, NCCL's transport).
    prefixed = sorted(v for v in os.environ
                      if v.startswith(("PYTORCH_", "TORCH_", "TORCHDYNAMO_", "TORCHINDUCTOR_",
                                       "CUBLAS", "CUDNN_", "NCCL_")))
    for var in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "LTB_MAX_CPU_ISA",
                "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_DEFAULT_FPMATH_MODE",
                "DNNL_DEFAULT_FPMATH_MODE", "NVIDIA_TF32_OVERRIDE", "CUDA_LAUNCH_BLOCKING",
                *prefixed, "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
                "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY",
                "OMP_THREAD_LIMIT", "OMP_DYNAMIC", "MKL_DYNAMIC", "MKL_CBWR",
                "MKL_DEBUG_CPU_TYPE", "MKL_VERBOSE", "ONEDNN_VERBOSE", "DNNL_VERBOSE",
                "THP_MEM_ALLOC_ENABLE", "LRU_CACHE_CAPACITY",
                "ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY",
                "LD_PRELOAD"):
        if os.environ.get(var):
            c[var.lower()] = os.environ[var]
    if getattr(args, "cpu_simulation", ""):
        c["cpu_simulation"] = args.cpu_simulation
    if args.scenarios:  # how long LoadGen measures a served benchmark
        c["serve_min"] = (f"{args.serve_min_s:g} s and {args.serve_min_queries} queries a "
                          "LoadGen test at least")
    if args.weights:  # lib/suite/suite.cc: what was loaded, by content
        c["weights"] = args.weights
        try:
            c["weights_sha256"] = weights.checkpoint_sha256(args.weights)
        except weights.BadWeights as e:
            c["weights_sha256"] = f"unreadable: {e}"
    if "compile" in args.runtimes:
        c["compile"] = ("torch.compile(model) with its defaults (Inductor); compile_s: the "
                        "first warm-up step less a warm step")
        c["compile_cache"] = (f"fresh: {COMPILE_CACHES['fresh']}"
                              if args.compile_cache == "fresh" else shared_cache_text())
    c.update(peak_entries(peaks))
    return c


def peak_entries(peaks):
    """The context's peak_flops_* and peak_bandwidth_* entries, as bench
    writes them."""
    c = {}
    for (kind, dtype), (value, how) in sorted(peaks.items()):
        if dtype == "bandwidth":
            c[f"peak_bandwidth_{kind}"] = f"{value:.4g} bytes/s ({how})"
        elif value <= 0:  # none, and why, in bench's words
            c[f"peak_flops_{kind}_{dtype}"] = how
        else:
            c[f"peak_flops_{kind}_{dtype}"] = f"{value:.4g} FLOP/s ({how})"
    return c

