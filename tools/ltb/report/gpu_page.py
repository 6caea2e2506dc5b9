"""The tables of a GPU visit's results page, written from the JSON that
tools/gpu-check left (docs/results/<machine>-<date>/): the two ceilings,
every family and phase at its small size in three dtypes with mfu, peak
memory and the speedup over the CPU, decode against the time to read the
weights once, CUDA graphs against eager, and the other checks.

    python -m ltb.report.gpu_page DIR     (from tools/; prints Markdown)

docs/gpu-results.md holds its output between the markers
<!-- tables from DIR --> and <!-- end of tables -->; a test checks that the
page and the files still agree."""
import argparse
import os
import re
import sys

from ltb.base import SMALL_SIZES, BadInput, run
from ltb.results.entries import iterations
from ltb.results.format import human, markdown_table
from ltb.results.load import load

SMALL = SMALL_SIZES
DTYPES = ("fp32", "bf16", "fp16")


def short(name):
    return re.sub(r"/(manual_time|iterations:\d+)", "", name)


def entries(directory, stem):
    path = os.path.join(directory, stem + ".json")
    if not os.path.exists(path):
        raise BadInput(f"{path}: no such file (a gpu-check results folder holds {stem}.json)")
    return {short(e["name"]): e for e in iterations(load(path))}


def rate(e):
    """(value, unit) of a model benchmark's throughput."""
    for unit in ("tokens/s", "samples/s"):
        if unit in e:
            return e[unit], unit
    return None, ""


def num(v, digits=3):
    return "" if v is None else f"{v:.{digits}g}"


def roofline(d):
    rows = []
    for name, e in entries(d, "roofline").items():
        if "mfu" in e:
            rows.append([f"`{name}`", f"{e['FLOP/s'] / 1e12:.1f} TFLOP/s",
                         f"{e['mfu_peak'] / 1e12:.0f} TFLOP/s", num(e["mfu"])])
        elif "mbu" in e:
            rows.append([f"`{name}`", f"{e['bytes/s'] / 1e12:.2f} TB/s",
                         f"{e['mbu_peak'] / 1e12:.1f} TB/s", num(e["mbu"])])
    return markdown_table(["benchmark", "measured", "datasheet peak", "utilisation"], rows)


def families(d):
    """One row per family and phase at its small size: the rate in each
    dtype, mfu in fp32 and bf16, bf16's peak memory and relative error
    against fp32, and the GPU's speedup over the CPU at the CPU's shape."""
    prec = entries(d, "precision")
    default = entries(d, "default")
    rows = []
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
        rows.append([f"{family}/{size} {phase}", unit]
                    + [human(rate(by_dtype[t])[0]) if t in by_dtype and rate(by_dtype[t])[0]
                       else "" for t in DTYPES]
                    + [num(by_dtype.get("fp32", {}).get("mfu"), 2), num(bf16.get("mfu"), 2),
                       f"{bf16['peak_mem'] / 2**30:.2f}" if "peak_mem" in bf16 else "",
                       num(bf16.get("rel_err"), 2), speedup])
    return markdown_table(["family/size phase", "unit", "fp32", "bf16", "fp16", "mfu fp32",
                           "mfu bf16", "peak GiB bf16", "rel_err bf16", "GPU/CPU fp32"], rows)


def decode(d):
    """Decode's time per token against the time to read the weights once
    at the copy bandwidth the roofline measured."""
    copy = max((e["bytes/s"] for n, e in entries(d, "roofline").items()
                if n.startswith("Ops/copy/")), default=None)
    rows = []
    for stem in ("generation", "cuda_graphs"):
        for name, e in entries(d, stem).items():
            if "/generate/" not in name or "tpot_ms" not in e or "weight_GB/s" not in e:
                continue
            weights = e["weight_GB/s"] * 1e9 * e["tpot_ms"] / 1e3  # bytes a token
            floor = weights / copy * 1e3 if copy else None
            rows.append([f"`{name}`", num(e.get("ttft_ms")), num(e["tpot_ms"]),
                         f"{weights / 1e9:.2f}", num(floor), num(e["tpot_ms"] / floor, 2)
                         if floor else "", num(e.get("mbu"), 2)])
    return markdown_table(["benchmark", "ttft_ms", "tpot_ms", "weights GB", "floor ms",
                           "tpot / floor", "mbu"], rows)


def graphs(d):
    ran = entries(d, "cuda_graphs")
    rows = []
    for name, e in ran.items():
        if not name.endswith("/graph"):
            continue
        twin = ran.get(name[: -len("/graph")])
        if not twin:
            continue
        key = "tpot_ms" if "tpot_ms" in e else "real_time"
        unit = "tpot_ms" if key == "tpot_ms" else f"{e.get('time_unit', 'ns')} a step"
        rows.append([f"`{name[: -len('/graph')]}`", unit, num(twin[key]), num(e[key]),
                     f"{twin[key] / e[key]:.2f}x", num(e.get("token_match_%"))])
    return markdown_table(["benchmark", "measure", "eager", "graph", "speed-up",
                           "token_match_% (graph)"], rows)


def others(d):
    rows = []
    for name, e in entries(d, "train_epoch_util").items():
        rows.append(["gpu_util_% during an epoch", f"`{name}`", num(e.get("gpu_util_%"))])
    for name, e in entries(d, "profile").items():
        if "gpu_busy_%" in e:
            rows.append(["gpu_busy_% (--profile)", f"`{name}`", num(e["gpu_busy_%"])])
    for name, e in entries(d, "transfers").items():
        if "bytes/s" in e:
            rows.append(["transfer", f"`{name}`", f"{e['bytes/s'] / 1e9:.1f} GB/s"])
    synced, unsynced = entries(d, "sync_true"), entries(d, "sync_false")
    for name, e in synced.items():
        other = unsynced.get(name + "/nosync")
        if other:
            rows.append(["--sync=true / --sync=false", f"`{name}`",
                         f"{num(e['real_time'])} / {num(other['real_time'])} "
                         f"{e.get('time_unit', 'ns')}"])
    return markdown_table(["check", "benchmark", "value"], rows)


def context_line(d):
    c = load(os.path.join(d, "default.json"))["context"]
    return (f"{c.get('gpus', '?')}; LibTorch {c.get('libtorch_version', '?')}, CUDA "
            f"{c.get('cuda_runtime', '?')}, cuDNN {c.get('cudnn', '?')}; host "
            f"{c.get('cpu_model', '?')}, {c.get('cpu_logical_cores', '?')} cores "
            f"({c.get('cpu_capability', '?')}); commit {c.get('suite_commit', '?')}; "
            f"{c.get('date', '?')[:10]}")


def render(d):
    if not os.path.isdir(d):
        raise BadInput(f"{d}: no such folder (name the folder of a gpu-check visit's JSON)")
    sections = [("Machine", context_line(d)),
                ("The two ceilings (`roofline.json`)", roofline(d)),
                ("Every family and phase at its small size (`precision.json`, "
                 "GPU/CPU from `default.json`)", families(d)),
                ("Decode against reading the weights once (`generation.json` in fp32, "
                 "`cuda_graphs.json` in bf16)", decode(d)),
                ("CUDA graphs against eager (`cuda_graphs.json`, bf16)", graphs(d)),
                ("The other checks", others(d))]
    return "\n\n".join(f"#### {title}\n\n{body}" for title, body in sections) + "\n"


def main():
    parser = argparse.ArgumentParser(prog="python -m ltb.report.gpu_page",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="a gpu-check results folder (its JSON files)")
    args = parser.parse_args()
    sys.stdout.write(render(args.dir))


if __name__ == "__main__":
    run(main)
