"""The results store: every run kept with its commit and machine, steps in
each benchmark's series found over commits.

    tools/history add RESULTS.json [MORE.json ...] [--commit SHA] [--repo DIR]
    tools/history runs [--fingerprint PREFIX]
    tools/history changes [--benchmark_filter REGEX] [--fingerprint PREFIX]
                          [--min-change 2%] [--confidence 0.95] [--json] [--fail]
    tools/history export [--run ID] [--out FILE]
    (each with [--db PATH | --db postgresql://USER@HOST:PORT/DB])

docs/tools.md, "history: results over time".
"""
import argparse
import json
import sys

from ltb.base import (EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION, REPO, BadInput,
                      reader_may_stop, require, run)
from ltb.gate.options import percent
from ltb.history.changes import changes
from ltb.history.store import Store, v3_records
from ltb.results.format import markdown_table


def short(sha):
    return sha[:12] if len(sha) >= 40 else sha


def cmd_add(store, args):
    refused = 0
    for path in args.files:
        try:
            run_id, new = store.add(path, commit=args.commit, repo=args.repo)
        except BadInput as e:
            print(f"history: {e}", file=sys.stderr)
            refused += 1
            continue
        print(f"{'added' if new else 'already there'}: {path} (run {run_id[:12]})")
    return EXIT_BAD_INPUT if refused else EXIT_OK


def cmd_runs(store, args):
    runs = store.runs(args.fingerprint)
    rows = [[r["run_id"][:12], short(r["commit"]), r["date"], r["fingerprint"],
             str(len(store.results(r["run_id"])))] for r in runs]
    print(markdown_table(["run", "commit", "date", "fingerprint", "benchmarks"],
                                     rows) if rows else "no runs in the store")
    return EXIT_OK


def find_changes(store, args):
    """[(fingerprint, name, points, [Change])] of every series with a step."""
    found = []
    for (fp, name), points in sorted(store.series(args.benchmark_filter,
                                                  args.fingerprint).items()):
        values = [p.value for p in points]
        steps = changes(values, args.min_change, args.confidence,
                                    [p.commit for p in points])
        found.append((fp, name, points, steps))
    return found


def cmd_changes(store, args):
    found = find_changes(store, args)
    open_slowdowns = [c for _, _, _, steps in found for c in steps[-1:] if c.size > 0]
    status = EXIT_REGRESSION if args.fail and open_slowdowns else EXIT_OK
    with reader_may_stop():  # --fail's status stands
        print_changes(found, args)
    return status


def print_changes(found, args):
    if args.json:
        print(json.dumps([{"fingerprint": fp, "benchmark": name, "points": len(points),
                           "changes": [c.as_dict() for c in steps]}
                          for fp, name, points, steps in found if steps], indent=1))
    else:
        rows = []
        for fp, name, points, steps in found:
            for c in steps:
                rows.append([f"`{name}`", fp, f"{c.size * 100:+.1f}% "
                             f"({'slower' if c.size > 0 else 'faster'})",
                             f"{short(c.before)}..{short(c.after)}", f"{c.confidence:.3f}",
                             f"{c.index} / {len(points) - c.index}"])
        series = len(found)
        if rows:
            print(markdown_table(
                ["benchmark", "fingerprint", "median step time", "commits (good..bad)",
                 "confidence", "points before / after"], rows))
        print(f"\n{len(rows)} change(s) in {series} series "
              f"(min change {args.min_change * 100:g}%, confidence {args.confidence:g})")


def cmd_export(store, args):
    runs = store.runs()
    if args.run:
        runs = [r for r in runs if any(r["run_id"].startswith(p) for p in args.run)]
        if not runs:
            raise BadInput(f"no run id starts with {', '.join(args.run)}; "
                                       "tools/history runs lists them")
    records = [rec for r in runs for rec in v3_records(r, store.results(r["run_id"]))]
    text = json.dumps(records, indent=1) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"history: {len(records)} records of {len(runs)} run(s) in {args.out}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def history_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="SQLite file or postgresql:// URL (default: "
                                     "~/.cache/libtorch-bench/history.sqlite)")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="record result files")
    add.add_argument("files", nargs="+")
    add.add_argument("--commit", help="the commit the runs measured (default: the "
                                      "context's suite_commit)")
    add.add_argument("--repo", default=REPO, help="where commits are resolved")
    runs = sub.add_parser("runs", help="list the runs")
    runs.add_argument("--fingerprint", help="only the machines whose fingerprint starts so")
    steps = sub.add_parser("changes", help="steps in the series")
    steps.add_argument("--benchmark_filter", help="regular expression on benchmark names")
    steps.add_argument("--fingerprint", help="only the machines whose fingerprint starts so")
    steps.add_argument("--min-change", type=percent, default=0.02,
                       help="smallest step reported (default 2%%)")
    steps.add_argument("--confidence", type=float, default=0.95,
                       help="least confidence reported (default 0.95)")
    steps.add_argument("--json", action="store_true")
    steps.add_argument("--fail", action="store_true",
                       help="exit 1 when a slowdown still holds at a series' end")
    export = sub.add_parser("export", help="PyTorch's benchmark database (v3) JSON")
    export.add_argument("--run", action="append", help="run id prefix (repeatable)")
    export.add_argument("--out", help="file to write (default: stdout)")
    for p in (add, runs, steps, export):  # --db after the command too
        p.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.command == "changes" and not 0 < args.confidence < 1:
        raise BadInput(f"--confidence={args.confidence}: a number between 0 and 1")
    require("ruptures", "scipy", "numpy")
    with Store(args.db, create=args.command == "add") as store:
        return {"add": cmd_add, "runs": cmd_runs, "changes": cmd_changes,
                "export": cmd_export}[args.command](store, args)



def main():
    run(history_main)
