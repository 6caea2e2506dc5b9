"""The tables of GPU visits' results page, written from the JSON that
tools/gpu-check left (docs/results/<machine>-<date>/): the two ceilings,
every family and phase at its small size in three dtypes with mfu, peak
memory and the speedup over the CPU, decode against the time to read the
weights once, CUDA graphs against eager, generation under load (TTFT and
TPOT, where the visit served it), and the other checks. Given several
visits (one GPU each), each cell holds their values side by side, and ratio
columns divide each later GPU's figure by the first's.

    python -m ltb.report.gpu_page DIR [DIR ...]     (from tools/; prints Markdown)

docs/gpu-results.md holds its output between the markers
<!-- tables from DIR [DIR ...] --> and <!-- end of tables -->; a test checks
that the page and the files still agree."""
import argparse
import os
import re
import sys

from ltb.base import SMALL_SIZES, BadInput, run
from ltb.results.entries import iterations, median_entry
from ltb.results.format import human, markdown_table
from ltb.results.load import load
from ltb.results.names import base_name, parse_name

SMALL = SMALL_SIZES
DTYPES = ("fp32", "bf16", "fp16")


def entries(directory, stem):
    """Benchmark name (without Google Benchmark's suffixes) -> its measured
    entry, repetitions merged into their medians; failed entries left out."""
    path = os.path.join(directory, stem + ".json")
    if not os.path.exists(path):
        raise BadInput(f"{path}: no such file (a gpu-check results folder holds {stem}.json)")
    runs = {}
    for e in iterations(load(path)):
        runs.setdefault(base_name(e), []).append(e)
    return {name: r[0] if len(r) == 1 else median_entry(r) for name, r in runs.items()}


def peak_source(doc, name):
    """Where the peak an Ops entry's mfu or mbu divides by comes from, as the
    run's context says (bench takes a GPU's datasheet where it knows one,
    else measures it, or is given it): 'datasheet', 'measured', the flag
    that gave it, or 'source unknown'."""
    fields = parse_name(name)
    device = fields["device"].split(":")[0]
    precision = "tf32" if "tf32" in name.split("/") else fields["dtype"]
    key = (f"peak_flops_{device}_{precision}" if fields["size"] == "matmul"
           else f"peak_bandwidth_{device}")
    found = re.search(r"\((datasheet|measured|--peak_\w+)", str(doc.get("context", {}).get(key, "")))
    return found.group(1) if found else "source unknown"


def rate(e):
    """(value, unit) of a model benchmark's throughput."""
    for unit in ("tokens/s", "samples/s"):
        if unit in e:
            return e[unit], unit
    return None, ""


def num(v, digits=3):
    return "" if v is None else f"{v:.{digits}g}"


class Table:
    """A table of one visit: its first `keys` columns name a row (the same
    row in every visit), the others hold its values; `numbers` holds, for
    each row, the figures the ratio columns divide."""

    def __init__(self, headers, keys, ratios=()):
        self.headers, self.keys, self.ratios = headers, keys, list(ratios)
        self.rows = {}  # key cells -> (value cells, {ratio header: number})

    def add(self, cells, **numbers):
        self.rows[tuple(cells[:self.keys])] = (cells[self.keys:], numbers)


def ratio_header(ratio, labels, i):
    return f"{ratio} {labels[i]}/{labels[0]}"


def side_by_side(tables, labels):
    """One visit's table as it is; several visits' as one table whose value
    cells read `first / second / ...` (— where a visit lacks the row),
    followed by each later visit's ratio to the first."""
    if len(tables) == 1:
        return markdown_table(tables[0].headers,
                              [list(k) + v for k, (v, _) in tables[0].rows.items()])
    first = tables[0]
    order = list(dict.fromkeys(k for t in tables for k in t.rows))
    headers = first.headers + [ratio_header(r, labels, i) for r in first.ratios
                               for i in range(1, len(tables))]
    rows = []
    for key in order:
        found = [t.rows.get(key) for t in tables]
        width = len(first.headers) - first.keys
        cells = []
        for c in range(width):
            values = [f[0][c] if f else "—" for f in found]
            cells.append(" / ".join(v or "—" for v in values) if any(values) else "")
        for r in first.ratios:
            for f in found[1:]:
                a = found[0][1].get(r) if found[0] else None
                b = f[1].get(r) if f else None
                cells.append(f"{b / a:.2f}" if a and b else "")
        rows.append(list(key) + cells)
    return markdown_table(headers, rows)


