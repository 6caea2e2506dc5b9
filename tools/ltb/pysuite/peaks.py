"""The peaks that mfu and mbu divide by (lib/peaks): given (--peak_flops,
--peak_bandwidth), taken from the context of a bench run (--peaks_from),
a known GPU's datasheet (bench's table, from its facts), or else the best
of torch.matmul measured at start; each with how it was found, which the
context records."""
import math
import os
import platform
import re
import time

import torch

from ltb.pysuite import allowed_cpus, cpu_host, facts
from ltb.pysuite.device import DTYPES, synchronize
from ltb.pysuite.flags import BadFlag
from ltb.results.load import load


def datasheet(gpu_name):
    """bench's datasheet peaks for a CUDA device name (lib/device/datasheets.cc,
    as `bench --list_families` prints them): the first entry whose every
    word is a whole word of the name, in any case, and whose name holds no
    other word than bench's neutral ones and memory sizes ("80GB"): a MIG
    slice or a laptop's chip is not the GPU of the entry. None for another
    GPU."""
    words = {w.lower() for w in re.split(r"[ \-_]", gpu_name) if w}
    neutral = {w.lower() for w in facts.load()["datasheet_neutral_words"]}
    for entry in facts.load()["datasheets"]:
        own = {w.lower() for w in entry["words"]}
        if own <= words and all(w in own or w in neutral or re.fullmatch(r"[0-9]+gb", w)
                                for w in words):
            return entry
    return None


# lib/device/cpu_isa.cc: LTB_MAX_CPU_ISA's levels, and the level of each
# flag that gives a half dtype native arithmetic (lib/peaks/cpu_peak.cc's
# loops: AVX512_BF16's dot products or AMX for bf16, AVX512_FP16 for fp16).
ISA_LEVELS = {"default": 0, "avx2": 1, "avx512": 2}
NATIVE_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16",)}


def match_cpu_simulation(environ=os.environ):
    """lib/device/cpu_isa.cc's MatchCpuSimulation: ATEN_CPU_CAPABILITY=avx2
    or default simulates an older CPU for ATen alone, so oneDNN's and MKL's
    limits and LTB_MAX_CPU_ISA are set to its level where unset, before
    either library first reads its own (oneDNN at its first primitive, MKL
    at its first call). Returns what it set, as bench's cpu_simulation
    says it, or ""."""
    level = environ.get("ATEN_CPU_CAPABILITY") or ""
    # ATen reads the value as it is written, and ignores another (AVX2
    # included): refused as bench refuses it (CheckCpuIsaLimit).
    if level and level not in ISA_LEVELS and platform.machine() in ("x86_64", "AMD64"):
        raise BadFlag(f"ATEN_CPU_CAPABILITY={level} is not a value ATen reads: it ignores it "
                      "and runs this CPU's own kernels, while oneDNN, MKL and the peaks would "
                      "follow it; valid: default, avx2, avx512 (lower case)")
    if level not in ("avx2", "default"):
        return ""
    wanted = (("ONEDNN_MAX_CPU_ISA", "AVX2" if level == "avx2" else "SSE41"),
              ("MKL_ENABLE_INSTRUCTIONS", "AVX2" if level == "avx2" else "SSE4_2"),
              ("LTB_MAX_CPU_ISA", level))
    done = []
    for var, value in wanted:
        if not environ.get(var):
            environ[var] = value
            done.append(f"{var}={value}")
    if not done:
        return ""
    return (f"{' and '.join(done)}, set to match ATEN_CPU_CAPABILITY="
            f"{environ['ATEN_CPU_CAPABILITY']} (an older CPU for oneDNN, MKL and the peaks too)")


