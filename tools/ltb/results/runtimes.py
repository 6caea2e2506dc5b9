"""C++ beside Python: one benchmark's runtimes lined up by name (bench's
.../dtype, .../dtype/aoti and .../dtype/torchscript; tools/pybench's
.../dtype/py_eager and .../dtype/py_compile), and tools/report's "C++ and
Python" table: each runtime's ratio to Python eager, its 95% confidence
interval and a verdict. docs/cpp-and-python.md, "What the table says".
"""
import math
import re
import statistics

from ltb.base import require
from ltb.results.entries import collect
from ltb.results.format import format_seconds, markdown_table
from ltb.results.names import base_name, parse_name

# The intervals' t quantiles are scipy's (a tool run by a Python without it
# starts again with the project's venv).
require("scipy")

CPP_EAGER = "cpp_eager"
# Runtimes in the table's order, with what each is.
RUNTIMES = {
    CPP_EAGER: "C++ eager (LibTorch)",
    "aoti": "C++ AOTInductor",
    "torchscript": "C++ TorchScript",
    "py_eager": "Python eager",
    "py_compile": "Python torch.compile",
}
LABELS = tuple(r for r in RUNTIMES if r != CPP_EAGER)
REFERENCE = "py_eager"
# bench runs inference phases under c10::InferenceMode (lib/workloads/
# phases.cc, generation.cc) and says so in its context's grad_mode; a bench
# file from before it did ran that way too.
BENCH_GRAD_MODE = "inference_mode"
TRAINING_PHASES = ("forward_backward", "train_step", "train_epoch")
# TorchScript's profiling executor runs its first calls unoptimised.
TORCHSCRIPT_PROFILING_RUNS = 2
_RUNTIME = re.compile(r"/(" + "|".join(LABELS) + r")(?=/|_|$)")


def split_runtime(name):
    """('GPT2/small/cpu/forward/batch:1/seq:64/fp32', 'py_eager') from a
    suite name (Google Benchmark's suffixes already removed)."""
    head, _, last = name.rpartition("/")
    if last in LABELS:
        return head, last
    return name, CPP_EAGER


def runtime_of(doc):
    """The eager runtime of a result file: Python's for tools/pybench's."""
    return REFERENCE if doc["context"].get("runtime") == "python" else CPP_EAGER


def strip_runtimes(doc, keep=None):
    """The document with only the entries of one runtime (`keep`, else the
    file's eager one), named without it: a bench file and a pybench file
    then pair by name in compare.py."""
    keep = keep or runtime_of(doc)
    kept = []
    for e in doc["benchmarks"]:
        _, runtime = split_runtime(base_name(e))
        if runtime != keep:
            continue
        e = dict(e)
        for key in ("name", "run_name"):
            if key in e:
                e[key] = _RUNTIME.sub("", e[key])
        kept.append(e)
    return dict(doc, benchmarks=kept)


def _warmup(text):
    """(steps, seconds) from a context's 'warmup': '>= 1 steps and >= 0.5 s'."""
    m = re.search(r">=\s*(\d+)\s*steps.*?>=\s*([0-9.]+)\s*s", str(text or ""))
    return (int(m[1]), float(m[2])) if m else None


_AFFINITY_COUNTS = re.compile(r"\((\d+) of (\d+) logical CPUs\)$")


def unrestricted(key, value):
    """Whether a context field says the run could use the whole machine: all
    its CPUs (cpu_affinity "0-1 (2 of 2 logical CPUs)") or no CPU quota
    (cpu_quota "none (no cgroup CPU quota)"). Such a field is left out of the
    history's fingerprint, so that runs made before bench recorded it stay
    in the series of runs made after, and out of a comparison's settings."""
    if key == "cpu_affinity":
        counts = _AFFINITY_COUNTS.search(value)
        return bool(counts) and counts[1] == counts[2]
    if key == "cpu_quota":
        return value.startswith("none")
    return False


def cpu_limits(context):
    """The CPUs a run was held to where less than the machine's (its
    affinity, its cgroup's quota), as one text, or None."""
    held = [f"{k.split('_')[1]} {context[k]}" for k in ("cpu_affinity", "cpu_quota")
            if context.get(k) and not unrestricted(k, str(context[k]))]
    return ", ".join(held) or None


