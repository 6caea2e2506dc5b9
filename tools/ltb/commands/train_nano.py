"""Llama/nano and GPT2/nano trained on the Python standard library's sources,
and the perplexity each precision gives a held-out slice of them.

    tools/train-nano [train] [--out DIR] [--steps N] [--force]
    tools/train-nano table [--out DIR] [--bench PATH] [--devices cpu]
                           [BENCH ARGUMENTS ...]

train makes the two checkpoints and the held-out text where missing; table
scores them in each precision with bench. docs/measurement.md, "Perplexity
on a held-out text".
"""
import argparse
import json
import subprocess
import sys

from ltb.base import BadInput, require, run
from ltb.bench_process.bench import check_bench, default_bench, last_lines, split_bench_args
from ltb.results.format import markdown_table

# The table's rows: (the name's precision part, its label).
PRECISIONS = (("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16"),
              ("fp32/int8", "int8 (fp32)"), ("fp32/int8dyn", "int8dyn (fp32)"),
              ("fp32/int4:g32", "int4:g32 (fp32)"))
COUNTERS = ("ppl", "ppl_ratio", "kld_mean", "same_top1_%")
SHAPE = "batch:1/seq:128"
OWN_FLAGS = dict({flag: "train-nano sets it" for flag in (
    "--benchmark_filter", "--weights", "--eval_tokens", "--dtype", "--quant",
    "--quant_group", "--batch", "--seq", "--benchmark_format", "--benchmark_out")},
    # The table has one row a precision: repetitions of the same scoring
    # would each be a row of their own.
    **{flag: "the table scores each precision once (its counters are accuracy, not time)"
       for flag in ("--benchmark_repetitions", "--benchmark_report_aggregates_only",
                    "--benchmark_display_aggregates_only")})


def nano_text():
    """ltb.pysuite.nano_text, once the arguments are checked: it needs torch
    and numpy."""
    require("numpy", "torch")
    from ltb.pysuite import nano_text as module
    return module


def log(message):
    print(message, file=sys.stderr, flush=True)


def bench_rows(bench, family, made, devices, bench_args):
    """One bench run of the family's table rows: [(device, label, entry)]."""
    device = "[a-z]+(:[0-9]+)?"
    precisions = "|".join(p for p, _ in PRECISIONS)
    command = [bench, f"--benchmark_filter=^{family}/nano/{device}/forward/{SHAPE}/"
               f"({precisions})/weights:", f"--weights={made[family]}",
               f"--eval_tokens={made['tokens']}", "--dtype=fp32,bf16,fp16",
               "--quant=none,int8,int8dyn,int4", "--quant_group=32", "--batch=1", "--seq=128",
               "--benchmark_min_time=0.01", "--warmup_s=0", "--benchmark_format=json"]
    if devices:
        command.append(f"--devices={devices}")
    command += bench_args
    log(" ".join(command))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise BadInput(f"bench exited with {proc.returncode}: "
                       f"{last_lines(proc.stderr, 10)}")
    doc = json.loads(proc.stdout)
    rows = []
    for entry in doc["benchmarks"]:
        name = entry["name"].removesuffix("/manual_time")
        parts = name.split("/")
        for precision, label in PRECISIONS:
            if "/".join(parts[6:-1]) == precision:
                rows.append((parts[2], label, entry))
    order = {label: i for i, (_, label) in enumerate(PRECISIONS)}
    rows.sort(key=lambda r: (r[0], order[r[1]]))
    return doc.get("context", {}), rows


def cell(entry, counter):
    if entry.get("error_occurred"):
        return "error" if counter == "ppl" else ""
    v = entry.get(counter)
    if v is None:  # fp32 unquantised is the reference: its ppl alone
        return "—"
    if counter == "ppl":
        return f"{v:.3f}"
    if counter == "ppl_ratio":
        return f"{v:.4f}"
    if counter == "same_top1_%":
        return f"{v:.2f}"
    return f"{v:.2g}"


def table(args, bench_args):
    bench = args.bench or default_bench()
    check_bench(bench, "--bench")
    made = nano_text().ensure(args.out, steps=args.steps, force=args.force, log=log)
    lines, context = [], {}
    for family in ("Llama", "GPT2"):
        context, rows = bench_rows(bench, family, made, args.devices, bench_args)
        lines += [[f"{family}/nano", device, label, *(cell(e, c) for c in COUNTERS)]
                  for device, label, e in rows]
    print(markdown_table(["model", "device", "precision", *COUNTERS], lines))
    machine = context.get("cpu_model", "an unknown CPU")
    if any(row[1] != "cpu" for row in lines):
        machine += f", {context.get('gpus', 'a GPU')}"
    print(f"\n{machine}; LibTorch {context.get('libtorch_version', '?')}; "
          f"text: {made['tokens']}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="train-nano", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("command", nargs="?", default="train", choices=("train", "table"))
    parser.add_argument("--out", help="folder of the models and the token file "
                        "(default: ~/.cache/libtorch-bench/nano-text)")
    parser.add_argument("--steps", type=int, default=400,
                        help="training steps a model (default 400)")
    parser.add_argument("--force", action="store_true", help="train both models again")
    parser.add_argument("--bench", help="table: the bench binary (default: build/bench/bench)")
    parser.add_argument("--devices", help="table: bench's --devices (default: every one)")
    args, bench_args = split_bench_args(parser, sys.argv[1:] if argv is None else argv,
                                        OWN_FLAGS)
    if args.steps < 1:
        parser.error(f"--steps={args.steps}: valid: a number of steps >= 1")
    if args.command == "train" and bench_args:
        parser.error(f"train takes no bench arguments: {' '.join(bench_args)}")

    def go():
        if args.command == "table":
            return table(args, bench_args)
        made = nano_text().ensure(args.out, steps=args.steps, force=args.force, log=log)
        for key in ("Llama", "GPT2", "tokens"):
            print(f"{key}: {made[key]}")
        return 0
    run(go)
