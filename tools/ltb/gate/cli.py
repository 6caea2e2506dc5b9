"""Regression gate: is the contender slower, or hungrier, than the baseline?

    tools/gate BASELINE.json CONTENDER.json [--threshold 7%] [--alpha 0.05]
               [--thresholds FILE] [--allow-missing]

For every benchmark measured in both files it compares the median time, the
throughput counters compare.py ignores (tokens/s, samples/s, and for
generation pp_tok/s and tg_tok/s: bigger is better) and
peak_mem, ttft_ms and tpot_ms (smaller is better). A metric regresses when it
got worse by more than the threshold AND, where both files have repetitions
(9 or more recommended), the two-sided Mann-Whitney U test over the
repetitions rejects equality at alpha. With one repetition on either side
the threshold alone decides.

--thresholds FILE gives per-benchmark thresholds, one rule a line,
`REGEX PERCENT` (for example `^GPT2/.*/generate 15%`); the first rule whose
regular expression is found in a benchmark's name applies, else --threshold.
Lines starting with # are comments.

Nothing measured is lost silently: a benchmark that ran without an error in
the baseline but errored in the contender (any of its repetitions; one
that Google Benchmark 1.8 reports skipped counts as errored), or is
missing from it (or holds only its aggregates there, as
--benchmark_report_aggregates_only writes), fails the gate like a regression, unless --allow-missing
is given; these are listed in their own table (benchmark, baseline status,
contender status or error message) either way. Benchmarks new in the
contender, and those that errored in the baseline, are listed and never
fail it. A metric the baseline measured that the contender lacks, or has
as no finite number, is a lost metric: its row says so, and it fails the
gate as a lost benchmark does (a metric only the contender has is not
judged).

Prints a Markdown table (benchmark, metric, baseline, contender, change,
p-value, verdict) for a CI job summary, then the lost benchmarks, then those
that appeared, disappeared or errored otherwise. Exit 0 when nothing
regressed or was lost, 1 on a regression or a lost benchmark, 2 on bad input
or when the files have no measured benchmark in common (unless one that
both name was lost).
"""
import argparse
import sys

from ltb.base import EXIT_OK, EXIT_REGRESSION, BadInput, require, run
from ltb.gate.options import add_gate_arguments, load_thresholds
from ltb.gate.verdicts import (LOST, REGRESSION, compare, differences, render,
                               repetition_note)
from ltb.results.entries import all_names, collect
from ltb.results.load import load_all


def judge(args):
    """Compares args.baseline with args.contender as the gate does (args: the
    gate's options, add_gate_arguments'), prints the verdicts, and returns
    the exit status; BadInput when the files have nothing in common."""
    rules = load_thresholds(args.thresholds) if args.thresholds else []
    base_doc, new_doc = load_all([args.baseline, args.contender])
    rows = compare(base_doc, new_doc, rules, args.threshold, args.alpha)
    lists = differences(base_doc, new_doc)
    lost_metric = any(r.verdict == LOST for r in rows)
    failing_lost = (bool(lists[0]) or lost_metric) and not args.allow_missing
    shared = set(all_names(base_doc)) & set(all_names(new_doc))
    if not rows and not (failing_lost and shared):  # disjoint files are a mistake
        print(render(rows, lists, args, None), file=sys.stderr)
        for path, doc in ((args.baseline, base_doc), (args.contender, new_doc)):
            if not collect(doc) and any(e.get("run_type") == "aggregate"
                                        for e in doc["benchmarks"]):
                raise BadInput(f"{path} holds aggregates only (a run with "
                               f"--benchmark_report_aggregates_only): the gate compares the "
                               f"repetitions; run bench without that flag")
        raise BadInput(f"no measured benchmark in common between "
                       f"{args.baseline} and {args.contender}")
    print(render(rows, lists, args, repetition_note(base_doc, new_doc, args.alpha)))
    regressed = any(r.verdict == REGRESSION for r in rows)
    return EXIT_REGRESSION if regressed or failing_lost else EXIT_OK


def gate_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="bench JSON of the baseline")
    parser.add_argument("contender", help="bench JSON of the contender")
    add_gate_arguments(parser)
    return judge(parser.parse_args())

def main():
    require("scipy")
    run(gate_main)
