"""Data-parallel weak scaling: files of one run per world size merged into
one, and the efficiency table."""

import collections
import re

from ltb.base import BadInput
from ltb.results.entries import collect
from ltb.results.format import format_value, markdown_table
from ltb.results.names import base_name, split_ranks, with_ranks
from ltb.results.records import in_family, split_contexts


# Counters only a data-parallel step reports (several ranks averaging).
DATA_PARALLEL_COUNTERS = ("grad_buckets", "comm_exposed_ms")


# The throughputs an efficiency is read from, in order of preference.
RATE_COUNTERS = ("tokens/s", "samples/s")


# Context settings that decide a rank's speed besides the number of ranks:
# runs at several world sizes that differ in one do not measure scaling alone.
RANK_SETTINGS = ("host_name", "cpu_model", "intra_op_threads", "inter_op_threads",
                 "libtorch_version", "malloc", "grad_mode", "warmup")


def setting_differences(docs):
    """Sentences naming each RANK_SETTINGS key the runs (one per world size)
    do not report alike: 'intra_op_threads: 2 at 1 rank, 1 at 2 ranks'."""
    sizes = [world_size(doc) for doc in docs]
    out = []
    for key in RANK_SETTINGS:
        values = [(n, doc["context"].get(key)) for n, doc in sorted(
            zip(sizes, docs), key=lambda pair: pair[0])]
        if len({str(v) for _, v in values if v is not None}) > 1:
            out.append(f"{key}: " + ", ".join(
                f"{v} at {n} rank{'s' if n > 1 else ''}" for n, v in values if v is not None))
    return out


def world_size(doc, path="results"):
    """The number of ranks a run used, from its context (1 when absent)."""
    value = doc.get("context", {}).get("world_size", 1)
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise BadInput(f"{path}: context world_size {value!r} is not a number of ranks")
    return n


def series_key(name):
    """(the name without /ranks:N nor /bucket_mb:N, N ranks): one rank
    without a process group has no gradient buckets to name, so a run
    given --bucket_mb pairs with it across world sizes (one launch is one
    bucket size)."""
    key, ranks = split_ranks(name)
    return re.sub(r"/bucket_mb:\d+(?=/|$)", "", key), ranks


def scaling_table(doc):
    """The weak scaling of a file of several world sizes (tools/scaling):
    benchmark name without /ranks -> (counter, ranks -> (throughput,
    efficiency)), for each benchmark that ran data-parallel (it reports
    grad_buckets or comm_exposed_ms at some world size above 1) and was
    measured at the file's fewest ranks. Efficiency at N ranks is the
    throughput per rank over that at the fewest ranks: T(N) / (N x T(1))
    when one rank was measured, of the same counter at every world size
    (tokens/s where all report it, else samples/s)."""
    series = collections.OrderedDict()  # name -> ranks -> Benchmark
    for name, bench in collect(doc).items():
        key, ranks = series_key(name)
        if ranks:
            series.setdefault(key, {})[ranks] = bench
    table = collections.OrderedDict()
    sizes = [int(n) for n in str(doc["context"].get("world_sizes", "")).split(",") if n.isdigit()]
    fewest = min(sizes or [n for by_ranks in series.values() for n in by_ranks] or [1])
    for key, by_ranks in series.items():
        parallel = any(n > 1 and any(b.has(c) for c in DATA_PARALLEL_COUNTERS)
                       for n, b in by_ranks.items())
        # Every benchmark against the same base: one without a measurement at
        # the fewest ranks has no efficiency.
        if not parallel or fewest not in by_ranks:
            continue
        # One counter at every world size: the first that all report, else
        # the fewest ranks' (a world size without it has no efficiency).
        counter = next((c for c in RATE_COUNTERS if all(b.has(c) for b in by_ranks.values())),
                       None) or next((c for c in RATE_COUNTERS if by_ranks[fewest].has(c)), None)
        rates = {n: b.median(counter) for n, b in by_ranks.items() if counter and b.has(counter)}
        rates = {n: rate for n, rate in rates.items() if rate}
        if fewest not in rates or len(rates) < 2:
            continue
        per_rank = rates[fewest] / fewest
        table[key] = (counter, collections.OrderedDict(
            (n, (rates[n], rates[n] / n / per_rank)) for n in sorted(rates)))
    return table