def settings(doc, phase):
    """What a run's context says about the settings a comparison must share."""
    c = doc["context"]
    grad = "grad" if phase in TRAINING_PHASES else c.get("grad_mode", BENCH_GRAD_MODE)
    machine = c.get("host_name")
    if machine and c.get("cpu_model"):
        machine = f"{machine} ({c['cpu_model']})"
    return {"machine": machine, "cpus": cpu_limits(c) or "all",
            "threads": c.get("intra_op_threads"), "interop threads": c.get("inter_op_threads"),
            "grad mode": grad,
            "malloc": _malloc(c.get("malloc", "system" if c.get("runtime") == "python" else None)),
            "instructions": _instructions(c), "LibTorch": c.get("libtorch_version"),
            "BLAS": c.get("blas"), "seed": c.get("seed"),
            "warm-up": _warmup(c.get("warmup"))}


# The context's keys that limit the instructions a CPU run used (a
# simulated older CPU, MKL's code path), beside ATen's capability.
_INSTRUCTION_LIMITS = ("aten_cpu_capability", "onednn_max_cpu_isa", "dnnl_max_cpu_isa",
                       "mkl_enable_instructions", "mkl_cbwr", "ltb_max_cpu_isa")


def _instructions(context):
    """ATen's CPU capability and the limits set beside it ('AVX2
    (onednn_max_cpu_isa=AVX2, ...)'), or None where the context has neither."""
    capability = context.get("cpu_capability")
    limits = [f"{k}={context[k]}" for k in _INSTRUCTION_LIMITS if context.get(k)]
    if capability is None and not limits:
        return None
    return f"{capability or '?'}" + (f" ({', '.join(limits)})" if limits else "")


def _malloc(text):
    """'tuned' or 'system' from a context's malloc, or the file of the
    library that served malloc instead of glibc ('libjemalloc.so.2'); a
    tools/pybench file from before it tuned malloc ran with glibc's
    defaults."""
    if text is None:
        return None
    other = re.match(r"(\S+)'s malloc \(preloaded", str(text))
    if other:
        return other[1].rsplit("/", 1)[-1]
    return "tuned" if "tuned" in str(text) else "system"


def setting_notes(mine, reference, runtime):
    """Sentences for the settings that differ from the reference run's, and
    for a TorchScript run whose warm-up may have timed its profiling runs."""
    notes = []
    for key in ("machine", "cpus", "threads", "interop threads", "grad mode", "malloc",
                "instructions", "LibTorch", "BLAS", "seed"):
        if mine[key] is not None and reference[key] is not None and \
                str(mine[key]) != str(reference[key]):
            notes.append(f"{key} {mine[key]} vs {reference[key]}")
    if mine["warm-up"] and reference["warm-up"] and mine["warm-up"] != reference["warm-up"]:
        notes.append("warm-up {} steps/{:g} s vs {} steps/{:g} s".format(
            *mine["warm-up"], *reference["warm-up"]))
    if runtime == "torchscript" and mine["warm-up"] and \
            mine["warm-up"][0] < TORCHSCRIPT_PROFILING_RUNS and mine["warm-up"][1] == 0:
        notes.append(f"warm-up of {mine['warm-up'][0]} step(s): TorchScript's profiling "
                     f"executor optimises after {TORCHSCRIPT_PROFILING_RUNS} calls")
    return notes


def t_quantile(df):
    """The 97.5% quantile of Student's t, scipy's: exact at the few degrees
    of freedom that rounds pooled by their means have."""
    from scipy import stats
    return float(stats.t.ppf(0.975, df))


def ratio_interval(times, reference):
    """(ratio of geometric means, (low, high) 95% interval or None): Welch's
    t on the logarithms of the repetitions' times, centred on the ratio;
    None with fewer than two a side. A ratio of arithmetic means could lie
    outside its own interval when the times are skewed."""
    a, b = [math.log(t) for t in times], [math.log(t) for t in reference]
    ratio = math.exp(statistics.fmean(a) - statistics.fmean(b))
    if len(times) < 2 or len(reference) < 2:
        return ratio, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return ratio, (ratio, ratio)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    centre = statistics.fmean(a) - statistics.fmean(b)
    half = t_quantile(df) * se
    return ratio, (math.exp(centre - half), math.exp(centre + half))


def verdict(ratio, interval, notes):
    if notes:
        return "settings differ: " + "; ".join(notes)
    if interval is None:
        return "one repetition: no interval"
    if interval[0] <= 1 <= interval[1]:
        return "noise"
    return f"{1 / ratio:.2f}x faster" if ratio < 1 else f"{ratio:.2f}x slower"


