"""Google Benchmark's compare.py over two bench result files, without the
errored entries.

    tools/compare BASELINE.json CONTENDER.json [--runtimes BASE,CONTENDER]
                  [compare.py options ...]

What it leaves out and why, and C++ against Python: docs/tools.md, "compare".
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

from ltb.base import BadInput, require, run
from ltb.results import runtimes
from ltb.results.entries import TIME_UNITS, errors
from ltb.results.load import load
from ltb.results.names import base_name, parse_name

require("scipy", "numpy")


def compare_py():
    path = os.environ.get("LTB_COMPARE_PY", "/usr/share/benchmark/compare.py")
    if not os.path.exists(path):
        raise BadInput(f"compare.py not found at {path}: install Debian's "
                                   "libbenchmark-tools or set LTB_COMPARE_PY")
    return path


def without_errors(doc):
    """The document without errored entries and the aggregates of errored
    benchmarks; and the names dropped."""
    dropped = errors(doc)
    kept = [e for e in doc["benchmarks"] if base_name(e) not in dropped]
    return dict(doc, benchmarks=kept), list(dropped)


def measured(doc):
    """The benchmarks a document (without its errored entries) measured, by
    their repetitions or by their aggregates alone
    (--benchmark_report_aggregates_only), which compare.py compares too."""
    return {base_name(e) for e in doc["benchmarks"]}


def by_runtime(docs, chosen):
    """The two documents with one runtime each, named without it, and the
    names they share; the settings they differ in, on stderr."""
    keep = [None, None]
    if chosen:
        keep = chosen.split(",")
        if len(keep) != 2 or any(k not in runtimes.RUNTIMES for k in keep):
            raise BadInput(f"--runtimes={chosen}: expected BASE,CONTENDER from "
                           + ", ".join(runtimes.RUNTIMES))
    keep = [k or runtimes.runtime_of(d) for k, d in zip(keep, docs)]
    stripped = [runtimes.strip_runtimes(d, k) for d, k in zip(docs, keep)]
    names = measured(stripped[0]) & measured(stripped[1])
    if names:
        print(f"compare: paired by name without the runtime label: "
              f"{runtimes.RUNTIMES[keep[0]]} against {runtimes.RUNTIMES[keep[1]]}",
              file=sys.stderr)
        settings_differ(docs, names, keep[0], "the runtimes'")
    return stripped, names


def settings_differ(docs, names, runtime, whose):
    """Names on stderr, per phase, the settings the two runs differ in
    (machine, threads, grad mode, malloc, warm-up): a difference in time is
    then not `whose` alone."""
    for phase in sorted({parse_name(n)["phase"] for n in names}):
        notes = runtimes.setting_notes(runtimes.settings(docs[0], phase),
                                       runtimes.settings(docs[1], phase), runtime)
        if notes:
            print(f"compare: {phase}: the runs' settings differ, so a difference is "
                  f"not {whose} alone: {'; '.join(notes)}", file=sys.stderr)


def one_time_unit(docs):
    """The documents with each benchmark's times in one unit, the
    baseline's: compare.py pairs only entries of the unit of the baseline's
    first, and leaves out, without a word, a benchmark whose unit changed.
    The cv aggregates' times are fractions whatever their unit: only their
    unit's name changes."""
    unit = {}
    for doc in docs:
        for e in doc["benchmarks"]:
            if e.get("time_unit", "ns") in TIME_UNITS:
                unit.setdefault(base_name(e), e.get("time_unit", "ns"))
    out, changed = [], set()
    for doc in docs:
        entries = []
        for e in doc["benchmarks"]:
            was, to = e.get("time_unit", "ns"), unit.get(base_name(e))
            if was != to and was in TIME_UNITS:
                scale = (TIME_UNITS[was] / TIME_UNITS[to]
                         if e.get("aggregate_unit", "time") == "time" else 1)
                e = dict(e, time_unit=to, **{k: e[k] * scale for k in ("real_time", "cpu_time")
                                             if isinstance(e.get(k), (int, float))})
                changed.add(base_name(e))
            entries.append(e)
        out.append(dict(doc, benchmarks=entries))
    for name in sorted(changed):
        print(f"compare: {name}: the files' time units differ: compared in {unit[name]}",
              file=sys.stderr)
    return out