def scaling_markdown(doc):
    """The scaling table as Markdown: per data-parallel benchmark, the
    throughput at each world size with its efficiency, and the exposed
    communication of a step at the largest."""
    table = scaling_table(doc)
    if not table:
        return ""
    # Every world size of the file, so that one no benchmark has an
    # efficiency at shows as such.
    sizes = sorted({n for _, points in table.values() for n in points}
                   | {int(n) for n in str(doc["context"].get("world_sizes", "")).split(",")
                      if n.isdigit()})
    exposed = {}
    for name, bench in collect(doc).items():
        key, ranks = series_key(name)
        if key in table and ranks == max(table[key][1]) and bench.has("comm_exposed_ms"):
            exposed[key] = bench.median("comm_exposed_ms")
    headers = ["benchmark"] + [f"{n} rank{'s' if n > 1 else ''}" for n in sizes] + [
        "comm_exposed_ms at the most ranks"]
    rows = []
    for key, (counter, points) in table.items():
        cells = [f"`{key}`"]
        for n in sizes:
            if n not in points:
                cells.append("—")
                continue
            rate, efficiency = points[n]
            cells.append(f"{format_value(counter, rate)} ({efficiency * 100:.0f}%)")
        cells.append(format_value("comm_exposed_ms", exposed.get(key)))
        rows.append(cells)
    return markdown_table(headers, rows)


def merge_world_sizes(docs, paths):
    """One Google Benchmark JSON from runs of the same benchmarks at several
    world sizes: every entry named with /ranks:N and carrying world_size,
    and each data-parallel benchmark's entries its scaling_efficiency. The
    context holds what every run reported alike, world_sizes, and how the
    efficiency is defined; each run's own context values stay in its
    entries."""
    sizes = [world_size(doc, path) for doc, path in zip(docs, paths)]
    for i, n in enumerate(sizes):
        if n in sizes[:i]:
            raise BadInput(f"{paths[i]}: a second run at {n} rank{'s' if n > 1 else ''} "
                           f"(also {paths[sizes.index(n)]}); give one file per world size")
    order = sorted(range(len(docs)), key=lambda i: sizes[i])
    records = [{"status": "ok", "context": docs[i]["context"]} for i in order]
    context, own = split_contexts(records)
    context.pop("world_size", None)
    entries = []
    for record, i in zip(records, order):
        mine = dict(own.get(id(record), {}))
        mine.pop("world_size", None)
        for entry in docs[i]["benchmarks"]:
            renamed = with_ranks(entry, sizes[i])
            entries.append(dict(renamed, context=mine) if mine else renamed)
    context["world_sizes"] = ",".join(str(sizes[i]) for i in order)
    context["scaling"] = ("weak: --batch is per rank; scaling_efficiency at N ranks is the "
                          "throughput per rank over that at the fewest ranks measured, "
                          "T(N) / (N x T(1)) from one rank; a train_epoch splits "
                          "--dataset_samples over the ranks (strong scaling), whose "
                          "efficiency the same ratio of throughputs is")
    names = list(collections.OrderedDict.fromkeys(base_name(e) for e in entries))
    entries = [in_family(e, names.index(base_name(e))) for e in entries]
    merged = {"context": context, "benchmarks": entries}
    table = scaling_table(merged)
    for entry in entries:
        key, ranks = series_key(base_name(entry))
        if (key in table and ranks in table[key][1] and not entry.get("error_occurred")
                and entry.get("run_type", "iteration") == "iteration"):
            entry["scaling_efficiency"] = table[key][1][ranks][1]
    return merged