def cpu_flags(path="/proc/cpuinfo"):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def native_cpu_arithmetic(dtype, flags=None):
    """Whether bench measures a CPU peak for `dtype` (lib/peaks/cpu_peak.cc):
    fp32 on every x86 CPU, bf16 and fp16 only where the CPU computes in them
    and LTB_MAX_CPU_ISA (which bench sets from ATEN_CPU_CAPABILITY) leaves
    their instructions on; elsewhere LibTorch converts to fp32 and bench
    reports no mfu."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if dtype == "fp32":
        return True
    limit = (os.environ.get("LTB_MAX_CPU_ISA") or "").lower()
    aten = (os.environ.get("ATEN_CPU_CAPABILITY") or "").lower()
    if not limit and aten in ("avx2", "default"):  # as bench's MatchCpuSimulation sets it
        limit = aten
    if ISA_LEVELS.get(limit, 3) < 3:
        return False
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in NATIVE_FLAGS.get(dtype, ()))


def no_native_arithmetic(dtype):
    # Under a simulated older CPU, the limit is what has none (bench's words).
    limit = (os.environ.get("LTB_MAX_CPU_ISA") or "").lower()
    who = f"the CPU simulated (LTB_MAX_CPU_ISA={limit}) has" if limit else "this CPU has"
    return (0.0, f"none: {who} no native {dtype} arithmetic (LibTorch converts it "
                 "to fp32), so no mfu is reported for it")


def cuda_arithmetic_gap(capability, dtype):
    """lib/device/datasheets.cc's CudaArithmeticGap: bf16 came with compute
    capability 8.0 (Ampere); before it LibTorch emulates it in fp32, and a
    peak measured on that emulation would make an mfu look high."""
    major, minor = capability
    if dtype != "bf16" or major <= 0 or major >= 8:
        return None
    return (0.0, f"none: this GPU (compute capability {major}.{minor}) has no bf16 arithmetic "
                 "(LibTorch emulates it in fp32), which came with compute capability 8.0 "
                 "(Ampere), so no mfu is reported for it")


def measure_matmul(device, dtype):
    """FLOP/s of the fastest of five torch.matmul 2048x2048 in `dtype`."""
    a = torch.randn(2048, 2048, device=device).to(DTYPES[dtype])
    b = torch.randn(2048, 2048, device=device).to(DTYPES[dtype])
    best = math.inf
    for _ in range(5):
        synchronize(device)
        t = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - t)
    return 2 * 2048 ** 3 / best


def whole_peak(doc, kind, what, value):
    """A peak of bench's context, written to 4 significant digits, as its
    entries' mfu_peak (mbu_peak for the bandwidth) hold it whole: the least
    of those of the device kind and dtype that round to it (a later
    benchmark's may have been raised); else the context's."""
    counter = "mbu_peak" if what == "bandwidth" else "mfu_peak"
    whole = []
    for e in doc.get("benchmarks", []):
        parts = str(e.get("name", "")).split("/")
        peak = e.get(counter)
        if not isinstance(peak, (int, float)) or len(parts) < 3:
            continue
        if parts[2].split(":")[0] != kind or "tf32" in parts:
            continue
        if what != "bandwidth" and what not in parts:
            continue
        if f"{peak:.4g}" == f"{value:.4g}":
            whole.append(float(peak))
    return min(whole, default=value)


# What a bench run's CPU peaks were measured under: its threads and the
# instructions each library could use (a simulated older CPU's limits).
CPU_PEAK_SETTINGS = ("intra_op_threads", "cpu_capability", "cpu_affinity", "cpu_quota",
                     "aten_cpu_capability", "onednn_max_cpu_isa", "dnnl_max_cpu_isa",
                     "mkl_enable_instructions", "mkl_cbwr", "ltb_max_cpu_isa")
# bench records these always (a file written by hand may lack them); the
# limits, where set.
ALWAYS_RECORDED = CPU_PEAK_SETTINGS[:4]


def check_cpu_peaks_apply(path, context):
    """BadFlag where a bench file's CPU peaks were measured under other
    threads or instructions than this run has: its mfu would divide by
    another machine's peak (two threads' for one, AVX-512's for a simulated
    AVX2 CPU)."""
    host = cpu_host.entries(allowed_cpus(), os.cpu_count())
    here = {"intra_op_threads": str(torch.get_num_threads()),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_affinity": host["cpu_affinity"], "cpu_quota": host["cpu_quota"]}
    for var in CPU_PEAK_SETTINGS[len(ALWAYS_RECORDED):]:
        here[var] = os.environ.get(var.upper()) or None
    # bench records each limit where set; its threads and capability always
    # (a file without them, written by hand, is taken as it is).
    differ = [f"{k} {context.get(k) or 'unset'} there, {here[k] or 'unset'} here"
              for k in CPU_PEAK_SETTINGS
              if (context.get(k) or None) != here[k] and
              not (k in ALWAYS_RECORDED and k not in context)]
    if differ:
        raise BadFlag(f"--peaks_from={path}: its CPU peaks were measured under other settings "
                      f"than this run's ({'; '.join(differ)}): run bench with the same threads "
                      "and environment for them, or give --peak_flops")


def peak_flops(args):
    """{(device kind, dtype or 'bandwidth'): (FLOP/s or bytes/s, how it was
    found)}."""
    peaks = {}
    if args.peak_bandwidth:
        for kind in ("cpu", "cuda"):
            peaks[(kind, "bandwidth")] = (args.peak_bandwidth, "given (--peak_bandwidth)")
    if args.peak_flops:
        for part in args.peak_flops.split(","):
            dtype, _, value = part.rpartition("=")
            try:
                number = float(value)
            except ValueError:
                raise BadFlag(f"--peak_flops={args.peak_flops}: expected a number or "
                          "dtype=number pairs")
            for kind in ("cpu", "cuda"):
                for d in ([dtype] if dtype else DTYPES):
                    peaks[(kind, d)] = (number, "given (--peak_flops)")
    if args.peaks_from:
        doc = load(args.peaks_from)
        if any(d.split(":")[0] == "cpu" for d in args.device_list):
            check_cpu_peaks_apply(args.peaks_from, doc["context"])
        for key, text in doc["context"].items():
            m = (re.fullmatch(r"peak_flops_(cpu|cuda)_(fp32|bf16|fp16)", key)
                 or re.fullmatch(r"peak_bandwidth_(cpu|cuda)()", key))
            value = re.match(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)", str(text))
            if not m or (m[1], m[2] or "bandwidth") in peaks:  # a given peak stays
                continue
            if str(text).startswith("none:"):  # no peak, and bench's reason
                peaks[(m[1], m[2] or "bandwidth")] = (0.0, str(text))
            elif value:
                peaks[(m[1], m[2] or "bandwidth")] = (
                    whole_peak(doc, m[1], m[2] or "bandwidth", float(value[1])),
                    f"bench's, from {args.peaks_from}: {text}")
    # What is neither given nor taken is found as below, as bench finds it:
    # a dtype the bench run did not settle, or one --peak_flops leaves out.
    for device in args.device_list:
        kind = device.split(":")[0]
        # A known GPU: bench's datasheet peaks, as bench divides by them (a
        # dtype the datasheet gives no rate for is measured, as bench does).
        sheet = datasheet(torch.cuda.get_device_name(device)) if kind == "cuda" else None
        if sheet:
            source = f"datasheet: {sheet['model']} ({sheet['source']})"
            peaks.setdefault((kind, "bandwidth"), (sheet["bandwidth"], source))
        for dtype in args.dtypes:
            if (kind, dtype) in peaks:  # given
                continue
            if sheet and sheet[dtype] > 0:
                peaks[(kind, dtype)] = (sheet[dtype], source)
                continue
            gap = (cuda_arithmetic_gap(torch.cuda.get_device_capability(device), dtype)
                   if kind == "cuda" else None)
            if gap:
                peaks[(kind, dtype)] = gap
                continue
            if kind == "cpu" and not native_cpu_arithmetic(dtype):
                peaks[(kind, dtype)] = no_native_arithmetic(dtype)
                continue
            why = (f"{args.peaks_from} holds no peak_flops_{kind}_{dtype}: run bench with "
                   f"--dtype={dtype} on this device for its peak" if args.peaks_from else
                   "give --peaks_from=BENCH.json for the same peak")
            peaks[(kind, dtype)] = (measure_matmul(device, dtype), "measured: the fastest of 5 "
                                    "torch.matmul 2048x2048 (not bench's register-resident "
                                    f"peak: {why})")
    return peaks

