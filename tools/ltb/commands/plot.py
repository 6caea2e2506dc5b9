"""PNG charts from bench result files.

    tools/plot RESULTS.json [MORE.json ...] [--out DIR]
               [--cost PRICE [PRICE ...]] [--device-count N [N ...]]

The charts, their files and the rules they are drawn by: docs/tools.md, "plot".
"""
import argparse
import collections
import os
import sys

from ltb.base import BadInput, require, run
from ltb.results.cost import add_cost_arguments, cost_per_million, hourly_prices
from ltb.results.entries import aggregates_only, collect
from ltb.results.format import series_label
from ltb.results.load import file_labels, load_all
from ltb.results.names import name_without, size_rank
from ltb.results.scaling import scaling_table
from ltb.results.speedup import device_throughputs

require("matplotlib")
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def measured(docs, labels):
    """(file label, Benchmark) of every measured benchmark of every file."""
    return [(label, bench) for doc, label in zip(docs, labels)
            for bench in collect(doc).values()]


def legend(ax):
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def throughput_by_size(benches, out, several):
    """Per model family: throughput of each size, as grouped bars, or as points
    on a logarithmic axis when the values span more than a decade."""
    families = collections.OrderedDict()
    params = {}  # (family, size) -> parameters, which order the sizes
    for label, bench in benches:
        rate, unit = bench.rate()
        if rate is None or bench.fields["family"] == "Ops":
            continue
        key = series_label(
            label, name_without(bench.name, "size"), several)
        family = families.setdefault(bench.fields["family"], collections.OrderedDict())
        family.setdefault((key, unit), {})[bench.fields["size"]] = rate
        if bench.has("params"):
            params[(bench.fields["family"], bench.fields["size"])] = bench.median("params")
    paths = []
    for family, series in families.items():
        # By parameter count where the results have it (every model family
        # reports params), so a new family's size names need no table here.
        sizes = sorted({s for points in series.values() for s in points},
                       key=lambda s: (params.get((family, s), float("inf")),
                                      size_rank(s)))
        if len(sizes) < 2 and len(series) < 2:
            continue  # one bar compares with nothing
        units = sorted({unit for _, unit in series})
        if len(units) > 1:
            # One axis of two counters: each series says which it is.
            series = collections.OrderedDict(
                ((f"{key} ({unit}/s)", unit), points) for (key, unit), points in series.items())
        fig, ax = plt.subplots(figsize=(12, 5.5))
        values = [v for points in series.values() for v in points.values()]
        if min(values) > 0 and max(values) > 10 * min(values):
            # Over a decade: points on a logarithmic axis (a bar's length on
            # one would mean nothing), joined across the sizes of a series.
            # A throughput of 0 has no place on one: bars then.
            for (key, unit), points in series.items():
                xs = sorted(points, key=sizes.index)
                ax.plot([sizes.index(s) for s in xs], [points[s] for s in xs], marker="o",
                        label=key)
            ax.set_yscale("log")
        else:
            # Bars: lengths from zero on a linear axis.
            width = 0.8 / len(series)
            for i, ((key, unit), points) in enumerate(series.items()):
                xs = [sizes.index(s) + (i - (len(series) - 1) / 2) * width for s in points]
                ax.bar(xs, list(points.values()), width, label=key)
            ax.set_ylim(bottom=0)
        ax.set_xticks(range(len(sizes)), sizes)
        ax.set_xlabel("model size")
        ax.set_ylabel(f"throughput ({' or '.join(u + '/s' for u in units)})")
        ax.set_title(f"{family}: throughput by size")
        legend(ax)
        paths.append(save(fig, out, f"throughput_by_size-{family}.png"))
    return paths


def time_per_token(benches, out, several):
    """Per family: time per token (us) against sequence length."""
    families = collections.OrderedDict()
    for label, bench in benches:
        seq = bench.fields["settings"].get("seq")
        # A throughput of 0 has no time per token.
        if not isinstance(seq, int) or not (bench.median("tokens/s") or 0) > 0:
            continue
        key = series_label(
            label, name_without(bench.name, "seq"), several)
        family = families.setdefault(bench.fields["family"], collections.OrderedDict())
        family.setdefault(key, {})[seq] = 1e6 / bench.median("tokens/s")
    paths = []
    for family, series in families.items():
        series = {k: v for k, v in series.items() if len(v) >= 2}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(12, 5.5))
        for key, points in series.items():
            seqs = sorted(points)
            ax.plot(seqs, [points[s] for s in seqs], marker="o", label=key)
        ax.set_xscale("log", base=2)
        ticks = sorted({s for points in series.values() for s in points})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("time per token (µs/token)")
        values = [v for points in series.values() for v in points.values()]
        if max(values) > 100 * min(values):
            ax.set_yscale("log")
        ax.set_title(f"{family}: time per token against sequence length")
        legend(ax)
        paths.append(save(fig, out, f"time_per_token-{family}.png"))
    return paths


