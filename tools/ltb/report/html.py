"""tools/report --format html: one self-contained page of charts and tables.

The page inlines Chart.js (third_party/chartjs) and its data, so it opens
with no network. Each chart is a <canvas data-section="..."> drawn from a
Chart.js configuration in the page's JSON; every dataset that stands for
benchmarks (not a ceiling or an ideal line) has ltbKind "benchmarks", so a
test can count what a chart drew. Sections appear where the results have
what they need: context, roofline, comparison, scaling, distributions,
latency under load, compiled, C++ and Python, history, errors.
"""
import collections
import html
import json
import math
import os
import re
import statistics

from ltb.base import REPO
from ltb.gate.verdicts import IMPROVEMENT, LOST, REGRESSION, compare, differences
from ltb.results import runtimes
from ltb.results.cost import data_parallel_ranks
from ltb.results.entries import collect, errors, seconds
from ltb.results.format import format_change, format_seconds, human, series_label
from ltb.results.names import name_without
from ltb.results.scaling import scaling_table
from ltb.results.speedup import device_throughputs

CHARTJS = os.path.join(REPO, "third_party", "chartjs", "chart.min.js")
UNSTEADY_CV = 5.0  # percent: cs336's rule of thumb for a steady measurement
CONTEXT_KEYS = ("host_name", "executable", "date", "suite_commit", "libtorch_version",
                "build_type", "cpu_model", "cpu_capability", "num_cpus", "mhz_per_cpu",
                "gpus", "cuda_runtime", "cudnn", "blas", "blas_threads",
                "intra_op_threads", "inter_op_threads", "runtime", "torch_version",
                "grad_mode", "warmup", "malloc", "world_size", "world_sizes",
                "dp_gradients", "dp_buffers",
                # What of the host decides a CPU run's speed, and a simulated CPU.
                "cpu_affinity", "cpu_quota", "cpu_threads_per_core", "numa_nodes",
                "cpu_frequency_scaling", "transparent_hugepages", "kernel",
                "virtual_machine", "cpu_simulation")
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


def color(i):
    return PALETTE[i % len(PALETTE)]


def esc(text):
    return html.escape(str(text), quote=True)


def leading_number(text):
    """1.9e+11 from '1.9e+11 FLOP/s (measured ...)', else None."""
    match = re.match(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)", str(text))
    try:
        return float(match[1]) if match else None
    except ValueError:
        return None


class Page:
    """Sections of HTML and the charts they draw."""

    def __init__(self):
        self.sections = []  # (id, title, html)
        self.charts = []  # {"id", "section", "config"}

    def chart(self, section, config, height=380):
        chart_id = f"chart{len(self.charts)}"
        config.setdefault("options", {})
        self.charts.append({"id": chart_id, "section": section, "config": config})
        return (f'<div class="chart" style="height:{height}px">'
                f'<canvas id="{chart_id}" data-section="{section}"></canvas></div>')

    def add(self, section, title, body):
        self.sections.append((section, title, body))


def axis(title, log=False, zero=False, **extra):
    scale = {"type": "logarithmic" if log else "linear",
             "title": {"display": True, "text": title}}
    if zero and not log:
        scale["beginAtZero"] = True
        scale["min"] = 0
    scale.update(extra)
    return scale


def table(headers, rows, classes=None):
    """An HTML table; cells are escaped unless given as ('html', text)."""
    def cell(v):
        if isinstance(v, tuple) and v and v[0] == "html":
            return v[1]
        return esc("—" if v is None else v)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>")
    return f'<table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def code(name):
    return ("html", f"<code>{esc(name)}</code>")


# --- context -----------------------------------------------------------------

def context_section(page, docs, labels):
    keys = [k for k in CONTEXT_KEYS if any(k in d["context"] for d in docs)]
    keys += sorted({k for d in docs for k in d["context"]
                    if k.startswith(("peak_flops_", "peak_bandwidth_", "gemm_flops_"))})
    rows = [[k] + [d["context"].get(k) for d in docs] for k in keys]
    body = table(["context"] + labels, rows)
    body += ("<p>Peaks are what the run measured or was given (the text after each value "
             "says which); <code>mfu</code> and <code>mbu</code> are achieved FLOP/s and "
             "bytes/s over them.</p>")
    page.add("context", "Run context", body)


# --- roofline ----------------------------------------------------------------

def peaks(doc):
    """({(device, precision): FLOP/s}, {device: bytes/s}) from a context."""
    flops, bandwidth = {}, {}
    for key, value in doc["context"].items():
        match = re.fullmatch(r"peak_flops_(.+)_([^_]+)", key)
        if match and leading_number(value):
            flops[(match[1], match[2])] = leading_number(value)
        match = re.fullmatch(r"peak_bandwidth_(.+)", key)
        if match and leading_number(value):
            bandwidth[match[1]] = leading_number(value)
    return flops, bandwidth


INFERENCE_PHASES = ("forward", "encode", "generate", "transcribe")
WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
QUANTISED = re.compile(r"/(int8|int8dyn|int4(:[^/]*)?)(/|$)")


def per_step(bench, counter):
    """The median over the repetitions of a rate counter times the
    repetition's own step time: the amount a step does (FLOPs, bytes),
    exactly, where the product of two medians is not (with an even number
    of repetitions, the mean of two rates times the mean of two times
    overstates it); None where no repetition has the counter."""
    amounts = [float(e[counter]) * seconds(e) for e in bench.entries
               if isinstance(e.get(counter), (int, float)) and math.isfinite(e[counter])]
    return statistics.median(amounts) if amounts else None


