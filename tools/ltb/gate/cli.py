"""Regression gate: is the contender slower, or hungrier, than the baseline?

    tools/gate BASELINE.json CONTENDER.json [--threshold 7%] [--alpha 0.05]
               [--thresholds FILE] [--allow-missing]

A metric regresses when it got worse by more than the threshold and the
Mann-Whitney U test agrees; a lost benchmark or metric fails the gate too.
docs/tools.md, "gate: did it regress?".
"""
import argparse
import sys

from ltb.base import EXIT_OK, EXIT_REGRESSION, BadInput, reader_may_stop, require, run
from ltb.gate.options import add_gate_arguments, load_thresholds
from ltb.gate.verdicts import (LOST, REGRESSION, compare, differences, render,
                               repetition_note)
from ltb.results import runtimes
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
    regressed = any(r.verdict == REGRESSION for r in rows)
    status = EXIT_REGRESSION if regressed or failing_lost else EXIT_OK
    notes = [repetition_note(base_doc, new_doc, args.alpha)]
    # Settings the runs differ in (threads, a simulated CPU, LibTorch, ...):
    # said beside the verdicts, which they may explain; never a failure.
    differ = runtimes.setting_notes(runtimes.settings(base_doc, None),
                                    runtimes.settings(new_doc, None), None)
    if differ:
        notes.append("The runs' settings differ, so a change is not the code's alone: "
                     + "; ".join(differ) + ".")
    with reader_may_stop():  # the exit status stays the gate's
        print(render(rows, lists, args, "\n\n".join(n for n in notes if n) or None))
    return status


def gate_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="bench JSON of the baseline")
    parser.add_argument("contender", help="bench JSON of the contender")
    add_gate_arguments(parser)
    return judge(parser.parse_args())

def main():
    require("scipy")
    run(gate_main)