def pooled_interval(rounds, reference):
    """(ratio, interval, basis) of the rounds of a runtime (each a list of
    repetitions' times) against the reference's: with two or more rounds a
    side, Welch's t over the rounds' means (basis "rounds"); else over all
    repetitions (basis "repetitions")."""
    if len(rounds) >= 2 and len(reference) >= 2:
        ratio, interval = ratio_interval([statistics.fmean(r) for r in rounds],
                                         [statistics.fmean(r) for r in reference])
        return ratio, interval, "rounds"
    ratio, interval = ratio_interval([t for r in rounds for t in r],
                                     [t for r in reference for t in r])
    return ratio, interval, "repetitions"


def _unique(items):
    return list(dict.fromkeys(items))


def rows(docs, labels):
    """Per benchmark measured in Python eager, every runtime's result in
    the files: [{benchmark, runtime, file, time, reps, rounds, basis, ratio,
    interval, verdict, notes}], the reference row (Python eager) first in
    its group. Files holding the same runtime of a benchmark are its
    rounds, pooled (pooled_interval)."""
    found = {}  # base name -> runtime -> [(bench, doc, label)], a round each
    order = []
    for doc, label in zip(docs, labels):
        for name, bench in collect(doc).items():
            base, runtime = split_runtime(name)
            if runtime == CPP_EAGER and runtime_of(doc) == REFERENCE:
                continue  # not a pybench name
            if base not in found:
                found[base] = {}
                order.append(base)
            found[base].setdefault(runtime, []).append((bench, doc, label))
    out = []
    for base in order:
        group = found[base]
        if REFERENCE not in group or len(group) < 2:
            continue
        phase = parse_name(base)["phase"]
        ref_rounds = group[REFERENCE]
        ref_settings = settings(ref_rounds[0][1], phase)
        # Rounds of the reference that ran with other settings than its first.
        ref_notes = _unique(n for _, doc, _ in ref_rounds[1:]
                            for n in setting_notes(settings(doc, phase), ref_settings,
                                                   REFERENCE))
        ref_notes = [f"Python eager's rounds: {n}" for n in ref_notes]
        ref_times = [bench.times for bench, _, _ in ref_rounds]
        for runtime in RUNTIMES:
            if runtime not in group:
                continue
            rounds = group[runtime]
            times = [bench.times for bench, _, _ in rounds]
            if runtime == REFERENCE:
                ratio, interval, basis, notes = 1.0, None, None, ref_notes
            else:
                ratio, interval, basis = pooled_interval(times, ref_times)
                notes = _unique([n for _, doc, _ in rounds
                                 for n in setting_notes(settings(doc, phase), ref_settings,
                                                        runtime)] + ref_notes)
            compile_s = [bench.median("compile_s") for bench, _, _ in rounds]
            compile_s = [c for c in compile_s if c is not None]
            out.append({
                "benchmark": base, "runtime": runtime,
                "file": ", ".join(_unique(label for _, _, label in rounds)),
                "time": statistics.fmean(statistics.fmean(t) for t in times),
                "reps": sum(len(t) for t in times), "rounds": len(rounds), "basis": basis,
                "ratio": ratio, "interval": interval, "notes": notes,
                "compile_s": statistics.median(compile_s) if compile_s else None,
                "verdict": ("reference" if not notes else verdict(1.0, None, notes))
                if runtime == REFERENCE else verdict(ratio, interval, notes)})
    return out


def format_reps(r):
    """'5', or '15 in 3 rounds' when the row pools several files."""
    return str(r["reps"]) if r["rounds"] == 1 else f"{r['reps']} in {r['rounds']} rounds"


def format_ratio(r):
    if r["runtime"] == REFERENCE:
        return "1"
    ci = "" if r["interval"] is None else " [{:.3g}, {:.3g}]".format(*r["interval"])
    return f"{r['ratio']:.3g}{ci}"


def markdown(table):
    headers = ["benchmark", "runtime", "file", "mean time", "reps",
               "time / Python eager [95% CI]", "verdict", "compile"]
    cells = []
    for r in table:
        cells.append([f"`{r['benchmark']}`", RUNTIMES[r["runtime"]], r["file"],
                      format_seconds(r["time"]), format_reps(r), format_ratio(r),
                      r["verdict"],
                      "—" if r["compile_s"] is None else f"{r['compile_s']:.1f} s"])
    return markdown_table(headers, cells)