def epoch_steps(bench, ranks):
    """The optimizer steps each rank takes in one epoch of a train_epoch
    benchmark: the samples of an epoch (samples/s x the epoch's time, over
    every rank) over the batch of every rank; None where the result does
    not say (no samples/s, or no batch in its name)."""
    batch = bench.fields["settings"].get("batch")
    samples = per_step(bench, "samples/s")
    if not isinstance(batch, int) or batch <= 0 or not samples:
        return None
    return max(1, round(samples / (batch * ranks)))


def bytes_per_step(bench, ranks):
    """(bytes a step must move, whether that is only a lower bound): the
    suite's analytic count where the benchmark has one (bytes/s over steps
    per second: Ops), else the weights read once a step: the bytes bench
    wrote into the result (weight_bytes: a forward's, or a decode step's,
    quantised ones included), else params x bytes per weight (the dtype's
    for inference, fp32 master weights for training); in generation once per
    token generated (the prompt's forward gives the first, each decode step
    one more), in a train_epoch once per optimizer step of the epoch. A
    quantised result without weight_bytes (an older bench's) has no count:
    its dtype is not what its weights take."""
    if bench.median_time <= 0:
        return None, False
    if bench.has("bytes/s"):
        return per_step(bench, "bytes/s"), False
    fields = bench.fields
    reads = max(1, fields["settings"].get("new", 1)) if fields["phase"] == "generate" else 1
    if fields["phase"] == "train_epoch":
        # A train_epoch's step is an epoch: one optimizer step a batch, each
        # reading the weights once.
        reads = epoch_steps(bench, ranks)
        if not reads:
            return None, False
    if bench.has("weight_bytes"):
        return bench.median("weight_bytes") * reads * ranks, True
    params = bench.median("params")
    if not params or QUANTISED.search(bench.name):
        return None, False
    inference = fields["phase"] in INFERENCE_PHASES
    size = WEIGHT_BYTES.get(fields["dtype"], 4) if inference else 4
    return params * size * reads * ranks, True


def precision_of(name, fields):
    """The precision a benchmark's FLOPs ran in, as the context names its
    peaks: tf32 for fp32 with TF32 on (bench's .../fp32/tf32), else the dtype."""
    return "tf32" if fields["dtype"] == "fp32" and "tf32" in name.split("/") else fields["dtype"]


def roofline_points(doc):
    """(device, dtype) -> [(name, intensity, FLOP/s per device, mfu, mbu,
    intensity is an upper bound)] of every measured benchmark with FLOPs."""
    groups = collections.OrderedDict()
    for name, bench in collect(doc).items():
        flops = bench.median("FLOP/s")
        ranks = data_parallel_ranks(bench, doc)
        moved, lower_bound = bytes_per_step(bench, ranks)
        if not flops or not moved:
            continue
        fields = bench.fields
        precision = precision_of(name, fields)
        intensity = per_step(bench, "FLOP/s") / moved
        groups.setdefault((fields["device"], precision), []).append(
            (name, intensity, flops / ranks, bench.median("mfu"), bench.median("mbu"),
             lower_bound))
    return groups


