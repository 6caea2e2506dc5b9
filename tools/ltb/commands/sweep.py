"""Crash-proof sweeps: every benchmark in its own bench process.

    tools/sweep [--bench PATH] [--timeout SECONDS] [--journal FILE] [--out FILE]
                [--retry-failed] [--fresh] [--merge-only] [BENCH ARGUMENTS ...]

Each result goes to a journal as it finishes (running the sweep again
resumes it), merged at the end into one Google Benchmark JSON:
docs/tools.md, "sweep: one process per benchmark".
"""
import argparse
import collections
import hashlib
import json
import os
import sys

from ltb.base import EXIT_INTERRUPTED, REPO, BadInput, run, sha256_file, write_json
from ltb.results.entries import failed as failed_entry
from ltb.results.records import in_family, record_entries, split_contexts
from ltb.bench_process.bench import (Interrupted, check_bench, default_bench, gives_filter,
                                     list_benchmarks, raise_on_sigterm, run_benchmark,
                                     split_bench_args)
from ltb.bench_process.progress import Progress
from ltb.bench_process.suite import groups as suite_groups, run_member

OWN_FLAGS = {flag: "use --out for the merged JSON" for flag in (
    "--benchmark_out", "--benchmark_out_format", "--benchmark_format", "--benchmark_list_tests")}
# The context keys that, with the binary's sha256, tell one build from another.
IDENTITY_KEYS = ("libtorch_version", "suite_commit")


# --- arguments ----------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], allow_abbrev=False,
        epilog="Every other argument is passed to bench (for example "
               "--benchmark_filter=Transformer/nano --benchmark_repetitions=9).")
    parser.add_argument("--bench", default=default_bench(), help="the bench binary")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds one benchmark may take (default 3600)")
    parser.add_argument("--journal", help="journal file (JSON lines)")
    parser.add_argument("--out", help="merged Google Benchmark JSON")
    parser.add_argument("--retry-failed", action="store_true",
                        help="run the benchmarks that failed before again")
    parser.add_argument("--fresh", action="store_true", help="discard the journal, start over")
    parser.add_argument("--merge-only", action="store_true",
                        help="merge the journal without running anything")
    args, bench_args = split_bench_args(parser, argv, OWN_FLAGS)
    if args.timeout <= 0:
        parser.error("--timeout must be > 0")
    args.bench_args = bench_args
    args.bench = os.path.abspath(args.bench)
    key = hashlib.sha256(json.dumps([args.bench, bench_args]).encode()).hexdigest()[:12]
    args.journal = args.journal or os.path.join(REPO, "results", f"sweep-{key}.jsonl")
    args.out = args.out or os.path.splitext(args.journal)[0] + ".json"
    return args


# --- the journal ------------------------------------------------------------

