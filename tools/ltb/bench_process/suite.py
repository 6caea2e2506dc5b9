"""bench's default suite (what it runs without --benchmark_filter) one member
at a time: its members as --suite_skip spells them (Family/size), the
benchmarks of each, and a bench process that runs one member alone, with the
suite's own shapes and minimum time, which no filter reproduces."""

import collections
import json
import os
import tempfile

from ltb.base import BadInput
from ltb.bench_process.bench import bench_stdout, failed_record, list_benchmarks, run_process
from ltb.results.load import parse


def members(bench, bench_args):
    """The default suite's members, in bench's order, spelled as --suite_skip
    takes them: the family's name and the first part of each of its suite
    entries (Ops/matmul, GPT2/small; lib/suite/sweep.cc's DefaultSuiteFilter),
    from the facts bench prints (`bench ARGS --list_families`)."""
    stdout = bench_stdout(bench, bench_args, "--list_families")
    try:
        families = json.loads(stdout)["families"]
        found = []
        for family in families:
            for entry in family.get("suite", []):
                member = f"{family['name']}/{entry.split('/', 1)[0]}"
                if member not in found:
                    found.append(member)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise BadInput(f"{bench} --list_families printed no family facts: is it bench?")
    return found


def owner(name, spelled):
    """The member a benchmark's name belongs to: the longest that heads it
    (a family whose suite is every size, as --model's, is Family/ alone)."""
    heads = [m for m in spelled if name.startswith(m if m.endswith("/") else m + "/")]
    return max(heads, key=len) if heads else None


def groups(bench, bench_args):
    """(OrderedDict member -> the names of its benchmarks, in the listing's
    order; every member of the suite): what the bench arguments select of
    the default suite (`bench ARGS --benchmark_list_tests`), by member."""
    names = list_benchmarks(bench, bench_args)
    spelled = members(bench, bench_args)
    grouped = collections.OrderedDict()
    for name in names:
        member = owner(name, spelled)
        if member is None:
            raise BadInput(f"bench lists {name} in its default suite, but none of the suite's "
                           f"members ({', '.join(spelled)}) names it")
        grouped.setdefault(member, []).append(name)
    return grouped, spelled


def without_skip(bench_args):
    """The bench arguments without --suite_skip (a member's run skips every
    other member itself, those the user skipped among them) and without an
    empty --benchmark_filter (which is none)."""
    return [a for a in bench_args
            if not a.startswith(("--suite_skip=", "-suite_skip=", "--benchmark_filter="))]


def run_member(bench, bench_args, member, names, spelled, timeout):
    """Runs one member of the default suite in its own bench process, without
    a filter and with --suite_skip naming every other member, so that it
    keeps the suite's shapes and minimum time; each result goes to a file as
    it finishes, so a crash loses only the benchmarks that had not reported.
    Returns a record a benchmark (names), as run_benchmark does: those that
    did not report are failed, with why. timeout is a benchmark's: the
    process may take it once for each of its benchmarks."""
    skip = [m for m in spelled if m != member]
    limit = timeout * len(names)
    with tempfile.TemporaryDirectory(prefix="ltb-suite-") as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [bench, *without_skip(bench_args),
               *([f"--suite_skip={','.join(skip)}"] if skip else []),
               f"--benchmark_out={out}", "--benchmark_out_format=json"]
        error, _, err, seconds = run_process(cmd, limit)
        try:
            with open(out, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
    doc = None
    if raw:
        try:
            doc = parse(raw, f"{member}'s bench process")
        except BadInput:
            pass
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        doc, error = {}, error or "bench wrote no valid JSON"
    reported = collections.defaultdict(list)
    for entry in doc.get("benchmarks", []):
        if isinstance(entry, dict) and "name" in entry:
            reported[entry.get("run_name", entry["name"])].append(entry)
    records = []
    for name in names:
        if reported.get(name):
            records.append({"name": name, "seconds": seconds, "status": "ok",
                            "context": doc.get("context", {}), "benchmarks": reported[name]})
        else:
            why = (f"{error}, in the bench process of {member}, before this benchmark "
                   "reported" if error else
                   f"bench ran {member} but did not report this benchmark")
            records.append(failed_record(name, seconds, why, err))
    return records