def roofline_section(page, docs, labels):
    parts = []
    for doc, label in zip(docs, labels):
        flops_peaks, bandwidth_peaks = peaks(doc)
        # What bench measured against the memory's bandwidth (it gave them an
        # mbu): memory-bound ops, not transfers over the host link, ops with
        # FLOPs, whose bytes can come from cache, nor a step the cache holds.
        memory_bound = [b for b in collect(doc).values()
                        if b.has("mbu") and b.has("bytes/s")]
        for (device, precision), points in roofline_points(doc).items():
            datasets = []
            for bound, kind in ((False, "bytes: the suite's analytic count"),
                                (True, "bytes: weights read once a step (intensity an "
                                       "upper bound)")):
                chosen = [p for p in points if p[5] == bound]
                if not chosen:
                    continue
                datasets.append({
                    "label": kind, "ltbKind": "benchmarks", "type": "scatter",
                    "data": [{"x": x, "y": y} for _, x, y, _, _, _ in chosen],
                    "tips": [f"{n}\nintensity {x:.3g} FLOP/byte"
                             + (" (at most)" if bound else "")
                             + f"\n{human(y)} FLOP/s"
                             + ("" if mfu is None else f"\nmfu {mfu:#.3g}")
                             + ("" if mbu is None else f"\nmbu {mbu:#.3g}")
                             for n, x, y, mfu, mbu, _ in chosen],
                    "backgroundColor": "#ffffff" if bound else color(0),
                    "borderColor": color(0), "borderWidth": 2, "pointRadius": 5})
            xs = [p[1] for p in points]
            low, high = min(xs) / 4, max(xs) * 4
            # bench keys each device's peaks by its name in the benchmarks'
            # (cuda, cuda:1): a second GPU's ceiling is its own.
            peak = flops_peaks.get((device, precision))
            bandwidth = bandwidth_peaks.get(device)
            # bench raises a peak that a benchmark beat (saying so on stderr);
            # the context keeps the peak measured before the run.
            raised = []
            fastest = max(y for _, _, y, _, _, _ in points)
            if peak and fastest > peak:
                peak = fastest
                raised.append(f"compute to {human(fastest)} FLOP/s")
            moved = [b.median("bytes/s") for b in memory_bound if b.fields["device"] == device]
            if bandwidth and moved and max(moved) > bandwidth:
                bandwidth = max(moved)
                raised.append(f"bandwidth to {human(bandwidth)}B/s")
            ceiling = []
            if peak and bandwidth:
                ridge = peak / bandwidth
                low, high = min(low, ridge / 4), max(high, ridge * 4)
                ceiling = [{"x": low, "y": bandwidth * low}, {"x": ridge, "y": peak},
                           {"x": high, "y": peak}]
            elif peak:
                ceiling = [{"x": low, "y": peak}, {"x": high, "y": peak}]
            elif bandwidth:
                ceiling = [{"x": low, "y": bandwidth * low}, {"x": high, "y": bandwidth * high}]
            if ceiling:
                datasets.append({
                    "label": "ceiling: " + " and ".join(
                        ([f"{human(peak)} FLOP/s"] if peak else [])
                        + ([f"{human(bandwidth)}B/s"] if bandwidth else [])),
                    "type": "line", "data": ceiling, "borderColor": "#444",
                    "borderDash": [6, 4], "pointRadius": 0, "fill": False})
            missing = [what for what, v in (("compute", peak), ("bandwidth", bandwidth))
                       if not v]
            title = series_label(label, f"{device} {precision}", len(docs) > 1)
            parts.append(f"<h3>{esc(title)}</h3>")
            if missing:
                parts.append(f"<p class='note'>No measured {' or '.join(missing)} ceiling for "
                             f"{esc(device)} {esc(precision)} in this run's context.</p>")
            if raised:
                parts.append(f"<p class='note'>A benchmark beat the peak the run measured "
                             f"first: the ceiling is raised ({esc(', '.join(raised))}, the "
                             f"fastest benchmark's mean rate; bench raises its peak to the "
                             f"fastest step's for mfu and mbu, saying so on stderr).</p>")
            parts.append(page.chart("roofline", {
                "type": "scatter", "data": {"datasets": datasets},
                "options": {"scales": {
                    "x": axis("arithmetic intensity (FLOP/byte)", log=True),
                    "y": axis("achieved FLOP/s", log=True)}}}))
    if parts:
        page.add("roofline", "Roofline", (
            "<p>Each benchmark at its arithmetic intensity, I = FLOPs a step / bytes a step "
            "must move, against the FLOP/s it achieved per device, under the run's measured "
            "compute ceiling and bandwidth slope (FLOP/s = bandwidth × I). FLOPs a step are "
            "the suite's analytic count (<code>FLOP/s</code> × step time). Bytes a step are "
            "the suite's analytic count where a benchmark has one (<code>bytes/s</code> × "
            "step time: the Ops), filled points; otherwise the weights read once a step, "
            "params × bytes per weight (the dtype's for inference, 4 for training's fp32 "
            "weights; in generation once per token generated: the prompt's forward gives "
            "the first, each decode step one more; in a <code>train_epoch</code> once per "
            "optimizer step of the epoch), hollow points: a lower bound on the "
            "traffic (activations, gradients and optimizer state come on top), so their "
            "intensity is an upper bound. Hover a point for "
            "its <code>mfu</code> and <code>mbu</code>.</p>")
            + "".join(parts))


# --- comparison --------------------------------------------------------------

def comparison_section(page, docs, labels, verdicts):
    if len(docs) < 2:
        return
    parts = []
    for doc, label in zip(docs[1:], labels[1:]):
        rows = [r for r in compare(docs[0], doc, *verdicts.arguments) if r.metric == "time"]
        if not rows:
            parts.append(f"<p>{esc(label)}: no benchmark in common with {esc(labels[0])}.</p>")
            continue
        # Sorted by change, the biggest slowdown first.
        rows.sort(key=lambda r: -r.change if math.isfinite(r.change) else -math.inf)
        ratios = [r.baseline / r.contender if r.contender else None
                  for r in rows]  # base time / new time
        parts.append(f"<h3>{esc(labels[0])} → {esc(label)}</h3>")
        parts.append(page.chart("comparison", {
            "type": "bar",
            "data": {"labels": [r.name for r in rows], "datasets": [{
                "label": f"speed of {label} over {labels[0]} (x)", "ltbKind": "benchmarks",
                "data": ratios,
                "backgroundColor": ["#d62728" if r.verdict == REGRESSION else "#2ca02c"
                                    if r.verdict == IMPROVEMENT else "#7f7f7f" for r in rows],
                "tips": [f"{r.name}\n{format_seconds(r.baseline)} → "
                         f"{format_seconds(r.contender)} "
                         f"({format_change(r.change)} time)\n{r.verdict}"
                         + ("" if r.p is None else f", p = {r.p:.3g}") for r in rows]}]},
            "options": {"indexAxis": "y", "ltbRefX": 1, "scales": {
                "x": axis("speed ratio (baseline time / this time; 1 = unchanged)", zero=True),
                "y": {"ticks": {"autoSkip": False, "font": {"size": 10}}}}}},
            height=max(200, 22 * len(rows) + 80)))
        parts.append(table(
            ["benchmark", labels[0], label, "time change", "p-value", "verdict"],
            [[code(r.name), format_seconds(r.baseline),
              format_seconds(r.contender), format_change(r.change),
              "—" if r.p is None else f"{r.p:.3g}", r.verdict]
             for r in rows],
            ["bad" if r.verdict == REGRESSION else "good" if r.verdict == IMPROVEMENT else ""
             for r in rows]))
    page.add("comparison", "Comparison", (
        f"<p>Each file against the first, sorted by change: the median time's ratio and the "
        f"gate's verdict ({esc(verdicts.describe())}; with repetitions on both sides, as "
        f"<code>tools/abtest</code> writes, the Mann–Whitney U test must agree). "
        f"Red: regression; green: improvement.</p>") + "".join(parts))


