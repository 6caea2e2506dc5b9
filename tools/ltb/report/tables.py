"""tools/report's Markdown and CSV: one row per benchmark and file with its
median time, throughput, spread, cost and speedup; the compiled models'
drift and compile times; llama-bench's pp/tg table; C++ beside Python."""
import collections
import csv
import math
import re
import statistics
import sys

from ltb.results import runtimes
from ltb.results.cost import cost_per_epoch, cost_per_million
from ltb.results.entries import (ACCURACY_COUNTERS, REPORT_COUNTERS, aggregates_only, collect,
                                 errors, seconds)
from ltb.results.format import format_seconds, format_value, human, markdown_table
from ltb.results.names import parse_name, split_ranks
from ltb.results.scaling import scaling_markdown
from ltb.results.speedup import device_speedup_lines


def rows(docs, labels, prices):
    """One dict per benchmark and file, benchmarks in first-seen order."""
    per_file = [collect(doc) for doc in docs]
    names = collections.OrderedDict((n, None) for found in per_file for n in found)
    first = per_file[0]
    out = []
    for name in names:
        for i, found in enumerate(per_file):
            if name not in found:
                continue
            bench = found[name]
            row = {"benchmark": name, "file": labels[i], "repetitions": bench.repetitions,
                   "time": bench.median_time, "peak_mem": bench.median("peak_mem")}
            for counter in REPORT_COUNTERS:
                row[counter] = bench.median(counter)
            for counter in (*ACCURACY_COUNTERS, "rel_err", "compile_s"):
                row[counter] = bench.median(counter)
            if bench.has("step_cv_%"):
                # The spread of the steps inside a run: a repetition's time is
                # their mean, its step_cv_% their standard deviation over it;
                # each repetition's own product, then their median (the
                # median time by the median cv can be no repetition's).
                row["step_sd_ms"] = statistics.median(
                    seconds(e) * 1e3 * e["step_cv_%"] / 100 for e in bench.entries
                    if isinstance(e.get("step_cv_%"), (int, float))
                    and math.isfinite(e["step_cv_%"]))
            # A run of one step has percentiles (its one time) but no cv.
            for counter in SPREAD_COUNTERS:
                row[counter] = bench.median(counter)
            if len(docs) > 1 and name in first:
                row["speedup"] = first[name].median_time / bench.median_time
            if prices:
                cost, unit = cost_per_million(bench, prices[i])
                if unit:
                    row[f"cost/1M {unit}"] = cost
                row["cost/epoch"] = cost_per_epoch(bench, prices[i])
            out.append(row)
    return out


SPREAD_COUNTERS = ("step_cv_%", "step_p50_ms", "step_p90_ms", "step_p99_ms")


def columns(table, several_files):
    """The columns any row has a value for, in a fixed order."""
    wanted = ["benchmark"] + (["file"] if several_files else []) + ["repetitions", "time"]
    wanted += ["step_sd_ms", *SPREAD_COUNTERS]
    wanted += list(REPORT_COUNTERS) + ["peak_mem", *ACCURACY_COUNTERS, "rel_err", "compile_s"]
    wanted += ["speedup"] if several_files else []
    wanted += ["cost/1M tokens", "cost/1M samples", "cost/epoch"]
    return [c for c in wanted
            if c in ("benchmark", "file", "time") or any(r.get(c) is not None for r in table)]


def markdown_cell(column, value):
    if value is None:
        return "—"
    if column == "benchmark":
        return f"`{value}`"
    if column in ("file", "repetitions"):
        return str(value)
    if column == "speedup":
        return f"{value:.2f}x"
    if column.startswith("cost"):
        return f"{value:.4g}"
    return format_value(column, value)


MARKDOWN_HEADERS = {"time": "median time", "peak_mem": "peak memory", "repetitions": "reps",
                    "speedup": "speedup vs first", "step_sd_ms": "step sd"}
CSV_HEADERS = {"time": "median_s", "peak_mem": "peak_mem_bytes"}


