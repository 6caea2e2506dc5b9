"""bench results in the formats of benchmark dashboards, and the suite's
models as compiled files.

    tools/export {bigger,smaller,bencher} RESULTS.json [-o OUT.json]
    tools/export {aoti,torchscript} FAMILY SIZE [--batch B] [--seq T]
                 [--dtype fp32|bf16|fp16] [--device cpu|cuda] [--seed N]
                 [--dynamic-batch] [--out DIR]

The formats, the files and what bench does with them: docs/tools.md, "export".
"""
import argparse
import json
import os
import re
import statistics
import sys

from ltb.base import BadInput, require, run
from ltb.pysuite import facts
from ltb.results.entries import TIME_UNITS, aggregates_only, collect
from ltb.results.load import load

SMALLER_COUNTERS = ("peak_mem", "ttft_ms", "tpot_ms", "tpot_growth_%")
UNITS = {"peak_mem": "bytes", "ttft_ms": "ms", "tpot_ms": "ms", "tpot_growth_%": "%"}


def metrics(bench, bigger):
    """(metric, unit, values) of one benchmark, bigger or smaller is better."""
    if bigger:
        counters = sorted({k for e in bench.entries for k in e if k.endswith("/s")})
        return [(c, c, bench.values(c)) for c in counters if bench.has(c)]
    unit = bench.entries[0].get("time_unit", "ns")
    times = [t / TIME_UNITS[unit] for t in bench.times]
    return [("time", unit, times)] + [(c, UNITS[c], bench.values(c))
                                      for c in SMALLER_COUNTERS if bench.has(c)]


def github_entries(benches, bigger):
    out = []
    for bench in benches:
        for metric, unit, values in metrics(bench, bigger):
            entry = {"name": f"{bench.name} - {metric}", "unit": unit,
                     "value": statistics.median(values)}
            if len(values) > 1:
                entry["range"] = f"± {statistics.stdev(values):.6g}"
                entry["extra"] = f"median of {len(values)} repetitions"
            out.append(entry)
    return out


def slug(metric):
    """A Bencher measure slug: 'tokens/s' -> 'tokens-per-second'."""
    text = metric.lower().replace("/s", "-per-second").replace("%", "-percent")
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def bencher(benches):
    out = {}
    for bench in benches:
        measures = {}
        for metric, unit, values in metrics(bench, False) + metrics(bench, True):
            if metric == "time":
                values = [t * 1e9 for t in bench.times]
            measures["latency" if metric == "time" else slug(metric)] = {
                "value": statistics.median(values),
                "lower_value": min(values), "upper_value": max(values)}
        out[bench.name] = measures
    return out


MODEL_FORMATS = ("aoti", "torchscript")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
def inference_phase(family):
    """The phase a compiled file computes (forward, Whisper's encode), as
    bench's facts name it: the family's first served phase."""
    return facts.settings(family)["serve_phases"][0]


def has_seq(family):
    """Whether the inference benchmark's name carries a sequence length."""
    return facts.settings(family)["shapes"][inference_phase(family)] == "sequence"


def benchmark_name(family, size, device, batch, seq, dtype):
    """The eager benchmark's name, as bench writes it."""
    device = "cuda" if device in ("cuda", "cuda:0") else device
    name = f"{family}/{size}/{device}/{inference_phase(family)}/batch:{batch}"
    if has_seq(family):
        name += f"/seq:{seq}"
    return f"{name}/{dtype}"


def file_stem(name):
    """bench's FileStem: the name with / and : replaced."""
    return name.replace("/", "-").replace(":", "")