# --- scaling -----------------------------------------------------------------

def series_chart(page, section, series, xlabel, ylabel, logx=True, logy=None, ref_y=None):
    """A line chart of named series of (x, y, tip) points."""
    datasets = []
    for i, (key, points) in enumerate(series.items()):
        points = sorted(points)
        datasets.append({"label": key, "ltbKind": "benchmarks", "type": "line",
                         "data": [{"x": x, "y": y} for x, y, _ in points],
                         "tips": [tip for _, _, tip in points], "borderColor": color(i),
                         "backgroundColor": color(i), "pointRadius": 4, "fill": False})
    values = [y for points in series.values() for _, y, _ in points]
    if logy is None:
        logy = max(values) > 10 * min(values) if min(values) > 0 else False
    options = {"scales": {"x": axis(xlabel, log=logx),
                          "y": axis(ylabel, log=logy, zero=not logy)}}
    if ref_y is not None:
        options["ltbRefY"] = ref_y
        options["scales"]["y"]["suggestedMax"] = max(values + [ref_y]) * 1.05
    return page.chart(section, {"type": "scatter", "data": {"datasets": datasets},
                                "options": options})


def scaling_section(page, docs, labels):
    parts = []
    several = len(docs) > 1
    by_seq, by_batch = collections.OrderedDict(), collections.OrderedDict()
    for doc, label in zip(docs, labels):
        for name, bench in collect(doc).items():
            settings = bench.fields["settings"]
            if isinstance(settings.get("seq"), int) and (bench.median("tokens/s") or 0) > 0:
                key = name_without(name, "seq")
                us = 1e6 / bench.median("tokens/s")
                by_seq.setdefault(series_label(label, key, several), []).append(
                    (settings["seq"], us, f"{name}\n{us:.4g} µs/token"))
            rate, unit = bench.rate()
            if isinstance(settings.get("batch"), int) and rate:
                key = name_without(name, "batch")
                by_batch.setdefault(series_label(label, key, several), []).append(
                    (settings["batch"], rate, f"{name}\n{human(rate)} {unit}/s"))
    by_seq = {k: v for k, v in by_seq.items() if len(v) >= 2}
    by_batch = {k: v for k, v in by_batch.items() if len(v) >= 2}
    if by_seq:
        parts += ["<h3>Time per token against sequence length</h3>",
                  series_chart(page, "scaling", by_seq, "sequence length (tokens)",
                               "time per token (µs)")]
    if by_batch:
        parts += ["<h3>Throughput against batch</h3>",
                  series_chart(page, "scaling", by_batch, "batch (per rank)",
                               "throughput (tokens/s or samples/s)")]
    efficiency = collections.OrderedDict()
    for doc, label in zip(docs, labels):
        for key, (counter, points) in scaling_table(doc).items():
            efficiency[series_label(label, key, several)] = [
                (n, e, f"{key}\n{n} ranks: {human(rate)} {counter}, "
                       f"efficiency {e * 100:.0f}%") for n, (rate, e) in points.items()]
    if efficiency:
        parts += ["<h3>Data-parallel weak-scaling efficiency against ranks</h3>",
                  "<p>Throughput per rank at N ranks over that at the fewest ranks "
                  "(T(N) / (N × T(1))); 1 is perfect scaling.</p>",
                  series_chart(page, "scaling", efficiency, "ranks", "efficiency",
                               logy=False, ref_y=1)]
    speedups = []
    for key, found in device_throughputs(docs, labels).items():
        for device, (value, counter, cpu, _) in found.items():
            if cpu:
                speedups.append((f"{key} ({device})", value / cpu, counter))
    if speedups:
        parts += ["<h3>Speedup over the CPU</h3>", page.chart("scaling", {
            "type": "bar", "data": {"labels": [k for k, _, _ in speedups], "datasets": [{
                "label": "throughput over the CPU's (x)", "ltbKind": "benchmarks",
                "data": [s for _, s, _ in speedups], "backgroundColor": color(2),
                "tips": [f"{k}\n{s:.2f}x ({c})" for k, s, c in speedups]}]},
            "options": {"indexAxis": "y", "ltbRefX": 1,
                        "scales": {"x": axis("speedup (x)", zero=True)}}},
            height=max(200, 26 * len(speedups) + 80))]
    if parts:
        page.add("scaling", "Scaling", "".join(parts))


# --- distributions -----------------------------------------------------------

