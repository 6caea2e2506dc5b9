"""A Markdown or CSV table of one or more bench result files (machines).

    tools/report RESULTS.json [MORE.json ...] [--format markdown|csv]
                 [--cost PRICE [PRICE ...]] [--device-count N [N ...]]
    tools/report --format html RESULTS.json [MORE.json ...] [RUNS_DIR ...]
                 [--threshold 7%] [--alpha 0.05] [--thresholds FILE]
                 [--db [STORE]] > report.html

Per benchmark and file: the median time (the mean step time of a run), the
spread of the steps inside a run (step_sd_ms, the standard deviation;
step_cv_%; step_p50_ms, step_p90_ms, step_p99_ms), the throughput counters
(tokens/s, samples/s, FLOP/s, bytes/s; ttft_ms and tpot_ms of generation),
peak memory; where a reduced precision or --quant was checked against fp32,
the teacher-forced KL divergence (kld_mean, kld_p99, kld_max), same_top1_%,
then token_match_% and rel_err; with several files, the speedup against the first file
(its median time over this file's). Repetitions are reduced to their median; errored
entries are listed under the table.

Cost: --cost gives each file's price per device-hour, in file order; a run's
device count is its context's world_size (else 1) or --device-count (in a
file of several world sizes from tools/scaling, each benchmark's ranks). The
table then has the cost per 1M tokens (or samples) and, for train_epoch
benchmarks, per epoch.

Compiled models (names ending in /aoti or /torchscript, from bench
--compiled) get a table of their own beside their eager benchmark: the
speedup (eager time over compiled), the peak-memory ratio (eager peak_mem
over compiled: TorchBench's compression ratio), the compile time and the
compiled outputs' rel_err against eager. Generation benchmarks also get a
table as llama-bench prints one: per model, device, dtype and threads, the
tests ppP (prompt tokens/s of the prefill), tgN (tokens/s of the N decode
steps) and, with --depth, "ppP @ dD" and "tgN @ dD". A file of several world sizes
(tools/scaling) gets its weak-scaling table. The Markdown ends with the device
speedup summary when a benchmark was measured on several devices.

C++ and Python: where the files hold tools/pybench results (.../py_eager,
.../py_compile) beside bench's eager or compiled ones of the same name, a
table lines them up per benchmark: each runtime's mean time, its ratio to
Python eager with a 95% confidence interval from the repetitions, and a
verdict ("noise" when the interval holds 1; the settings, when the runs
differ in threads, grad mode or warm-up); --format html adds the section
"C++ and Python". Several files of one runtime are rounds (separate
processes), pooled: with two or more a side, the interval comes from the
rounds' means, which see the difference between processes that the
repetitions of one process do not.

--format html writes one self-contained page (Chart.js and the data
inlined; no network when it is opened): the run context and peaks, a
roofline per device and dtype, the comparison of each file with the first
(ratios, the gate's verdicts and p-values, with the gate's --threshold,
--alpha and --thresholds), scaling (time per token against
sequence length, throughput against batch, data-parallel efficiency against
ranks, speedup over the CPU), step-time distributions (p50/p90/p99 and CV,
above 5% marked unsteady), eager against compiled, the history of a
directory of runs (each benchmark's trend, with the runs where the gate
against the run before failed it), the results store's series over commits
with their change points and open changes (--db: the store of tools/history,
its default without a value; the page may then have no file), and the
errored benchmarks; each where the results have what it needs.

Exit 0 on success, 2 on bad input or when no file has a measured benchmark.
"""
import argparse
import os
import sys

from ltb.base import BadInput, run
from ltb.gate.options import add_gate_arguments, load_thresholds
from ltb.history.runs import history_runs
from ltb.history.series import store_series
from ltb.report.html import Verdicts, render
from ltb.report.tables import columns, compiled_rows, errored, markdown, rows, write_csv
from ltb.results.cost import add_cost_arguments, hourly_prices
from ltb.results.entries import collect
from ltb.results.load import file_labels, load_all


def html_page(args):
    files = [p for p in args.files if not os.path.isdir(p)]
    history, skipped = [], []
    for directory in (p for p in args.files if os.path.isdir(p)):
        runs, left_out = history_runs(directory)
        history += runs
        skipped += left_out
    history.sort(key=lambda run: str(run[1]["context"].get("date", "")))
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
        raise BadInput("no measured benchmark in " + ", ".join(args.files))
    cols = columns(table, len(docs) > 1)
    if args.format == "csv":
        write_csv(table, cols)
        for line in errored(docs, labels):
            print(f"report: errored {line}", file=sys.stderr)
    else:
        print(markdown(table, cols, docs, labels))



def main():
    run(report_main)