BACKENDS = ("aoti", "torchscript")


def compiled_rows(docs, labels):
    """Per compiled benchmark and file with its eager twin: speedup, memory
    ratio, compile time and drift."""
    out = []
    for doc, label in zip(docs, labels):
        found = collect(doc)
        for name, bench in found.items():
            # /ranks:N (a file of several world sizes) follows the backend.
            key, ranks = split_ranks(name)
            eager_name, _, backend = key.rpartition("/")
            eager_name += f"/ranks:{ranks}" if ranks else ""
            if backend not in BACKENDS or eager_name not in found:
                continue
            eager = found[eager_name]
            row = {"benchmark": eager_name, "file": label, "backend": backend,
                   "eager": eager.median_time, "compiled": bench.median_time,
                   "speedup": eager.median_time / bench.median_time,
                   "compile_s": bench.median("compile_s"), "rel_err": bench.median("rel_err")}
            if eager.has("peak_mem") and bench.has("peak_mem") and bench.median("peak_mem") > 0:
                row["memory_ratio"] = eager.median("peak_mem") / bench.median("peak_mem")
            out.append(row)
    return out


def compiled_markdown(table, several_files):
    headers = ["benchmark"] + (["file"] if several_files else []) + [
        "backend", "eager", "compiled", "speedup", "memory ratio", "compile time", "rel_err"]
    rows = []
    for r in table:
        cells = [f"`{r['benchmark']}`"] + ([r["file"]] if several_files else []) + [
            r["backend"], format_seconds(r["eager"]),
            format_seconds(r["compiled"]), f"{r['speedup']:.2f}x",
            "—" if r.get("memory_ratio") is None else f"{r['memory_ratio']:.2f}x",
            "—" if r["compile_s"] is None else f"{r['compile_s']:.1f} s",
            "—" if r["rel_err"] is None else f"{r['rel_err']:.2g}"]
        rows.append(cells)
    return markdown_table(headers, rows)


def llama_bench_rows(docs, labels):
    """Generation benchmarks as llama-bench's table: per benchmark two tests,
    pp<P> (the prefill's prompt tokens/s) and tg<N-1> (the decode steps'
    tokens/s), each '@ d<D>' at a depth; t/s as the mean and standard
    deviation over the repetitions."""
    out = []
    for doc, label in zip(docs, labels):
        threads = doc.get("context", {}).get("intra_op_threads", "")
        for name, bench in collect(doc).items():
            fields = parse_name(name)
            settings = fields["settings"]
            if fields["phase"] != "generate" or "prompt" not in settings:
                continue
            depth = settings.get("depth", 0)
            at = f" @ d{depth}" if depth else ""
            params = bench.median("params")
            variant = name_variant(name)
            # A quantised model's weights do not take the dtype's bytes.
            quantised = any(QUANTISED.fullmatch(p) for p in variant)
            size = (params * DTYPE_BYTES[fields["dtype"]]
                    if params and fields["dtype"] in DTYPE_BYTES and not quantised else None)
            model = f"{fields['family']} {fields['size']}"
            if "weights" in settings:
                model += f" ({settings['weights']})"
            for test, counter in ((f"pp{settings['prompt']}{at}", "pp_tok/s"),
                                  (f"tg{settings['new'] - 1}{at}", "tg_tok/s")):
                values = bench.values(counter)
                if not values:
                    continue
                out.append({"model": model, "size": size, "params": params,
                            "backend": fields["device"],
                            "dtype": "/".join([fields["dtype"], *variant]),
                            "threads": threads, "test": test, "file": label,
                            "mean": statistics.mean(values),
                            "sd": statistics.stdev(values) if len(values) > 1 else None})
    return out


DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
QUANTISED = re.compile(r"int8|int8dyn|int4(:.*)?")


