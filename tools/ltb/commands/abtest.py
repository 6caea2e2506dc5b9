"""Interleaved A/B runs: two bench binaries, one benchmark at a time, taking turns.

    tools/abtest --base BIN_A --head BIN_B [--rounds 5] [--timeout SECONDS]
                 [--out-base A.json] [--out-head B.json] [--no-gate]
                 [--threshold 7%] [--alpha 0.05] [--thresholds FILE]
                 [--allow-missing] [BENCH ARGUMENTS ...]

Each side's runs become one Google Benchmark JSON, which tools/gate then
judges: docs/tools.md, "abtest: two builds, interleaved".
"""
import argparse
import collections
import math
import os
import statistics
import sys

from ltb.base import EXIT_INTERRUPTED, EXIT_OK, REPO, BadInput, require, run, write_json
from ltb.gate.cli import judge
from ltb.gate.options import add_gate_arguments, load_thresholds
from ltb.results.entries import TIME_UNITS, failed, failure, seconds
from ltb.results.format import format_seconds
from ltb.results.records import in_family, record_entries, split_contexts
from ltb.bench_process.bench import (Interrupted, check_bench, default_bench, gives_filter,
                                     list_benchmarks, raise_on_sigterm, run_benchmark,
                                     split_bench_args)
from ltb.bench_process.progress import Progress
from ltb.bench_process.suite import groups as suite_groups, run_member

SIDES = ("base", "head")
OWN_FLAGS = dict(
    {"--benchmark_repetitions": "use --rounds"},
    **{flag: "abtest keeps every run as a repetition and adds the aggregates itself"
       for flag in ("--benchmark_report_aggregates_only", "--benchmark_display_aggregates_only")},
    **{flag: "use --out-base and --out-head"
       for flag in ("--benchmark_out", "--benchmark_out_format", "--benchmark_format",
                    "--benchmark_list_tests")})
# Fields of a Google Benchmark entry that are not counters.
FIELDS = {"name", "family_index", "per_family_instance_index", "run_name", "run_type",
          "repetitions", "repetition_index", "threads", "aggregate_name", "aggregate_unit",
          "iterations", "real_time", "cpu_time", "time_unit", "label", "error_occurred",
          "error_message", "context"}


def cv(values):
    mean = statistics.mean(values)
    return statistics.stdev(values) / mean if mean else math.nan


# Google Benchmark's aggregates after repetitions: (name, statistic, unit).
AGGREGATES = (("mean", statistics.mean, "time"), ("median", statistics.median, "time"),
              ("stddev", statistics.stdev, "time"), ("cv", cv, "percentage"))


# --- arguments ----------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], allow_abbrev=False,
        epilog="Every other argument is passed to bench (for example "
               "--benchmark_filter=Transformer/nano --benchmark_min_time=0.2).")
    parser.add_argument("--base", default=default_bench(),
                        help="the baseline's bench binary")
    parser.add_argument("--head", default=default_bench(),
                        help="the contender's bench binary")
    parser.add_argument("--rounds", type=int, default=5,
                        help="runs of each benchmark on each binary (default 5)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds one run may take (default 3600)")
    parser.add_argument("--out-base", default=os.path.join(REPO, "results",
                                                           "abtest-base.json"),
                        help="the baseline's Google Benchmark JSON")
    parser.add_argument("--out-head", default=os.path.join(REPO, "results",
                                                           "abtest-head.json"),
                        help="the contender's Google Benchmark JSON")
    parser.add_argument("--no-gate", action="store_true",
                        help="write the files without running tools/gate on them")
    add_gate_arguments(parser)
    args, bench_args = split_bench_args(parser, argv, OWN_FLAGS)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.timeout <= 0:
        parser.error("--timeout must be > 0")
    args.bench = {"base": os.path.abspath(args.base), "head": os.path.abspath(args.head)}
    args.out = {"base": args.out_base, "head": args.out_head}
    if os.path.abspath(args.out_base) == os.path.abspath(args.out_head):
        parser.error("--out-base and --out-head must be different files")
    args.bench_args = bench_args
    return args