def in_both(docs, paths):
    """The documents with only the entries whose name (a repetition's or an
    aggregate's) both hold, the only ones compare.py pairs; each benchmark
    that has none is named on stderr. compare.py's OVERALL_GEOMEAN is the
    geometric mean of every repetition of each file: over benchmarks of one
    file alone it compares different sets."""
    shared = set.intersection(*({e["name"] for e in d["benchmarks"]} for d in docs))
    out = []
    for doc, label, path in zip(docs, ("baseline", "contender"), paths):
        kept = [e for e in doc["benchmarks"] if e["name"] in shared]
        paired = {base_name(e) for e in kept}
        for name in dict.fromkeys(base_name(e) for e in doc["benchmarks"]):
            if name not in paired:
                print(f"compare: only in the {label} {path}, left out: {name}",
                      file=sys.stderr)
        out.append(dict(doc, benchmarks=kept))
    return out


def uneven_repetitions(docs):
    """Names whose repetitions the two files count differently: compare.py's
    OVERALL_GEOMEAN, a geometric mean over every repetition of a file,
    then weighs the benchmarks differently in each, and its change is no
    benchmark's."""
    counts = [collections.Counter(e["name"] for e in d["benchmarks"]
                                  if e.get("run_type", "iteration") == "iteration")
              for d in docs]
    return sorted({base_name({"name": n}) for n in set(counts[0]) | set(counts[1])
                   if counts[0][n] != counts[1][n]})


def without_geomean(output, dump):
    """compare.py's output, and its --dump_to_json file, without
    OVERALL_GEOMEAN."""
    if dump and os.path.exists(dump):
        with open(dump) as f:
            report = json.load(f)
        with open(dump, "w") as f:
            json.dump([r for r in report if r.get("name") != "OVERALL_GEOMEAN"], f)
    return "".join(line for line in output.splitlines(keepends=True)
                   if "OVERALL_GEOMEAN" not in line)


def write_temp(doc, directory, name):
    with open(os.path.join(directory, name), "w") as f:
        json.dump(doc, f)
    return name


def compare_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="bench JSON of the baseline")
    parser.add_argument("contender", help="bench JSON of the contender")
    parser.add_argument("--runtimes", metavar="BASE,CONTENDER",
                        help="pair these runtimes of the two files by name without the "
                             "runtime label (default: each file's eager one, where the "
                             "files share no name)")
    parser.add_argument("-d", "--dump_to_json", metavar="FILE",
                        help="compare.py's report as JSON, to FILE")
    args, options = parser.parse_known_args()
    script = compare_py()
    docs = []
    for label, path in (("baseline", args.baseline), ("contender", args.contender)):
        doc, dropped = without_errors(load(path))
        for name in dropped:
            print(f"compare: dropped errored {name} ({label} {path})", file=sys.stderr)
        for e in doc["benchmarks"]:
            if "cpu_time" not in e:
                raise BadInput(f"{path}: {e['name']} has no cpu_time, which compare.py "
                               "compares beside real_time (Google Benchmark writes both)")
        docs.append(doc)
    names = measured(docs[0]) & measured(docs[1])
    if args.runtimes or not names:
        docs, names = by_runtime(docs, args.runtimes)
    else:
        settings_differ(docs, names, None, "the code's")
    if not names:
        raise BadInput(f"no measured benchmark in common between "
                                   f"{args.baseline} and {args.contender}")
    docs = one_time_unit(in_both(docs, (args.baseline, args.contender)))
    uneven = uneven_repetitions(docs)
    dump = os.path.abspath(args.dump_to_json) if args.dump_to_json else None
    if dump:
        options += ["--dump_to_json", dump]
    with tempfile.TemporaryDirectory() as tmp:
        files = [write_temp(doc, tmp, f"{label}.json")
                 for doc, label in zip(docs, ("baseline", "contender"))]
        ran = subprocess.run([sys.executable, script, *options, "benchmarks", *files],
                             cwd=tmp, stdout=subprocess.PIPE, text=True)
    output = ran.stdout
    if uneven and ran.returncode == 0:
        output = without_geomean(output, dump)
    sys.stdout.write(output)
    sys.stdout.flush()
    if uneven and ran.returncode == 0:
        print(f"compare: no OVERALL_GEOMEAN: the files repeat {', '.join(uneven)} a different "
              "number of times, so compare.py's mean over every repetition of each file would "
              "weigh the benchmarks differently in each", file=sys.stderr)
    return ran.returncode



def main():
    run(compare_main)