def name_variant(name):
    """What a name says after its dtype besides the checkpoint's weights
    (tf32, int8, int4:g32, graph, onednn, nosync, ...): two results of one
    model that differ only there are two rows, each saying which it is."""
    parts = name.split("/")
    for i, part in enumerate(parts[4:], 4):
        if ":" not in part and part != "nosync":
            return [p for p in parts[i + 1:] if not p.startswith("weights:")]
    return []


def format_size(size):
    """llama-bench's GiB to two decimals, or MiB under a GiB (where 0.00 GiB
    would hide a small model's size)."""
    if size is None:
        return "—"
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.2f} MiB"


def llama_bench_markdown(table, several_files):
    headers = ["model", "size", "params", "backend", "dtype", "threads", "test", "t/s"]
    headers += ["file"] if several_files else []
    rows = []
    for r in table:
        ts = f"{r['mean']:.2f}" + ("" if r["sd"] is None else f" ± {r['sd']:.2f}")
        cells = [r["model"],
                 format_size(r["size"]),
                 "—" if r["params"] is None else human(r["params"]),
                 r["backend"], r["dtype"], str(r["threads"]), r["test"], ts]
        rows.append(cells + ([r["file"]] if several_files else []))
    return markdown_table(headers, rows)


def errored(docs, labels):
    return [f"`{name}` ({label}): {message}" for doc, label in zip(docs, labels)
            for name, message in errors(doc).items()]


AGGREGATES_ONLY = ("Reported by their aggregates alone (mean, median, ...: "
                   "--benchmark_report_aggregates_only), with no repetition to report:")


def aggregated(docs, labels):
    return [f"`{name}` ({label})" for doc, label in zip(docs, labels)
            for name in aggregates_only(doc)]


def markdown(table, cols, docs, labels):
    out = [markdown_table([MARKDOWN_HEADERS.get(c, c) for c in cols],
                                      [[markdown_cell(c, r.get(c)) for c in cols] for r in table])]
    generation = llama_bench_rows(docs, labels)
    if generation:
        out += ["", "Generation as llama-bench reports it (ppP: the prompt's P tokens/s in "
                "the prefill; tgN: tokens/s of the N decode steps after the first token; "
                "@ dD: with D tokens already in the cache; t/s: mean ± standard deviation "
                "over the repetitions):", "",
                llama_bench_markdown(generation, len(docs) > 1)]
    compiled = compiled_rows(docs, labels)
    if compiled:
        out += ["", "Compiled against eager (speedup: eager time over compiled; memory ratio: "
                "eager peak_mem over compiled):", "", compiled_markdown(compiled, len(docs) > 1)]
    by_runtime = runtimes.rows(docs, labels)
    if by_runtime:
        out += ["", "C++ and Python (time / Python eager: the mean step time's ratio, with "
                "its 95% confidence interval from the repetitions, or from the rounds' "
                "means where each side has two or more files; noise: the interval "
                "holds 1):", "", runtimes.markdown(by_runtime)]
    for doc, label in zip(docs, labels):
        scaling = scaling_markdown(doc)
        if scaling:
            out += ["", f"Data-parallel weak scaling{f' ({label})' if len(docs) > 1 else ''}: "
                    "throughput summed over ranks, and in brackets the efficiency, the "
                    "throughput per rank over that at the fewest ranks:", "", scaling]
    failures = errored(docs, labels)
    if failures:
        out += ["", "Errored:", *[f"- {line}" for line in failures]]
    unread = aggregated(docs, labels)
    if unread:
        out += ["", AGGREGATES_ONLY, *[f"- {line}" for line in unread]]
    speedup = device_speedup_lines(docs, labels)
    if speedup:
        out += ["", "Device speedup (throughput, and speedup over cpu):", "", "```",
                *speedup, "```"]
    return "\n".join(out)


def write_csv(table, cols):
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([CSV_HEADERS.get(c, c) for c in cols])
    for r in table:
        writer.writerow(["" if r.get(c) is None else repr(r[c]) if isinstance(r[c], float)
                         else r[c] for c in cols])