def roofline(d):
    """The matrix product's and the copy's rates against the peaks their
    mfu and mbu divide by, each peak with its source: a measured peak is no
    datasheet's."""
    t = Table(["benchmark", "measured", "peak", "utilisation"], 1, ratios=["measured"])
    ran = entries(d, "roofline")  # first: it names a missing file
    doc = load(os.path.join(d, "roofline.json"))
    for name, e in ran.items():
        if "mfu" in e:
            t.add([f"`{name}`", f"{e['FLOP/s'] / 1e12:.1f} TFLOP/s",
                   f"{e['mfu_peak'] / 1e12:.0f} TFLOP/s ({peak_source(doc, name)})",
                   num(e["mfu"])], measured=e["FLOP/s"])
        elif "mbu" in e:
            t.add([f"`{name}`", f"{e['bytes/s'] / 1e12:.2f} TB/s",
                   f"{num(e['mbu_peak'] / 1e12)} TB/s ({peak_source(doc, name)})",
                   num(e["mbu"])], measured=e["bytes/s"])
    return t


def families(d):
    """One row per family and phase at its small size: the rate in each
    dtype, mfu in fp32 and bf16, bf16's peak memory and relative error
    against fp32, and the GPU's speedup over the CPU at the CPU's shape."""
    prec = entries(d, "precision")
    default = entries(d, "default")
    t = Table(["family/size phase", "unit", "fp32", "bf16", "fp16", "mfu fp32", "mfu bf16",
               "peak GiB bf16", "rel_err bf16", "GPU/CPU fp32"], 2, ratios=["fp32", "bf16"])
    seen = []
    for name in prec:
        parts = name.split("/")
        if parts[0] not in SMALL or parts[1] != SMALL[parts[0]]:
            continue
        key = "/".join(parts[:4])
        if key not in seen:
            seen.append(key)
    for key in seen:
        family, size, device, phase = key.split("/")
        by_dtype = {}
        for name, e in prec.items():
            if name.startswith(key + "/"):
                dtype = next((p for p in name.split("/") if p in DTYPES), None)
                by_dtype[dtype] = e
        unit = next((rate(e)[1] for e in by_dtype.values() if rate(e)[0]), "")
        speedup = ""
        for name, e in default.items():
            if not name.startswith(f"{family}/{size}/cpu/{phase}/"):
                continue
            twin = default.get(name.replace("/cpu/", f"/{device}/", 1))
            if twin and rate(e)[0] and rate(twin)[0]:
                speedup = f"{rate(twin)[0] / rate(e)[0]:.1f}x"
        bf16 = by_dtype.get("bf16", {})
        t.add([f"{family}/{size} {phase}", unit]
              + [human(rate(by_dtype[d])[0]) if d in by_dtype and rate(by_dtype[d])[0]
                 else "" for d in DTYPES]
              + [num(by_dtype.get("fp32", {}).get("mfu"), 2), num(bf16.get("mfu"), 2),
                 f"{bf16['peak_mem'] / 2**30:.2f}" if "peak_mem" in bf16 else "",
                 num(bf16.get("rel_err"), 2), speedup],
              **{d: rate(by_dtype.get(d, {}))[0] for d in ("fp32", "bf16")})
    return t


def decode(d):
    """Decode's time per token against the time to read the weights once
    at the copy bandwidth the roofline measured."""
    copy = max((e["bytes/s"] for n, e in entries(d, "roofline").items()
                if n.startswith("Ops/copy/")), default=None)
    t = Table(["benchmark", "ttft_ms", "tpot_ms", "weights GB", "floor ms", "tpot / floor",
               "mbu"], 1, ratios=["tpot_ms"])
    for stem in ("generation", "cuda_graphs"):
        for name, e in entries(d, stem).items():
            if "/generate/" not in name or "tpot_ms" not in e or "weight_GB/s" not in e:
                continue
            weights = e["weight_GB/s"] * 1e9 * e["tpot_ms"] / 1e3  # bytes a token
            floor = weights / copy * 1e3 if copy else None
            t.add([f"`{name}`", num(e.get("ttft_ms")), num(e["tpot_ms"]),
                   f"{weights / 1e9:.2f}", num(floor), num(e["tpot_ms"] / floor, 2)
                   if floor else "", num(e.get("mbu"), 2)], tpot_ms=e["tpot_ms"])
    return t


def graphs(d):
    ran = entries(d, "cuda_graphs")
    t = Table(["benchmark", "measure", "eager", "graph", "speed-up", "token_match_% (graph)"],
              2, ratios=["graph"])
    for name, e in ran.items():
        if not name.endswith("/graph"):
            continue
        twin = ran.get(name[: -len("/graph")])
        if not twin:
            continue
        key = "tpot_ms" if "tpot_ms" in e else "real_time"
        unit = "tpot_ms" if key == "tpot_ms" else f"{e.get('time_unit', 'ns')} a step"
        t.add([f"`{name[: -len('/graph')]}`", unit, num(twin[key]), num(e[key]),
               f"{twin[key] / e[key]:.2f}x", num(e.get("token_match_%"))], graph=e[key])
    return t


