"""A benchmark's entries as Google Benchmark's JSON reporter writes them
(lib/measure/counters.cc): a repetition's rates, step-time spread and
utilisations against the peaks, with the peak memory; the aggregates of
the repetitions; and a benchmark's error."""
import math
import statistics

import torch

from ltb.pysuite import facts
from ltb.pysuite.device import cache_bytes

# Samples of step times kept for the percentiles.
KEPT_SAMPLES = facts.load()["measurement"]["kept_samples"]
# Caches a step must work past to read from memory (lib/peaks).
CACHES_FROM_MEMORY = facts.load()["measurement"]["caches_from_memory"]
# lib/measure/counters.cc's label of a generation of one new token.
NO_DECODE_STEP = ("tpot_ms, tg_tok/s, weight_GB/s, read_GB/s and mbu left out: --new_tokens=1 "
                  "takes its one token from the prefill, and no decode step runs")


def format_bytes(b):
    """As bench's FormatBytes (lib/base/format.cc), for labels that read alike."""
    for unit, scale, digits in (("GiB", 2**30, 2), ("MiB", 2**20, 1), ("KiB", 2**10, 1)):
        if b >= scale:
            return f"{b / scale:.{digits}f} {unit}"
    return f"{int(b)} B"


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def spread(steps):
    """lib/measure/counters.cc StepSpread: nearest-rank percentiles and the CV."""
    s = sorted(steps)

    def pct(p):
        rank = math.ceil(p / 100 * len(s))
        return s[max(rank, 1) - 1] * 1e3
    out = {"step_p50_ms": pct(50), "step_p90_ms": pct(90), "step_p99_ms": pct(99)}
    mean = sum(s) / len(s)
    if len(s) > 1 and mean > 0:
        var = sum((x - mean) ** 2 for x in s) / (len(s) - 1)
        out["step_cv_%"] = 100 * math.sqrt(var) / mean
    return out