def export_model(argv):
    parser = argparse.ArgumentParser(prog="tools/export", description="the suite's models as "
                                     "compiled files (see tools/export --help)")
    parser.add_argument("format", choices=MODEL_FORMATS)
    parser.add_argument("family")
    parser.add_argument("size")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seq", type=int)
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dynamic-batch", action="store_true",
                        help="AOTInductor: compile for any batch (bench --model --batch sweeps it)")
    parser.add_argument("--out", default="exports", help="directory (default: exports)")
    args = parser.parse_args(argv)
    require("torch")
    import time

    import torch

    from ltb.pysuite import families
    if args.family not in families.FAMILIES:
        raise BadInput(f"unknown family '{args.family}'; valid: "
                                   f"{', '.join(families.FAMILIES)}")
    if args.size not in families.sizes(args.family):
        raise BadInput(f"unknown {args.family} size '{args.size}'; valid: "
                                   f"{', '.join(families.sizes(args.family))}")
    for flag in ("batch", "seq"):
        if getattr(args, flag) is not None and getattr(args, flag) <= 0:
            raise BadInput(f"--{flag} must be positive")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise BadInput(f"unknown --device '{args.device}'; valid: cpu, cuda, cuda:N")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise BadInput(f"--device={args.device}: this PyTorch sees no CUDA device")
    defaults = facts.settings(args.family)  # bench's default shapes
    batch = args.batch or defaults["batch"]
    seq = (args.seq or defaults["seqs"][0]) if has_seq(args.family) else None
    dtype = getattr(torch, DTYPES[args.dtype])
    name = benchmark_name(args.family, args.size, args.device, batch, seq, args.dtype)
    stem = os.path.join(args.out, f"{file_stem(name)}-{args.format}")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--out={args.out}: {e.strerror}")

    torch.manual_seed(args.seed)
    model = families.forward_module(args.family, args.size, seq=seq).to(args.device, dtype)
    inputs = families.forward_inputs(args.family, args.size, batch, seq, dtype, args.device,
                                       generator=torch.Generator().manual_seed(args.seed))
    with torch.inference_mode():
        expected = model(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]

    meta = {"ltb_benchmark": name, "ltb_dtype": args.dtype, "ltb_torch_version": torch.__version__}
    start = time.monotonic()
    if args.format == "aoti":
        path = stem + ".pt2"
        dynamic = None
        if args.dynamic_batch:
            dim = torch.export.Dim("batch", min=1, max=4096)
            dynamic = tuple({0: dim} for _ in inputs)
        try:
            with torch.no_grad():
                program = torch.export.export(model, tuple(inputs), dynamic_shapes=dynamic)
                torch._inductor.aoti_compile_and_package(
                    program, package_path=path, inductor_configs={"aot_inductor.metadata": meta})
        except Exception as e:  # the compiler's own errors, with its message
            raise BadInput(f"{name}: cannot compile with AOTInductor: {e}")
    else:
        path = stem + ".pt"
        try:
            with torch.no_grad():
                traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
            torch.jit.save(traced, path, _extra_files={
                "ltb_meta.txt": "".join(f"{k}: {v}\n" for k, v in meta.items())})
        except Exception as e:
            raise BadInput(f"{name}: cannot trace to TorchScript: {e}")
    compile_s = time.monotonic() - start  # export and compile, or trace
    torch.save({"inputs": [t.cpu() for t in inputs], "expected": [t.cpu() for t in expected],
                "compile_s": compile_s}, stem + ".io.pt")
    print(path)
    print(f"export: {name} -> {path} in {compile_s:.1f} s", file=sys.stderr)


def export_main():
    if len(sys.argv) > 1 and sys.argv[1] in MODEL_FORMATS:
        return export_model(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=("bigger", "smaller", "bencher", *MODEL_FORMATS))
    parser.add_argument("file", help="bench JSON")
    parser.add_argument("-o", "--output", help="write here instead of stdout")
    args = parser.parse_args()
    doc = load(args.file)
    benches = list(collect(doc).values())
    # A benchmark with no repetition (--benchmark_report_aggregates_only)
    # has nothing to export: say so rather than leave it out unseen.
    unread = aggregates_only(doc)
    for name in unread:
        print(f"export: {args.file}: {name} has only aggregates (mean, median, ...), no "
              "repetition: left out", file=sys.stderr)
    if args.format == "bencher":
        result = bencher(benches)
    else:
        result = github_entries(benches, args.format == "bigger")
    if not result:
        raise BadInput(f"{args.file}: no measured benchmark with "
                       f"{'throughput counters' if args.format == 'bigger' else 'times'}"
                       + ("; run bench without --benchmark_report_aggregates_only"
                          if unread else ""))
    text = json.dumps(result, indent=2)
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text + "\n")
        except OSError as e:
            raise BadInput(f"{args.output}: cannot write: {e.strerror}")
    else:
        print(text)



def main():
    run(export_main)