def served_generation(d):
    """Generation under load (gpu-check's serve step, where a visit ran it):
    LoadGen's tokens/s and TTFT and TPOT percentiles of each served
    generation, and its graphed Offline run beside its eager twin."""
    # One column a percentile: side by side, a cell holds one figure per visit.
    t = Table(["benchmark", "tokens/s", "ttft p50 ms", "ttft p99 ms", "tpot p50 ms",
               "tpot p99 ms", "mean active slots", "LoadGen"], 1, ratios=["tokens/s"])
    ran = {}
    for stem in ("serve_generate", "serve_graphs", "serve_graphs_bf16"):
        if os.path.exists(os.path.join(d, stem + ".json")):
            ran.update(entries(d, stem))
    for name, e in ran.items():
        if "tokens/s" not in e:
            continue
        latency = [num(e.get(f"{k}_p{q}_ms")) for k in ("ttft", "tpot") for q in (50, 99)]
        verdict = e.get("label", "").split(" ", 1)[-1].split(" (")[0]
        t.add([f"`{name}`", human(e["tokens/s"]), *latency, num(e.get("mean_active_slots")),
               verdict], **{"tokens/s": e["tokens/s"]})
    return t


def others(d):
    t = Table(["check", "benchmark", "value"], 2)
    for name, e in entries(d, "train_epoch_util").items():
        t.add(["gpu_util_% during an epoch", f"`{name}`", num(e.get("gpu_util_%"))])
    for name, e in entries(d, "profile").items():
        if "gpu_busy_%" in e:
            t.add(["gpu_busy_% (--profile)", f"`{name}`", num(e["gpu_busy_%"])])
    for name, e in entries(d, "transfers").items():
        if "bytes/s" in e:
            t.add(["transfer", f"`{name}`", f"{e['bytes/s'] / 1e9:.1f} GB/s"])
    synced, unsynced = entries(d, "sync_true"), entries(d, "sync_false")
    for name, e in synced.items():
        other = unsynced.get(name + "/nosync")
        if other:
            for flag, ran in (("true", e), ("false", other)):
                t.add([f"a step with --sync={flag}", f"`{name}`",
                       f"{num(ran['real_time'])} {ran.get('time_unit', 'ns')}"])
    return t


def context(d):
    return load(os.path.join(d, "default.json"))["context"]


def context_line(d):
    c = context(d)
    return (f"{c.get('gpus', '?')}; LibTorch {c.get('libtorch_version', '?')}, CUDA "
            f"{c.get('cuda_runtime', '?')}, cuDNN {c.get('cudnn', '?')}; host "
            f"{c.get('cpu_model', '?')}, {c.get('cpu_logical_cores', '?')} cores "
            f"({c.get('cpu_capability', '?')}); commit {c.get('suite_commit', '?')}; "
            f"{c.get('date', '?')[:10]}")


def label(d):
    """A visit's short name: its GPU's model (H200), else its folder's."""
    found = re.search(r"NVIDIA\s+(?:GeForce\s+)?(\w+)", str(context(d).get("gpus", "")))
    return found.group(1) if found else os.path.basename(os.path.normpath(d))


SECTIONS = [("The two ceilings (`roofline.json`)", roofline),
            ("Every family and phase at its small size (`precision.json`, "
             "GPU/CPU from `default.json`)", families),
            ("Decode against reading the weights once (`generation.json` in fp32, "
             "`cuda_graphs.json` in bf16)", decode),
            ("CUDA graphs against eager (`cuda_graphs.json`, bf16)", graphs),
            ("Generation under load (`serve_generate.json`, `serve_graphs*.json`)",
             served_generation),
            ("The other checks", others)]
# Sections of checks that older visits did not run: shown where a visit has
# a row.
OPTIONAL = {served_generation}


def render(*dirs):
    if not dirs:
        raise BadInput("name the folder of at least one gpu-check visit's JSON")
    for d in dirs:
        if not os.path.isdir(d):
            raise BadInput(f"{d}: no such folder (name the folder of a gpu-check visit's JSON)")
    labels = [label(d) for d in dirs]
    if len(set(labels)) < len(labels):
        labels = [os.path.basename(os.path.normpath(d)) for d in dirs]
    if len(dirs) == 1:
        machine = context_line(dirs[0])
    else:
        machine = (f"Each cell reads {' / '.join(labels)}; a column "
                   f"`X {labels[-1]}/{labels[0]}` divides {labels[-1]}'s X by "
                   f"{labels[0]}'s.\n\n"
                   + "\n".join(f"- {lab}: {context_line(d)}" for lab, d in zip(labels, dirs)))
    sections = [("Machine" if len(dirs) == 1 else "Machines", machine)]
    for title, table in SECTIONS:
        tables = [table(d) for d in dirs]
        if table not in OPTIONAL or any(t.rows for t in tables):
            sections.append((title, side_by_side(tables, labels)))
    return "\n\n".join(f"#### {title}\n\n{body}" for title, body in sections) + "\n"


def main():
    parser = argparse.ArgumentParser(prog="python -m ltb.report.gpu_page",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="a gpu-check results folder (its JSON files); several are "
                             "laid side by side")
    args = parser.parse_args()
    sys.stdout.write(render(*args.dirs))


if __name__ == "__main__":
    run(main)