# --- the plan -------------------------------------------------------------------

def benchmarks(args):
    """(name, sides that have it) of every benchmark either binary selects:
    the base's in its order, then those only the head has."""
    found = collections.OrderedDict()
    for side in SIDES:
        try:
            check_bench(args.bench[side], f"--{side}")
            names = list_benchmarks(args.bench[side], args.bench_args)
        except BadInput as e:
            raise BadInput(f"--{side} {args.bench[side]}: {e}")
        for name in names:
            found.setdefault(name, []).append(side)
    return list(found.items())


def suite_members(args):
    """The default suite on each binary, a member at a time: (the runs'
    plan, (member, sides that have it), and the benchmarks' plan, (name,
    sides), both the base's in its order, then the head's own), and
    args.suite, side -> (member -> that side's names, its members), what a
    run of a member on a side needs."""
    args.suite = {}
    found, names = collections.OrderedDict(), collections.OrderedDict()
    for side in SIDES:
        try:
            check_bench(args.bench[side], f"--{side}")
            grouped, spelled = suite_groups(args.bench[side], args.bench_args)
        except BadInput as e:
            raise BadInput(f"--{side} {args.bench[side]}: {e}")
        args.suite[side] = (grouped, spelled)
        for member, its in grouped.items():
            found.setdefault(member, []).append(side)
            for name in its:
                names.setdefault(name, []).append(side)
    return list(found.items()), list(names.items())


def schedule(plan, rounds):
    """(benchmark index, name, round, side) of every run, in order: each
    benchmark's (or default suite member's) rounds one after another, every
    side that has it in each round, the side that goes first alternating
    from round to round and from one benchmark to the next."""
    for index, (name, sides) in enumerate(plan):
        for r in range(rounds):
            order = sides if (index + r) % 2 == 0 else sides[::-1]
            for side in order:
                yield index, name, r, side


# --- one side's Google Benchmark JSON ------------------------------------------

def repetitions(record, own):
    """The entries one run adds to its benchmark: its measurements, or the
    errored entry of a run that failed."""
    return [e for e in record_entries(record, own)
            if e.get("run_type", "iteration") == "iteration"]


def aggregates(entries):
    """The mean, median, stddev and cv entries Google Benchmark adds after
    repetitions, over those that did not fail; none under two."""
    measured = [e for e in entries if not failed(e)]
    if len(measured) < 2:
        return []
    first = measured[0]
    run_name = first.get("run_name", first["name"])
    unit = first.get("time_unit", "ns")

    def values(key):
        if key in ("real_time", "cpu_time"):  # in the first's unit
            return [float(e[key]) * TIME_UNITS[e.get("time_unit", "ns")]
                    / TIME_UNITS[unit] for e in measured]
        return [float(e[key]) for e in measured if key in e]

    counters = collections.OrderedDict.fromkeys(
        k for e in measured for k, v in e.items()
        if k not in FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool))
    labels = {e.get("label") for e in measured}
    found = []
    for name, statistic, kind in AGGREGATES:
        entry = {"name": f"{run_name}_{name}", "run_name": run_name,
                 "run_type": "aggregate", "repetitions": len(entries),
                 "threads": first.get("threads", 1), "aggregate_name": name,
                 "aggregate_unit": kind, "iterations": len(entries),
                 "real_time": statistic(values("real_time")),
                 "cpu_time": statistic(values("cpu_time")), "time_unit": unit}
        if len(labels) == 1 and first.get("label"):
            entry["label"] = first["label"]
        # A cv of a counter whose mean is 0 is no number: left out of the
        # row, as bench leaves it out of Google Benchmark's (JSON has no NaN).
        entry.update((c, v) for c in counters if len(values(c)) >= 2
                     for v in [statistic(values(c))] if math.isfinite(v))
        found.append(entry)
    return found