def entry(spec, reps, index, iterations, seconds, steps, workload, peaks, rss_reset):
    """One repetition as Google Benchmark's JSON reporter writes it."""
    name = spec.full_name()
    e = {"name": name, "family_index": 0, "per_family_instance_index": 0, "run_name": name,
         "run_type": "iteration", "repetitions": reps, "repetition_index": index,
         "threads": 1, "iterations": iterations,
         "real_time": seconds / iterations * 1e3,
         "cpu_time": workload.cpu_seconds / iterations * 1e3,
         "time_unit": "ms"}
    rate = iterations / seconds
    c = {"FLOP/s": workload.flops_per_step * rate, "params": float(workload.params)}
    if workload.tokens_per_step:
        c["tokens/s"] = workload.tokens_per_step * rate
    if workload.samples_per_step:
        c["samples/s"] = workload.samples_per_step * rate
    if workload.audio_per_step:
        c["audio_s/s"] = workload.audio_per_step * rate
        c["rtf"] = seconds / iterations / workload.audio_per_step  # wall time per audio second
    c.update(workload.counters())
    c.update(spread(steps[:KEPT_SAMPLES]))
    # A utilisation is never above 1: a rate past its peak (a given one, or
    # one taken from bench) leaves it out and says so in the label, as bench.
    omitted = []

    def utilisation(name, rate, peak, what):
        if rate <= peak[0]:
            c[name] = rate / peak[0]
            c[name + "_peak"] = peak[0]
        else:
            omitted.append(f"{name} left out: the rate is {rate / peak[0]:.3g} times the "
                           f"{what} peak {peak[0]:g} ({peak[1]})")

    def bandwidth_utilisation(rate, step_bytes, peak):
        # mbu is memory's, as bench's (lib/peaks): none for a step the
        # device's cache holds, nor for one under CACHES_FROM_MEMORY caches
        # that beats the peak (the cache served part of its reads). Its
        # bytes are named to the nearest byte, as bench names them: a rate
        # times a time lands a hair either side of the whole number.
        cache = cache_bytes(spec.device)
        if cache <= 0 or step_bytes <= 0 or step_bytes >= CACHES_FROM_MEMORY * cache:
            return utilisation("mbu", rate, peak, "bandwidth")
        step = format_bytes(math.floor(step_bytes + 0.5))
        if step_bytes <= cache:
            omitted.append(f"mbu left out: a step works over {step}, which the device's "
                           f"{format_bytes(cache)} cache holds: it reads from the cache, "
                           "not from memory")
        elif rate > peak[0]:
            omitted.append(f"mbu left out: the fastest step's rate is {rate / peak[0]:.3g} "
                           f"times the bandwidth peak (bytes/s) {peak[0]:.4g} ({peak[1]}), "
                           f"and a step's {step} are under {CACHES_FROM_MEMORY} times the "
                           f"device's {format_bytes(cache)} cache, which served part of its "
                           "reads"
                           # A peak given, not measured, may be the one that is wrong.
                           + ("" if peak[1].startswith("measured")
                              else ", or that peak is too low for this device")
                           + " (the peak is not raised for it)")
        else:
            utilisation("mbu", rate, peak, "bandwidth")

    peak = peaks.get((spec.device.split(":")[0], spec.dtype))
    if workload.flops_per_step > 0 and spec.quant.kind == "int8dyn":
        omitted.append("mfu left out: FBGEMM's dynamic int8 linear multiplies in int8, whose "
                       "peak the suite does not measure")
    elif peak and peak[0] <= 0 and workload.flops_per_step > 0:
        # No peak for the dtype, with bench's reason (a CPU without its arithmetic).
        omitted.append("mfu left out: " + peak[1].removeprefix("none: "))
    elif peak and workload.flops_per_step > 0:
        utilisation("mfu", c["FLOP/s"], peak, f"{spec.dtype} FLOP/s")
    bandwidth = peaks.get((spec.device.split(":")[0], "bandwidth"))
    if bandwidth and "weight_GB/s" in c:
        # Decoding's reads: the weights and the cache (read_GB/s), as bench's mbu.
        rate = c.get("read_GB/s", c["weight_GB/s"]) * 1e9
        bandwidth_utilisation(rate, rate * c["tpot_ms"] / 1e3, bandwidth)
    if spec.phase == "generate" and spec.new_tokens == 1:
        omitted.append(NO_DECODE_STEP)
    if workload.skipped() > 0:  # lib/workloads/trainer.cc Trainer::SkippedCaveat
        omitted.append(f"{workload.skipped()} of the measured steps skipped the optimizer: "
                       "fp16's loss scaler found gradients that are not finite (and lowered "
                       "its scale), so those steps changed no weight")
    if omitted:
        e["label"] = "; ".join(omitted)
    if getattr(workload, "compile_s", None) is not None:
        c["compile_s"] = workload.compile_s
    if spec.device.startswith("cuda"):
        c["peak_mem"] = float(torch.cuda.max_memory_allocated(spec.device))
        # As bench's, where steps are launched asynchronously: steps a sample.
        c["launches_per_sample"] = float(getattr(workload, "launches_used", 1))
    rss = peak_rss_bytes() if rss_reset else None
    if rss is not None:
        c["peak_rss"] = float(rss)
    e.update(sorted(c.items()))  # as Google Benchmark orders counters
    return e


def aggregates(entries):
    """Google Benchmark's mean, median, stddev and cv of the repetitions."""
    keys = [k for k, v in entries[0].items() if isinstance(v, float)
            and k not in ("real_time", "cpu_time")]
    out = []
    for agg in ("mean", "median", "stddev", "cv"):
        a = {k: entries[0][k] for k in ("name", "family_index", "per_family_instance_index",
                                        "run_name")}
        a.update(name=entries[0]["run_name"] + "_" + agg, run_type="aggregate",
                 repetitions=len(entries), threads=1, aggregate_name=agg,
                 aggregate_unit="percentage" if agg == "cv" else "time",
                 iterations=len(entries), time_unit="ms")
        for k in ["real_time", "cpu_time"] + keys:
            values = [e[k] for e in entries if k in e]
            if len(values) != len(entries):
                continue
            mean = statistics.fmean(values)
            if agg == "cv" and not mean:
                continue  # no number (0 / 0), left out of the row as bench does
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            a[k] = {"mean": mean, "median": statistics.median(values), "stddev": sd,
                    "cv": sd / mean if mean else 0.0}[agg]
        if entries[0].get("label"):  # Google Benchmark's: the first repetition's
            a["label"] = entries[0]["label"]
        out.append(a)
    return out


def error_entry(spec, message):
    name = spec.full_name()
    return {"name": name, "family_index": 0, "per_family_instance_index": 0,
            "run_name": name, "run_type": "iteration", "repetitions": 1,
            "repetition_index": 0, "threads": 1, "iterations": 0, "real_time": 0.0,
            "cpu_time": 0.0, "time_unit": "ms", "error_occurred": True,
            "error_message": message}

