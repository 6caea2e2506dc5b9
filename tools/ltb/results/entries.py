"""A result file's entries: the measured ones, their times and counters,
and each benchmark's repetitions with their medians."""

import collections
import math
import statistics

from ltb.base import BadInput
from ltb.results.names import base_name, parse_name


THROUGHPUT_COUNTERS = ("tokens/s", "samples/s", "FLOP/s", "bytes/s")


# Counters compare.py ignores that the gate checks, and which way is better.
# Served benchmarks (bench's serve phase) add LoadGen's: a Server at a fixed
# rate completes about that rate whatever its speed, so its time says
# little; its p99 latency (TTFT and TPOT for generation), its goodput, a
# found peak QPS and LoadGen's verdict (valid: 1, else 0) do.
SPEED_COUNTERS = ("tokens/s", "samples/s", "pp_tok/s", "tg_tok/s", "peak_qps", "goodput")
BIGGER_IS_BETTER = SPEED_COUNTERS + ("valid",)


SMALLER_IS_BETTER = ("peak_mem", "ttft_ms", "tpot_ms", "p99_ms", "ttft_p99_ms", "tpot_p99_ms")
# Those that are LoadGen's results, judged only for served benchmarks: a
# generate benchmark's tpot_p99_ms is the tail of one run's decode steps,
# a figure too noisy to gate on.
SERVED_ONLY = ("p99_ms", "ttft_p99_ms", "tpot_p99_ms")


# Columns of report, in order, when any result has them.
REPORT_COUNTERS = THROUGHPUT_COUNTERS + ("ttft_ms", "tpot_ms")


# How far a reduced precision or quantisation drifts (bench's
# lib/measure/accuracy.h), report's columns in this order: a held-out
# text's perplexity and its ratio to fp32 unquantised's (--eval_tokens), the
# teacher-forced divergence from fp32 unquantised (kld_*, same_top1_%), a
# quantised run's top-1 agreement with the same dtype unquantised, the
# greedy tokens' match last (against the same dtype unquantised for a
# quantised run, else against fp32).
ACCURACY_COUNTERS = ("ppl", "ppl_ratio", "kld_mean", "kld_p99", "kld_max", "same_top1_%",
                     "top1_agree_%", "token_match_%")


TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def failed(entry):
    """Whether an entry measured nothing: an error, or a benchmark that Google
    Benchmark 1.8 and later reports as skipped (SkipWithMessage: "skipped",
    "skip_message"), whose times of 0 are no measurement."""
    return bool(entry.get("error_occurred") or entry.get("skipped"))


def failure(entry):
    """Why a failed entry measured nothing."""
    if entry.get("error_occurred"):
        return entry.get("error_message") or "error"
    return f"skipped: {entry.get('skip_message') or 'no reason given'}"


def iterations(doc):
    """Entries that are measurements (not aggregates) and did not fail."""
    return [b for b in doc["benchmarks"]
            if b.get("run_type", "iteration") == "iteration" and not failed(b)]


def median_entry(runs):
    """One entry for a benchmark's repetitions: each number the median of
    the repetitions that have it (the first repetition alone would be as
    arbitrary as the last)."""
    merged = dict(runs[0])
    for key in {k for e in runs for k in e}:
        values = [e[key] for e in runs
                  if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool)]
        if values:
            merged[key] = statistics.median(values)
    return merged


def seconds(entry):
    """An entry's (manual, real) time per iteration in seconds."""
    unit = entry.get("time_unit", "ns")
    if unit not in TIME_UNITS:
        raise BadInput(f"{entry['name']}: unknown time unit {unit!r}")
    if "real_time" not in entry:
        raise BadInput(f"{entry['name']}: no real_time, so no time to read (Google Benchmark "
                       "writes one in every measured entry)")
    return float(entry["real_time"]) * TIME_UNITS[unit]


def throughput_counter(entry):
    for name in THROUGHPUT_COUNTERS:
        if name in entry:
            return name
    return None


class Benchmark:
    """One benchmark's measured repetitions in one result file."""

    def __init__(self, name):
        self.name = name
        self.fields = parse_name(name)
        self.entries = []

    @property
    def repetitions(self):
        return len(self.entries)

    @property
    def times(self):
        return [seconds(e) for e in self.entries]

    def values(self, counter):
        return [float(e[counter]) for e in self.entries
                if isinstance(e.get(counter), (int, float)) and math.isfinite(e[counter])]

    def has(self, counter):
        return bool(self.values(counter))

    @property
    def median_time(self):
        return statistics.median(self.times)

    def median(self, counter):
        values = self.values(counter)
        return statistics.median(values) if values else None

    @property
    def world_size(self):
        """Ranks of this benchmark's run where its entries say (a file of
        several world sizes, from tools/scaling), else 1."""
        return int(self.entries[0].get("world_size", 1)) if self.entries else 1

    def rate(self):
        """(tokens/s or samples/s median, 'tokens' or 'samples'), or (None, None)."""
        for counter in ("tokens/s", "samples/s"):
            if self.has(counter):
                return self.median(counter), counter.split("/")[0]
        return None, None


def collect(doc):
    """Benchmark name -> Benchmark, in file order, from measured entries."""
    found = collections.OrderedDict()
    for entry in iterations(doc):
        name = base_name(entry)
        found.setdefault(name, Benchmark(name)).entries.append(entry)
    return found


def errors(doc):
    """Benchmark name -> error message of every errored (or skipped) entry,
    in file order."""
    found = collections.OrderedDict()
    for entry in doc["benchmarks"]:
        if failed(entry):
            found.setdefault(base_name(entry), failure(entry))
    return found


def aggregates_only(doc):
    """Benchmarks the file reports by their aggregates alone (mean, median,
    ...: --benchmark_report_aggregates_only), with no repetition to read,
    in file order."""
    listed = {base_name(e) for e in doc["benchmarks"]
              if e.get("run_type", "iteration") == "iteration"}
    return list(collections.OrderedDict.fromkeys(
        base_name(e) for e in doc["benchmarks"]
        if e.get("run_type") == "aggregate" and base_name(e) not in listed))


def all_names(doc):
    """Every benchmark the file mentions, measured or errored."""
    return list(collections.OrderedDict.fromkeys(base_name(e) for e in doc["benchmarks"]))