def assemble(plan, records, note):
    """One side's Google Benchmark JSON: records maps a benchmark's name to
    the records of its runs on this side, in round order."""
    context, own = split_contexts(
        [r for name, _ in plan for r in records.get(name, [])])
    entries = []
    for index, (name, _) in enumerate(plan):
        found = [e for record in records.get(name, []) for e in repetitions(record, own)]
        found = [dict(e, repetitions=len(found), repetition_index=i)
                 for i, e in enumerate(found)]
        entries += [in_family(e, index) for e in found + aggregates(found)]
    context["abtest"] = note
    return {"context": context, "benchmarks": entries}


# --- running --------------------------------------------------------------------

def describe(record):
    if record["status"] != "ok":
        return f"FAILED: {record['error']}"
    parts = []
    for e in repetitions(record, {}):
        if failed(e):
            parts.append(f"error: {failure(e)}")
        else:
            parts.append(format_seconds(seconds(e)))
    return ", ".join(parts)


def run_once(args, unit, side):
    """The records of one run on one side: of a benchmark, or, in the
    default suite, of each benchmark of a member."""
    bench_args = args.bench_args + ["--benchmark_repetitions=1"]
    if args.suite is None:
        return [run_benchmark(args.bench[side], bench_args, unit, args.timeout)]
    grouped, spelled = args.suite[side]
    return run_member(args.bench[side], bench_args, unit, grouped[unit], spelled, args.timeout)


def run_all(args, plan, records):
    """Runs the schedule, collecting each run's record in records (side ->
    benchmark name -> records, in round order) as it finishes."""
    runs = list(schedule(plan, args.rounds))
    progress = Progress(len(runs))
    for index, unit, r, side in runs:
        found = run_once(args, unit, side)
        for record in found:
            records[side].setdefault(record["name"], []).append(record)
        told = "; ".join(describe(record) if args.suite is None
                         else f"{record['name']} {describe(record)}" for record in found)
        print(f"[{index + 1}/{len(plan)}] {unit} round {r + 1}/{args.rounds} {side}: "
              f"{told}; {progress.step(found[0]['seconds'])}", file=sys.stderr, flush=True)


def abtest_main():
    args = parse_args(sys.argv[1:])
    if not args.no_gate:
        require("scipy")
    if args.thresholds:
        load_thresholds(args.thresholds)  # a bad file stops before the runs
    args.suite = None
    if gives_filter(args.bench_args):
        plan = names = benchmarks(args)
    else:
        plan, names = suite_members(args)
    records = {side: {} for side in SIDES}

    def write(complete):
        for side, other in zip(SIDES, SIDES[::-1]):
            note = (f"{side} {args.bench[side]} against {other} {args.bench[other]}: "
                    f"{args.rounds} interleaved rounds"
                    + ("" if complete else " (interrupted)")
                    + (", each run in its own bench process" if args.suite is None else
                       ", each Family/size of bench's default suite in its own bench process"))
            write_json(args.out[side], assemble(names, records[side], note))

    raise_on_sigterm()
    try:
        run_all(args, plan, records)
    except (Interrupted, KeyboardInterrupt):
        write(False)
        print(f"abtest: interrupted; the runs done so far are in {args.out['base']} and "
              f"{args.out['head']}", file=sys.stderr)
        return EXIT_INTERRUPTED
    write(True)
    print(f"abtest: wrote {args.out['base']} and {args.out['head']}", file=sys.stderr)
    if args.no_gate:
        print(args.out["base"])
        print(args.out["head"])
        return EXIT_OK
    sys.stdout.flush()
    return judge(argparse.Namespace(
        baseline=args.out["base"], contender=args.out["head"], threshold=args.threshold,
        alpha=args.alpha, thresholds=args.thresholds, allow_missing=args.allow_missing))



def main():
    run(abtest_main)
