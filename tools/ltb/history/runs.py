"""A directory of result files as a history: its runs in the order of their
context's date (a merged file's: its first run's), and the files left out
(what is not a bench result, and the runs of a world-size sweep)."""
import datetime
import os
import re

from ltb.base import BadInput
from ltb.results.load import load
from ltb.results.records import run_date


def history_runs(directory):
    """([(label, doc)] of the result JSON files under directory in the order
    of their context's date (then path), [(path, why skipped)]). Skipped:
    what is not a bench result (unreadable, not JSON, no benchmarks) and the
    runs of a world-size sweep (tools/scaling's merged file and its
    .ranksN.json runs), which are not points in time of one setting."""
    paths = sorted(os.path.join(root, f) for root, _, files in os.walk(directory)
                   for f in files if f.endswith(".json"))
    if not paths:
        raise BadInput(f"{directory}: no .json result files in it")
    runs, skipped = [], []
    for path in paths:
        try:
            doc = load(path)
        except BadInput as e:
            skipped.append((path, str(e).replace(f"{path}: ", "")))
            continue
        if "world_sizes" in doc["context"] or re.search(r"\.ranks\d+\.json$", path):
            skipped.append((path, "a run of a world-size sweep (tools/scaling)"))
            continue
        runs.append((path, doc))
    if not runs:
        raise BadInput(f"{directory}: no bench result among its .json files: "
                                   + "; ".join(f"{p}: {why}" for p, why in skipped))
    runs.sort(key=lambda r: (instant(run_date(r[1])), r[0]))
    return [(f"{run_date(doc)[:16] or os.path.basename(path)}"
             f" {os.path.relpath(path, directory)}", doc) for path, doc in runs], skipped


def instant(date):
    """A sort key of Google Benchmark's date that orders runs by when they
    ran, whatever their UTC offsets (a daylight saving change, machines in
    other time zones): the text alone would put 02:10+01:00 before
    02:30+02:00, which came 40 minutes earlier. A run without a date, or
    with one that is not a date, comes first, in its text's order, as the
    text alone would put it."""
    try:
        when = datetime.datetime.fromisoformat(date)
        if when.tzinfo is None:
            when = when.astimezone()  # local time, as the run's machine wrote it
        return (1, when.timestamp(), date)
    except ValueError:
        return (0, 0.0, date)