def horizontal_bars(groups, bar_labels, xlabel, title):
    """A horizontal grouped bar chart: groups is [(name, [value or None per
    bar])]; values more than a decade apart are points on a logarithmic axis
    instead (a bar's length on one would mean nothing)."""
    fig, ax = plt.subplots(figsize=(10, max(3.0, 0.45 * len(groups) * len(bar_labels) + 1.5)))
    height = 0.8 / len(bar_labels)
    every = [v for _, values in groups for v in values if v is not None]
    log = bool(every) and min(every) > 0 and max(every) > 10 * min(every)
    for i, label in enumerate(bar_labels):
        ys = [g + (i - (len(bar_labels) - 1) / 2) * height for g in range(len(groups))]
        values = [values[i] for _, values in groups]
        ys, values = ([y for y, v in zip(ys, values) if v is not None],
                      [v for v in values if v is not None])
        if log:
            ax.plot(values, ys, marker="o", linestyle="none", label=label)
        else:
            ax.barh(ys, values, height, label=label)
    ax.set_yticks(range(len(groups)), [name for name, _ in groups], fontsize="small")
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    else:
        ax.set_xscale("linear")
        ax.set_xlim(left=0)  # bar lengths from zero
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    legend(ax)
    return fig


def speedup_by_device(docs, labels, out):
    groups, devices = [], []
    for key, found in device_throughputs(docs, labels).items():
        speedups = {d: row.value / row.cpu for d, row in found.items() if row.cpu}
        if not speedups:
            continue
        devices += [d for d in speedups if d not in devices]
        groups.append((key, speedups))
    if not groups:
        return []
    fig = horizontal_bars([(key, [s.get(d) for d in devices]) for key, s in groups], devices,
                          "speedup over the CPU (x, throughput ratio)", "Speedup by device")
    fig.gca().axvline(1.0, color="grey", linewidth=0.8)
    return [save(fig, out, "speedup_by_device.png")]


def cost_per_million_chart(docs, labels, prices, out):
    """One chart per unit (tokens, samples): cost per 1M on each machine."""
    if not prices:
        return []
    units = collections.OrderedDict()  # unit -> name -> [cost per file]
    for i, doc in enumerate(docs):
        for bench in collect(doc).values():
            cost, unit = cost_per_million(bench, prices[i])
            if unit:
                units.setdefault(unit, collections.OrderedDict()).setdefault(
                    bench.name, [None] * len(docs))[i] = cost
    paths = []
    for unit, found in units.items():
        fig = horizontal_bars(list(found.items()), labels,
                              f"cost per 1M {unit} (in the currency of --cost)",
                              f"Cost per 1M {unit} by machine")
        paths.append(save(fig, out, f"cost_per_1M_{unit}.png"))
    return paths


def scaling_efficiency(docs, labels, out):
    """Data-parallel weak-scaling efficiency against the number of ranks, one
    line per benchmark (and file), from files of several world sizes
    (tools/scaling), with the ideal at 1."""
    series = []
    for doc, label in zip(docs, labels):
        for key, (_, points) in scaling_table(doc).items():
            series.append((series_label(label, key, len(docs) > 1), points))
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(12, 5.5))
    for key, points in series:
        ranks = sorted(points)
        ax.plot(ranks, [points[n][1] for n in ranks], marker="o", label=key)
    ticks = sorted({n for _, points in series for n in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8, label="ideal")
    top = max(e for _, points in series for _, e in points.values())
    ax.set_ylim(0, max(1.05, top * 1.05))  # a linear axis from zero
    ax.set_xlabel("data-parallel ranks")
    ax.set_ylabel("weak-scaling efficiency, T(N) / (N x T(1))")
    ax.set_title("Data-parallel scaling efficiency")
    legend(ax)
    return [save(fig, out, "scaling_efficiency.png")]


def plot_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="bench JSON files, one per machine")
    parser.add_argument("--out", default="plots", help="directory for the PNG files (default plots)")
    add_cost_arguments(parser)
    args = parser.parse_args()
    docs = load_all(args.files)
    labels = file_labels(args.files)
    prices = hourly_prices(args, docs)
    benches = measured(docs, labels)
    unread = [f"{name} ({label})" for doc, label in zip(docs, labels)
              for name in aggregates_only(doc)]
    if not benches:
        raise BadInput("no measured benchmark in " + ", ".join(args.files) + (
            f": {len(unread)} reported by their aggregates alone "
            "(--benchmark_report_aggregates_only), with no repetition to plot; run bench "
            "without that flag" if unread else ""))
    for line in unread:
        print(f"plot: aggregates alone, no repetition to plot, left out: {line}",
              file=sys.stderr)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise BadInput(f"{args.out}: cannot create: {e.strerror}")
    several = len(docs) > 1
    paths = (throughput_by_size(benches, args.out, several)
             + time_per_token(benches, args.out, several)
             + speedup_by_device(docs, labels, args.out)
             + cost_per_million_chart(docs, labels, prices, args.out)
             + scaling_efficiency(docs, labels, args.out))
    if not paths:
        raise BadInput("nothing to plot: no model throughput, no benchmark on "
                                   "several devices or world sizes, and no --cost")
    print("\n".join(paths))



def main():
    run(plot_main)
