"""A Markdown or CSV table of one or more bench result files (machines).

    tools/report RESULTS.json [MORE.json ...] [--format markdown|csv]
                 [--cost PRICE [PRICE ...]] [--device-count N [N ...]]
    tools/report --format html RESULTS.json [MORE.json ...] [RUNS_DIR ...]
                 [--threshold 7%] [--alpha 0.05] [--thresholds FILE]
                 [--db [STORE]] > report.html

Per benchmark and file: the median time, the spread of the steps, the
throughput counters, peak memory, the accuracy counters (ppl and ppl_ratio on
a held-out text; kld_mean, kld_p99, kld_max and same_top1_% against fp32
unquantised; top1_agree_%, token_match_% and rel_err against the same dtype
unquantised for a quantised run, token_match_% and rel_err against fp32 for
an unquantised bf16, fp16 or TF32 one, rel_err against eager for a compiled
one), the speedup against the first file and,
with --cost, the cost per 1M tokens; compiled models, generation (as
llama-bench prints it), scaling and C++ beside Python get tables of their
own; --format html writes one self-contained page. What each table and
section holds: docs/tools.md (report). Exit 0 on success, 2 on bad input or
when no file has a measured benchmark.
"""
import argparse
import os
import sys

from ltb.base import BadInput, run
from ltb.gate.options import add_gate_arguments, load_thresholds
from ltb.history.runs import history_runs, instant
from ltb.history.series import store_series
from ltb.report.html import Verdicts, render
from ltb.report.tables import (aggregated, columns, compiled_rows, errored, markdown, rows,
                               write_csv)
from ltb.results.cost import add_cost_arguments, hourly_prices
from ltb.results.entries import collect
from ltb.results.load import file_labels, load_all
from ltb.results.records import run_date


def html_page(args):
    files = [p for p in args.files if not os.path.isdir(p)]
    history, skipped = [], []
    for directory in (p for p in args.files if os.path.isdir(p)):
        runs, left_out = history_runs(directory)
        history += runs
        skipped += left_out
    # Every directory's runs in the order they ran (a merged file's date is
    # its first run's), as one history.
    history.sort(key=lambda run: instant(run_date(run[1])))
    for path, why in skipped:
        print(f"report: left out of the history: {path}: {why}", file=sys.stderr)
    docs = load_all(files)
    if args.cost:
        raise BadInput("--cost is for the Markdown and CSV tables")
    store = store_series(args.db) if args.db is not None else []
    if not store and not any(collect(d) for d in docs + [doc for _, doc in history]):
        raise BadInput("no measured benchmark in "
                                   + (", ".join(args.files) or "the results store"))
    rules = load_thresholds(args.thresholds) if args.thresholds else []
    verdicts = Verdicts(rules, args.threshold, args.alpha, args.thresholds)
    sys.stdout.write(render(docs, file_labels(files) if files else [],
                         history, compiled_rows, verdicts=verdicts, skipped=skipped,
                         store=store))


def report_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*",
                        help="bench JSON files, one per machine (with --format html also "
                             "directories of runs over time)")
    parser.add_argument("--format", choices=("markdown", "csv", "html"), default="markdown")
    add_cost_arguments(parser)
    html = parser.add_argument_group("with --format html: the gate's settings for the "
                                     "comparison and the history")
    add_gate_arguments(html, allow_missing=False)
    html.add_argument("--db", nargs="?", const="",
                      help="add the results store's series (tools/history; without a "
                           "value, its default store)")
    args = parser.parse_args()
    if not args.files and (args.format != "html" or args.db is None):
        parser.error("give result files (or, with --format html, --db)")
    if args.format == "html":
        return html_page(args)
    for path in args.files:
        if os.path.isdir(path):
            raise BadInput(f"{path} is a directory: --format html reads a "
                                       "directory of runs as their history")
    docs = load_all(args.files)
    labels = file_labels(args.files)
    table = rows(docs, labels, hourly_prices(args, docs))
    if not table:
        unread = aggregated(docs, labels)
        raise BadInput("no measured benchmark in " + ", ".join(args.files) + (
            f": {len(unread)} reported by their aggregates alone (mean, median, ...), with no "
            "repetition to report; run bench without --benchmark_report_aggregates_only"
            if unread else ""))
    cols = columns(table, len(docs) > 1)
    if args.format == "csv":
        write_csv(table, cols)
        for line in errored(docs, labels):
            print(f"report: errored {line}", file=sys.stderr)
        for line in aggregated(docs, labels):
            print(f"report: aggregates alone, no repetition to report: {line}", file=sys.stderr)
    else:
        print(markdown(table, cols, docs, labels))



def main():
    run(report_main)