def distributions_section(page, docs, labels):
    rows, classes, names, p50, p90, p99, tips = [], [], [], [], [], [], []
    several = len(docs) > 1
    for doc, label in zip(docs, labels):
        for name, bench in collect(doc).items():
            if not bench.has("step_p50_ms"):
                continue
            values = [bench.median(c) for c in ("step_p50_ms", "step_p90_ms", "step_p99_ms")]
            if None in values:
                continue
            cv = bench.median("step_cv_%")
            unsteady = cv is not None and cv > UNSTEADY_CV
            shown = series_label(label, name, several)
            names.append(shown)
            for target, v in zip((p50, p90, p99), values):
                target.append(v)
            tips.append(f"{shown}\np50 {values[0]:.4g} ms, p90 {values[1]:.4g} ms, "
                        f"p99 {values[2]:.4g} ms\n"
                        # One step has no spread: a 0 would read as a steady run.
                        + ("cv — (one step)" if cv is None else f"cv {cv:.3g}%")
                        + (" (unsteady)" if unsteady else ""))
            rows.append([code(shown)] + [f"{v:.4g} ms" for v in values]
                        + ["—" if cv is None else f"{cv:.3g}%",
                           "unsteady" if unsteady else "steady"])
            classes.append("bad" if unsteady else "")
    if not rows:
        return
    datasets = [{"label": label, "ltbKind": "benchmarks" if i == 0 else "quantile",
                 "data": values, "tips": tips, "backgroundColor": color(i),
                 "borderColor": color(i), "showLine": False, "pointRadius": 5,
                 "pointStyle": style}
                for i, (label, values, style) in enumerate(
                    (("p50", p50, "circle"), ("p90", p90, "triangle"), ("p99", p99, "rect")))]
    spread = max(p99) > 10 * min(p50) if min(p50) > 0 else False
    chart = page.chart("distributions", {
        "type": "line", "data": {"labels": names, "datasets": datasets},
        "options": {"indexAxis": "y", "scales": {
            "x": axis("step time (ms)", log=spread, zero=not spread),
            "y": {"offset": True, "ticks": {"autoSkip": False, "font": {"size": 10}}}}}},
        height=max(200, 22 * len(names) + 80))
    unsteady = sum(1 for c in classes if c)
    page.add("distributions", "Step-time distributions", (
        f"<p>Per benchmark the median, 90th and 99th percentile of its step times, and their "
        f"coefficient of variation; a CV above {UNSTEADY_CV:g}% marks a run as unsteady "
        f"({unsteady} of {len(rows)} here): rerun it on a quieter machine or with more "
        f"time.</p>") + chart + table(["benchmark", "p50", "p90", "p99", "cv", ""], rows,
                                       classes))


# --- serving -----------------------------------------------------------------

SERVE_PERCENTILES = (("p50", "p50_ms", "circle"), ("p90", "p90_ms", "triangle"),
                     ("p99", "p99_ms", "rect"), ("p99.9", "p99.9_ms", "star"))
SERVE_SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")


def loadgen_verdict(valid):
    """LoadGen's verdict over the repetitions (valid: 1 for VALID, else 0):
    VALID or INVALID where they agree, else how many were VALID (a median
    of 0 and 1 is neither)."""
    if not valid:
        return "—"
    passed = sum(1 for v in valid if v)
    if passed == len(valid):
        return "VALID"
    return "INVALID" if not passed else f"VALID in {passed} of {len(valid)} repetitions"


def serving_section(page, docs, labels):
    """Per LoadGen scenario, each serve benchmark's latency percentiles
    (LoadGen's, per sample) on one chart, Server's bound as a line."""
    several = len(docs) > 1
    by_scenario = collections.defaultdict(list)
    for doc, label in zip(docs, labels):
        for name, bench in collect(doc).items():
            scenario = re.search(r"/serve/scenario:(\w+)", name)
            values = [bench.median(c) for _, c, _ in SERVE_PERCENTILES]
            if scenario and None not in values:
                by_scenario[scenario[1]].append((series_label(label, name, several), bench,
                                                 values))
    parts = []
    order = {s: i for i, s in enumerate(SERVE_SCENARIOS)}
    for scenario in sorted(by_scenario, key=lambda s: (order.get(s, len(order)), s)):
        found = by_scenario[scenario]
        names = [shown for shown, _, _ in found]
        tips = [f"{shown}\n" + ", ".join(f"{p} {v:.4g} ms" for (p, _, _), v in
                                         zip(SERVE_PERCENTILES, values))
                for shown, _, values in found]
        datasets = [{"label": p, "ltbKind": "benchmarks" if i == 0 else "quantile",
                     "data": [values[i] for _, _, values in found], "tips": tips,
                     "backgroundColor": color(i), "borderColor": color(i), "showLine": False,
                     "pointRadius": 5, "pointStyle": style}
                    for i, (p, _, style) in enumerate(SERVE_PERCENTILES)]
        low = min(values[0] for _, _, values in found)
        spread = low > 0 and max(values[-1] for _, _, values in found) > 10 * low
        options = {"indexAxis": "y", "scales": {
            "x": axis("latency (ms)", log=spread, zero=not spread),
            "y": {"offset": True, "ticks": {"autoSkip": False, "font": {"size": 10}}}}}
        bounds = {bench.median("bound_ms") for _, bench, _ in found}
        if scenario == "Server" and len(bounds) == 1 and None not in bounds:
            options["ltbRefX"] = bounds.pop()
        parts.append(f"<h3>{esc(scenario)}</h3>" + page.chart("serving", {
            "type": "line", "data": {"labels": names, "datasets": datasets},
            "options": options}, height=max(200, 22 * len(names) + 80)))
        rows = []
        for shown, bench, values in found:
            valid = loadgen_verdict(bench.values("valid"))
            rows.append([code(shown)] + [f"{v:.4g} ms" for v in values]
                        + ["—" if bench.median("samples/s") is None
                           else human(bench.median("samples/s")),
                           "—" if bench.median("peak_qps") is None
                           else human(bench.median("peak_qps")),
                           valid])
        parts.append(table(["benchmark", "p50", "p90", "p99", "p99.9", "samples/s",
                            "peak QPS", "LoadGen"], rows))
    if parts:
        page.add("serving", "Latency under load", (
            "<p>Serve benchmarks by LoadGen scenario: each sample's latency, from when LoadGen "
            "scheduled it to its completion, at the 50th, 90th, 99th and 99.9th percentile; "
            "Server's p99 bound is the vertical line. LoadGen: its verdict on the run "
            "(VALID: long enough, and Server's p99 within the bound).</p>") + "".join(parts))