def read_journal(path):
    """(header, OrderedDict name -> last record) of a journal; a last line cut
    short by a kill is ignored."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return None, collections.OrderedDict()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    header, records = None, collections.OrderedDict()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # the unfinished last line of a killed sweep
                print(f"sweep: ignoring the unfinished last line of {path}", file=sys.stderr)
                continue
            raise BadInput(f"{path}:{number}: not a journal line")
        if isinstance(item, dict) and "sweep" in item:
            header = item["sweep"]
        elif isinstance(item, dict) and "name" in item:
            records[item["name"]] = item
        else:
            raise BadInput(f"{path}:{number}: not a journal line")
    return header, records


def repair(path):
    """Cuts an unfinished last line off, so that appended records start on
    their own line."""
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def append(path, item):
    line = (json.dumps(item) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def identity(sha256, records):
    """What tells one build of bench from another: the binary's sha256, and
    the LibTorch version and suite commit its first result reports."""
    found = {"sha256": sha256}
    for record in records.values():
        if record.get("status") == "ok":
            found.update((k, record["context"][k]) for k in IDENTITY_KEYS
                         if k in record.get("context", {}))
            break
    return found


def describe(found):
    parts = [f"sha256 {found['sha256'][:16]}" if found.get("sha256") else "an unrecorded sha256"]
    parts += [f"{k} {found[k]}" for k in IDENTITY_KEYS if k in found]
    return ", ".join(parts)


def open_journal(args, sha256):
    """The records of earlier runs of this sweep, after checking that the
    journal belongs to it and to this very bench binary (its sha256)."""
    header = {"bench": args.bench, "args": args.bench_args, "sha256": sha256}
    if args.fresh and os.path.exists(args.journal):
        os.remove(args.journal)
    found, records = read_journal(args.journal)
    if found is None and not records:
        os.makedirs(os.path.dirname(os.path.abspath(args.journal)), exist_ok=True)
        if os.path.exists(args.journal):
            os.remove(args.journal)  # nothing but an unfinished first line
        append(args.journal, {"sweep": header})
        return records
    if not found or (found.get("bench"), found.get("args")) != (args.bench, args.bench_args):
        raise BadInput(
            f"{args.journal} is the journal of another sweep (bench {found and found.get('bench')}, "
            f"arguments {found and found.get('args')}): use --fresh to start over or "
            "--journal for another file")
    if found.get("sha256") != header["sha256"]:
        raise BadInput(
            f"{args.journal} was written by another build of {args.bench} "
            f"({describe(identity(found.get('sha256'), records))}); the binary there now has "
            f"sha256 {header['sha256'][:16]}: its results would be merged with the other's. "
            "Use --fresh to start over (or --journal for another file)")
    repair(args.journal)
    return records


# --- progress and merging ---------------------------------------------------

def outcome(record):
    if record["status"] != "ok":
        return f"FAILED: {record['error']}"
    errored = [e.get("error_message", "error") for e in record["benchmarks"]
               if e.get("error_occurred")]
    return f"error: {errored[0]}" if errored else "ok"


def merge(names, records, sha256, suite=False):
    """One Google Benchmark JSON of the records of these benchmarks: the
    context every run shares at the top (with the binary's sha256), what a
    run's context has of its own in its entries, failures as errored
    entries. suite: they are the default suite's, run a member at a time."""
    context, own = split_contexts([records[n] for n in names])
    entries = []
    for index, name in enumerate(names):
        entries += [in_family(e, index)
                    for e in record_entries(records[name], own)]
    failed = sum(1 for n in names if records[n]["status"] != "ok")
    # A run that finished but whose benchmark reported an error (out of
    # memory, the memory guard) measured nothing either, and says so apart.
    errored = sum(1 for n in names if records[n]["status"] == "ok"
                  and any(failed_entry(e) for e in records[n]["benchmarks"]))
    if sha256:
        context["bench_sha256"] = sha256
    outcome = f"{failed} failed" + (f", {errored} errored" if errored else "")
    how = (" of bench's default suite, each Family/size in its own bench process" if suite
           else ", each in its own bench process")
    context["sweep"] = f"{len(names)} benchmarks{how}; {outcome}"
    return {"context": context, "benchmarks": entries}, outcome


def run_sweep(args, names, records):
    todo = [n for n in names if n not in records
            or (args.retry_failed and records[n]["status"] != "ok")]
    done = len(names) - len(todo)
    if done:
        print(f"sweep: {done} of {len(names)} benchmarks already in {args.journal}",
              file=sys.stderr)
    progress = Progress(len(todo))
    for name in todo:
        done += 1
        print(f"[{done}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
        record = run_benchmark(args.bench, args.bench_args, name, args.timeout)
        append(args.journal, record)
        records[name] = record
        print(f"[{done}/{len(names)}] {outcome(record)} in {record['seconds']:.1f} s; "
              f"{progress.step(record['seconds'])}", file=sys.stderr, flush=True)

def run_suite(args, grouped, spelled, records):
    """The default suite's sweep: each member (Family/size) in its own bench
    process, unless the journal has all its benchmarks (with --retry-failed:
    all of them, none failed)."""
    def wanted(name):
        return name not in records or (args.retry_failed and records[name]["status"] != "ok")

    todo = [(m, names) for m, names in grouped.items() if any(wanted(n) for n in names)]
    total = sum(len(names) for names in grouped.values())
    done = total - sum(len(names) for _, names in todo)
    if done:
        print(f"sweep: {len(grouped) - len(todo)} of {len(grouped)} Family/size of the default "
              f"suite ({done} of {total} benchmarks) already in {args.journal}", file=sys.stderr)
    progress = Progress(len(todo))
    for member, names in todo:
        print(f"[{done + 1}-{done + len(names)}/{total}] {member}: {len(names)} benchmarks "
              "in one bench process ...", file=sys.stderr, flush=True)
        found = run_member(args.bench, args.bench_args, member, names, spelled, args.timeout)
        for record in found:
            append(args.journal, record)
            records[record["name"]] = record
            done += 1
            print(f"[{done}/{total}] {record['name']}: {outcome(record)}", file=sys.stderr)
        print(f"{member} in {found[0]['seconds']:.1f} s; {progress.step(found[0]['seconds'])}",
              file=sys.stderr, flush=True)


def sweep_main():
    args = parse_args(sys.argv[1:])
    if args.merge_only:
        header, records = read_journal(args.journal)
        names = list(records)
        if not names:
            raise BadInput(f"{args.journal}: no benchmark recorded")
        suite = not gives_filter((header or {}).get("args", args.bench_args))
    else:
        check_bench(args.bench, "--bench")
        suite = not gives_filter(args.bench_args)
        if suite:
            grouped, spelled = suite_groups(args.bench, args.bench_args)
            names = [n for member in grouped.values() for n in member]
        else:
            names = list_benchmarks(args.bench, args.bench_args)
        header = {"sha256": sha256_file(args.bench)}
        records = open_journal(args, header["sha256"])
        raise_on_sigterm()
        try:
            if suite:
                run_suite(args, grouped, spelled, records)
            else:
                run_sweep(args, names, records)
        except (Interrupted, KeyboardInterrupt):
            print(f"sweep: interrupted; {args.journal} keeps what finished: run the same "
                  "command again to resume", file=sys.stderr)
            return EXIT_INTERRUPTED
    doc, outcome = merge(names, records, (header or {}).get("sha256"), suite)
    write_json(args.out, doc)
    print(f"sweep: merged {len(names)} benchmarks ({outcome}) into {args.out}",
          file=sys.stderr)
    print(args.out)


def main():
    run(sweep_main)