# --- compiled ----------------------------------------------------------------

def compiled_section(page, docs, labels, compiled_rows):
    found = compiled_rows(docs, labels)
    if not found:
        return
    several = len(docs) > 1
    names = [series_label(r["file"], f"{r['benchmark']} ({r['backend']})", several)
             for r in found]
    chart = page.chart("compiled", {
        "type": "bar", "data": {"labels": names, "datasets": [{
            "label": "speedup (eager time / compiled time)", "ltbKind": "benchmarks",
            "data": [r["speedup"] for r in found], "backgroundColor": color(4),
            "tips": [f"{n}\nspeedup {r['speedup']:.2f}x" for n, r in zip(names, found)]}]},
        "options": {"indexAxis": "y", "ltbRefX": 1,
                    "scales": {"x": axis("speedup (x)", zero=True)}}},
        height=max(200, 26 * len(found) + 80))
    rows = [[code(n), format_seconds(r["eager"]),
             format_seconds(r["compiled"]), f"{r['speedup']:.2f}x",
             "—" if r.get("memory_ratio") is None else f"{r['memory_ratio']:.2f}x",
             "—" if r["compile_s"] is None else f"{r['compile_s']:.1f} s",
             "—" if r["rel_err"] is None else f"{r['rel_err']:.2g}"]
            for n, r in zip(names, found)]
    page.add("compiled", "Eager against compiled", (
        "<p>Speedup: eager time over compiled; memory ratio: eager <code>peak_mem</code> over "
        "compiled; drift: the compiled outputs' relative error against eager.</p>") + chart
        + table(["benchmark", "eager", "compiled", "speedup", "memory ratio", "compile time",
                 "rel_err"], rows))


# --- C++ and Python -----------------------------------------------------------

def runtimes_section(page, docs, labels):

    found = runtimes.rows(docs, labels)
    if not found:
        return
    shown = [r for r in found if r["runtime"] != runtimes.REFERENCE]
    names = [f"{r['benchmark']} ({runtimes.RUNTIMES[r['runtime']]})" for r in shown]
    chart = page.chart("runtimes", {
        "type": "bar", "data": {"labels": names, "datasets": [{
            "label": "time / Python eager time", "ltbKind": "benchmarks",
            "data": [r["ratio"] for r in shown], "backgroundColor": color(2),
            "tips": [f"{n}\n{runtimes.format_ratio(r)}\n{r['verdict']}"
                     for n, r in zip(names, shown)]}]},
        "options": {"indexAxis": "y", "ltbRefX": 1,
                    "scales": {"x": axis("time / Python eager (below 1: faster)", zero=True)}}},
        height=max(200, 26 * len(shown) + 80))
    rows = [[code(r["benchmark"]), runtimes.RUNTIMES[r["runtime"]], r["file"],
             format_seconds(r["time"]), runtimes.format_reps(r),
             runtimes.format_ratio(r),
             r["verdict"], "—" if r["compile_s"] is None else f"{r['compile_s']:.1f} s"]
            for r in found]
    classes = ["bad" if r["verdict"].startswith("settings") else "" for r in found]
    page.add("runtimes", "C++ and Python", (
        "<p>The same benchmark (model, shapes, work) in each runtime: bench's C++ eager, "
        "AOTInductor and TorchScript results and tools/pybench's Python eager and "
        "torch.compile ones. The ratio is a runtime's geometric mean step time over Python eager's, "
        "with its 95% confidence interval (Welch's t on the logarithms) from the "
        "repetitions, or from the rounds' means where each side has two or more files "
        "(rounds, separate processes); <em>noise</em>: the interval holds 1. Where the two runs differ in "
        "threads, grad mode or warm-up, the verdict names the setting instead of a "
        "speed.</p>") + chart
        + table(["benchmark", "runtime", "file", "mean time", "reps",
                 "time / Python eager [95% CI]", "verdict", "compile"], rows, classes))


# --- history -----------------------------------------------------------------

def history_section(page, runs, verdicts, skipped=()):
    """runs: [(label, doc)] in time order; skipped: [(path, why)]."""
    left_out = ""
    if skipped:
        left_out = ("<p class='note'>Left out of the history:</p>"
                    + table(["file", "why"], [[path, why] for path, why in skipped]))
    if len(runs) < 2:
        if runs:
            page.add("history", "History", "<p>One run in the directory: a trend needs two "
                     "or more.</p>" + left_out)
        return
    failed = collections.defaultdict(set)  # run index -> names the gate failed
    for i in range(1, len(runs)):
        for row in compare(runs[i - 1][1], runs[i][1], *verdicts.arguments):
            if row.verdict in (REGRESSION, LOST):
                failed[i].add(row.name)
        lost = differences(runs[i - 1][1], runs[i][1])[0]
        failed[i].update(name for name, _ in lost)
    collected = [collect(doc) for _, doc in runs]
    names = list(collections.OrderedDict.fromkeys(n for found in collected for n in found))
    parts, total_failed = [], 0
    dates = [label for label, _ in runs]
    for name in names:
        points, bad = [], []
        for i, found in enumerate(collected):
            bench = found.get(name)
            if bench is None:
                continue
            rate, unit = bench.rate()
            value, what = ((rate, f"{unit}/s") if rate else (bench.median_time * 1e3, "ms"))
            points.append({"x": i, "y": value})
            bad.append(name in failed[i])
        if len(points) < 2:
            continue
        total_failed += sum(bad)
        colors = ["#d62728" if b else color(0) for b in bad]
        parts.append(f"<h4><code>{esc(name)}</code></h4>" + page.chart("history", {
            "type": "line", "data": {"datasets": [{
                "label": what, "ltbKind": "benchmarks", "data": points,
                "borderColor": color(0), "pointBackgroundColor": colors,
                "pointBorderColor": colors, "pointRadius": [7 if b else 3 for b in bad],
                "tips": [f"{name}\n{dates[p['x']]}\n{human(p['y'])} {what}"
                         + ("\nthe gate failed here" if b else "")
                         for p, b in zip(points, bad)]}]},
            "options": {"ltbXLabels": dates, "plugins": {"legend": {"display": False}},
                        "scales": {"x": axis("run", ticks={"stepSize": 1}),
                                   "y": axis(what, zero=True)}}}, height=220))
    page.add("history", "History", (
        f"<p>{len(runs)} runs in time order (by their context's date). Each benchmark's "
        f"throughput (or median time where it has none); a red point is a run where "
        f"<code>tools/gate</code> against the run before failed this benchmark "
        f"({esc(verdicts.describe())}). "
        f"Red points: {total_failed}.</p>") + left_out + "".join(parts))


def store_section(page, store):
    """The results store's series: per benchmark and machine fingerprint, its
    median step time over commits with the change points marked, and first
    the open changes (each series' latest step: the level it still holds).
    store: [{"name", "fingerprint", "commits", "values" (s), "changes"}]."""
    if not store:
        return
    open_rows, parts = [], []
    for s in store:
        marks = {c.index: c for c in s["changes"]}
        commits = [c[:12] for c in s["commits"]]
        for c in s["changes"][-1:]:
            open_rows.append([c.size, code(s["name"]), s["fingerprint"],
                              f"{c.size * 100:+.1f}% ({'slower' if c.size > 0 else 'faster'})",
                              f"{c.before[:12]}..{c.after[:12]}", f"{c.confidence:.3f}",
                              f"{len(s['values']) - c.index} of {len(s['values'])}"])
        colors = ["#d62728" if i in marks and marks[i].size > 0 else
                  "#2ca02c" if i in marks else color(0) for i in range(len(commits))]
        tips = []
        for i, (commit, value) in enumerate(zip(commits, s["values"])):
            tip = f"{s['name']}\n{commit}\n{human(value * 1e3)} ms"
            if i in marks:
                c = marks[i]
                tip += (f"\nchange: {c.size * 100:+.1f}% since {c.before[:12]} "
                        f"(confidence {c.confidence:.3f})")
            tips.append(tip)
        parts.append(f"<h4><code>{esc(s['name'])}</code> on {esc(s['fingerprint'])}</h4>"
                     + page.chart("store", {
                         "type": "line", "data": {"datasets": [{
                             "label": "median step time (ms)", "ltbKind": "benchmarks",
                             "data": [{"x": i, "y": v * 1e3} for i, v in enumerate(s["values"])],
                             "borderColor": color(0), "pointBackgroundColor": colors,
                             "pointBorderColor": colors,
                             "pointRadius": [7 if i in marks else 3 for i in range(len(commits))],
                             "tips": tips}]},
                         "options": {"ltbXLabels": commits,
                                     "plugins": {"legend": {"display": False}},
                                     "scales": {"x": axis("commit", ticks={"stepSize": 1}),
                                                "y": axis("median step time (ms)", zero=True)}}},
                         height=220))
    open_rows = [row[1:] for row in sorted(open_rows, key=lambda r: -r[0])]  # slowest first
    summary = (f"<p>{len(store)} series from the results store (<code>tools/history</code>), "
               "one point a commit (the median of its runs' median step times), in commit "
               "order. A large point is a change found by PELT (red: slower, green: faster); "
               "its tip names the commit range that <code>tools/bisect</code> searches.</p>")
    table_html = ("<h3>Open changes</h3>" + table(
        ["benchmark", "machine", "change of the median step time", "commits (good..bad)",
         "confidence", "points since"], open_rows) if open_rows else "<p>No open change.</p>")
    page.add("store", "Results store", summary + table_html + "".join(parts))


# --- errors ------------------------------------------------------------------

def errors_section(page, docs, labels):
    rows = [[code(name), label, message] for doc, label in zip(docs, labels)
            for name, message in errors(doc).items()]
    if rows:
        page.add("errors", "Errored benchmarks", table(["benchmark", "file", "error"], rows))


# --- the page ----------------------------------------------------------------

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}tr.bad td{background:#fde8e8}tr.good td{background:#e8f6e8}
code{font-size:.92em}.chart{position:relative;width:100%;margin:.5em 0 1em}
.note{color:#a15c00}nav a{margin-right:1em}
"""

SCRIPT = """
const LTB = JSON.parse(document.getElementById('ltb-data').textContent);
function si(v) {
  if (typeof v !== 'number' || !isFinite(v)) return String(v);
  const a = Math.abs(v), units = [[1e15,'P'],[1e12,'T'],[1e9,'G'],[1e6,'M'],[1e3,'k']];
  for (const [s, u] of units) if (a >= s) return +(v / s).toPrecision(3) + u;
  return +v.toPrecision(3) + '';
}
// A dashed reference line at options.ltbRefX or ltbRefY (1: no change, ideal).
Chart.register({id: 'ltbRef', afterDatasetsDraw(chart) {
  const o = chart.options, a = chart.chartArea, ctx = chart.ctx;
  const lines = [];
  if (o.ltbRefX !== undefined) {
    const x = chart.scales.x.getPixelForValue(o.ltbRefX);
    lines.push([x, a.top, x, a.bottom]);
  }
  if (o.ltbRefY !== undefined) {
    const y = chart.scales.y.getPixelForValue(o.ltbRefY);
    lines.push([a.left, y, a.right, y]);
  }
  ctx.save();
  ctx.strokeStyle = '#444';
  ctx.setLineDash([5, 4]);
  for (const [x0, y0, x1, y1] of lines) {
    ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke();
  }
  ctx.restore();
}});
window.ltbCharts = {};
for (const c of LTB.charts) {
  const cfg = c.config, o = cfg.options;
  o.animation = false;
  o.responsive = true;
  o.maintainAspectRatio = false;
  o.plugins = o.plugins || {};
  o.plugins.tooltip = {callbacks: {label: ctx => {
    const tips = ctx.dataset.tips;
    return tips && tips[ctx.dataIndex] ? tips[ctx.dataIndex].split('\\n')
                                       : ctx.dataset.label + ': ' + si(ctx.parsed.y);
  }}};
  for (const [k, s] of Object.entries(o.scales || {})) {
    if (s.type === 'logarithmic') {
      // Label 1, 2 and 5 of each decade only.
      s.ticks = Object.assign({}, s.ticks, {callback: v => {
        const m = Math.round(v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9)));
        return m === 1 || m === 2 || m === 5 ? si(v) : '';
      }});
    } else if (s.type === 'linear' && !(k === 'x' && o.ltbXLabels)) {
      s.ticks = Object.assign({}, s.ticks, {callback: v => si(v)});
    }
    if (k === 'x' && o.ltbXLabels) {
      const names = o.ltbXLabels;
      s.ticks = Object.assign({}, s.ticks, {callback: v => names[v] === undefined ? '' : names[v]});
    }
  }
  window.ltbCharts[c.id] = new Chart(document.getElementById(c.id), cfg);
}
document.body.dataset.chartsDrawn = String(LTB.charts.length);
"""


class Verdicts:
    """The gate's settings the page judges changes with."""

    def __init__(self, rules=(), threshold=0.07, alpha=0.05, source=None):
        self.arguments = (list(rules), threshold, alpha)
        self.source = source

    def describe(self):
        rules = f"per benchmark from {self.source}, else " if self.source else ""
        return (f"threshold {rules}{self.arguments[1] * 100:g}%, "
                f"alpha {self.arguments[2]:g}")


def render(docs, labels, history=(), compiled_rows=None, title=None,
           verdicts=None, skipped=(), store=()):
    """The page for result files (docs, labels) and a history [(label,
    doc)] in time order (skipped: the files of its directories left out,
    [(path, why)])."""
    verdicts = verdicts or Verdicts()
    page = Page()
    shown = list(docs) or [doc for _, doc in history[-1:]]
    shown_labels = list(labels) or [label for label, _ in history[-1:]]
    context_section(page, shown, shown_labels)
    roofline_section(page, shown, shown_labels)
    comparison_section(page, shown, shown_labels, verdicts)
    scaling_section(page, shown, shown_labels)
    distributions_section(page, shown, shown_labels)
    serving_section(page, shown, shown_labels)
    compiled_section(page, shown, shown_labels, compiled_rows)
    runtimes_section(page, shown, shown_labels)
    history_section(page, list(history), verdicts, skipped)
    store_section(page, list(store))
    errors_section(page, list(docs) + [doc for _, doc in history],
                   list(labels) + [label for label, _ in history])
    with open(CHARTJS) as f:
        chartjs = f.read()
    # No "<" in the script at all: a name such as "<!--<script" cannot
    # change how the page's parser reads it.
    data = json.dumps(finite({"charts": page.charts}), allow_nan=False).replace("<", "\\u003c")
    title = title or "libtorch-bench report: " + (", ".join(shown_labels) or "results store")
    nav = " ".join(f'<a href="#{sid}">{esc(t)}</a>' for sid, t, _ in page.sections)
    body = "".join(f'<section id="{sid}"><h2>{esc(t)}</h2>{b}</section>'
                   for sid, t, b in page.sections)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            f"script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{esc(title)}</h1><nav>{nav}</nav>{body}"
            f"<script>{chartjs}</script>"
            f'<script type="application/json" id="ltb-data">{data}</script>'
            f"<script>{SCRIPT}</script></body></html>\n")


def finite(value):
    """The value with every NaN or infinity (which JSON cannot hold) as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
