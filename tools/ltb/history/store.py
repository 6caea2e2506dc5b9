"""The results store of tools/history and the HTML report: every run bench
made, kept with its commit and machine, in SQLite or PostgreSQL (one schema
and SQL); each benchmark's series over commits; change points found by
ruptures' PELT. Its tables, the fingerprint that decides which runs compare
and the change rule: docs/tools.md, "history: results over time".
"""
import contextlib
import datetime
import hashlib
import heapq
import json
import math
import os
import re
import sqlite3
import statistics
import subprocess
import time

from ltb.base import REPO, BadInput, read_bytes
from ltb.history.changes import Point
from ltb.results.load import entry_problem, parse
from ltb.results.entries import TIME_UNITS, failed, failure
from ltb.results.names import base_name, parse_name
from ltb.results.records import run_date
from ltb.results.runtimes import unrestricted

SCHEMA_VERSION = 4
MIGRATIONS = {
    1: [
        """CREATE TABLE runs (
             run_id TEXT PRIMARY KEY,
             commit_sha TEXT NOT NULL,
             parent_sha TEXT NOT NULL,
             commit_time DOUBLE PRECISION NOT NULL,
             run_date TEXT NOT NULL,
             fingerprint TEXT NOT NULL,
             machine TEXT NOT NULL,
             context TEXT NOT NULL,
             source TEXT NOT NULL,
             added_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE results (
             run_id TEXT NOT NULL REFERENCES runs (run_id),
             name TEXT NOT NULL,
             repetition INTEGER NOT NULL,
             real_time_s DOUBLE PRECISION,
             cpu_time_s DOUBLE PRECISION,
             iterations BIGINT,
             error TEXT,
             counters TEXT NOT NULL,
             PRIMARY KEY (run_id, name, repetition))""",
    ],
    # The series of one machine kind, in commit order, without a scan.
    2: ["CREATE INDEX runs_by_fingerprint ON runs (fingerprint, commit_time)"],
    # The allocator and OpenMP's waiting joined the fingerprint: every run's
    # again, from its context, so that old and new runs of one kind stay one.
    3: [lambda store: store.refingerprint()],
    # The CPUs a run may use and its CPU quota joined it: a run under taskset
    # or a quota, stored in the whole machine's series, becomes its own.
    4: [lambda store: store.refingerprint()],
}

# Context fields that make two runs comparable (docs/tools.md, "One
# fingerprint, one machine kind").
FINGERPRINT_KEYS = ("cpu_model", "cpu_capability", "num_cpus", "gpus", "libtorch_version",
                    "cuda_runtime", "blas", "intra_op_threads", "inter_op_threads",
                    "blas_threads", "cpu_simulation", "aten_cpu_capability",
                    "onednn_max_cpu_isa", "ltb_max_cpu_isa", "cuda_tf32", "build_type",
                    "world_size", "malloc", "omp_wait_policy", "gomp_spincount",
                    "kmp_blocktime", "cpu_affinity", "cpu_quota")
# lib/base/threads.cc AffinityText's "0-1 (2 of 2 logical CPUs)".
# Google Benchmark's own fields of an entry; every other number is a counter.
_ENTRY_FIELDS = {"name", "family_index", "per_family_instance_index", "run_name", "run_type",
                 "repetitions", "repetition_index", "threads", "iterations", "real_time",
                 "cpu_time", "time_unit", "error_occurred", "error_message", "label",
                 "aggregate_name", "aggregate_unit", "big_o", "rms"}
_SHA = re.compile(r"[0-9a-f]{7,40}")
_FULL_SHA = re.compile(r"[0-9a-f]{40}")


def default_db():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "libtorch-bench", "history.sqlite")


def is_postgresql(url):
    return url.startswith(("postgresql://", "postgres://"))


# --- reading a result file ---------------------------------------------------

def read_run(path):
    """(bytes' SHA-256, document) of a bench JSON file, checked whole: a
    file that is not one raises BadInput in one sentence; one that a killed
    run cut short gives its whole entries (ltb.results.load.parse)."""
    raw = read_bytes(path, "; nothing was added")
    try:
        doc = parse(raw, path)
    except BadInput as e:
        raise BadInput(f"{e}; nothing was added")
    if (not isinstance(doc, dict) or not isinstance(doc.get("context"), dict)
            or not isinstance(doc.get("benchmarks"), list) or not doc["benchmarks"]):
        raise BadInput(f"{path} is not a bench result file (a JSON object with a "
                       "context and a non-empty benchmarks list); nothing was added")
    for i, entry in enumerate(doc["benchmarks"]):
        ok = isinstance(entry, dict) and isinstance(entry.get("name"), str)
        if ok and not failed(entry) and entry.get("run_type") != "aggregate":
            ok = (isinstance(entry.get("real_time"), (int, float))
                  and math.isfinite(entry["real_time"]) and entry["real_time"] >= 0
                  and entry.get("time_unit", "ns") in TIME_UNITS)
        if not ok:
            raise BadInput(f"{path}: benchmark entry {i} has no name, finite time or known "
                           "time unit; nothing was added")
        # A field that is not a number where Google Benchmark writes one (a
        # time of true, iterations of "abc", a counter of "fast") would be
        # stored as a number it is not, or dropped without a word.
        problem = entry_problem(entry, i)
        index = entry.get("repetition_index", 0)
        if problem is None and (not isinstance(index, int) or isinstance(index, bool)
                                or index < 0):
            problem = f"{entry['name']}: its repetition_index is not a whole number"
        if problem:
            raise BadInput(f"{path}: benchmark entry {i} is not one Google Benchmark writes "
                           f"({problem}); nothing was added")
    # The store keeps repetitions; a benchmark reported by its aggregates
    # alone would be a run without it.
    measured = {base_name(e) for e in doc["benchmarks"] if e.get("run_type") != "aggregate"}
    for entry in doc["benchmarks"]:
        name = _aggregated_name(entry) if entry.get("run_type") == "aggregate" else None
        if name is not None and name not in measured:
            raise BadInput(f"{path}: {name} has only aggregates (mean, median, ...), "
                           "no repetition: run bench without --benchmark_display_aggregates_only "
                           "and --benchmark_report_aggregates_only; nothing was added")
    return hashlib.sha256(raw).hexdigest(), doc


def _aggregated_name(entry):
    """The benchmark an aggregate entry sums up (Google Benchmark names it in
    run_name; without one, its name less _mean, _median, ...)."""
    if entry.get("run_name"):
        return base_name(entry)
    name, aggregate = entry["name"], entry.get("aggregate_name")
    if aggregate and name.endswith("_" + aggregate):
        name = name[:-len(aggregate) - 1]
    return base_name({"name": name})


def fingerprint(context):
    """(fingerprint, the fields it was made from) of a run's context."""
    fields = {k: str(context[k]) for k in FINGERPRINT_KEYS
              if k in context and not unrestricted(k, str(context[k]))}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
    return digest, fields


def git(repo, *args):
    """A git command's output in repo, or None when it fails."""
    try:
        run = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return run.stdout.strip() if run.returncode == 0 else None


def commit_of(context, commit, repo):
    """(full sha, parent sha, commit time) of the run's commit: the one given,
    else the context's suite_commit (git describe, maybe -dirty), resolved in
    repo; where it cannot be resolved the abbreviation stands, with no parent,
    and the run's date orders it."""
    described = commit or str(context.get("suite_commit", "unknown"))
    name = re.sub(r"-dirty$", "", described)
    # git describe: TAG-N-gSHA.
    match = re.search(r"-g([0-9a-f]{7,40})$", name)
    if match:
        name = match[1]
    full = git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}") if name else None
    if not full:
        if commit and not _SHA.fullmatch(commit):
            raise BadInput(f"--commit={commit}: not a commit of {repo}")
        return described, "", None
    parent = git(repo, "rev-parse", "--verify", "--quiet", f"{full}^") or ""
    when = git(repo, "show", "-s", "--format=%ct", full)
    suffix = "-dirty" if described.endswith("-dirty") else ""
    return full + suffix, parent, float(when) if when else None


def _date_seconds(text):
    """Seconds since the epoch of Google Benchmark's date, or 0."""
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def result_rows(doc):
    """(name, repetition, time s, cpu time s, iterations, error, counters
    JSON) for every measured entry (aggregates are derived: left out); an
    errored or skipped one has no times, and its error says why."""
    rows, seen = [], {}
    for entry in doc["benchmarks"]:
        if entry.get("run_type") == "aggregate":
            continue
        name = base_name(entry)
        rep = int(entry.get("repetition_index", 0))
        while (name, rep) in seen:  # the same name twice in one file
            rep += 1
        seen[(name, rep)] = True
        counters = {k: v for k, v in entry.items() if k not in _ENTRY_FIELDS
                    and isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v)}
        # A skipped entry's times of 0 are no measurement (Google Benchmark
        # 1.8's SkipWithMessage): stored as a time, it would be a point of 0 s.
        if failed(entry):
            rows.append((name, rep, None, None, None, failure(entry), json.dumps(counters)))
            continue
        unit = TIME_UNITS[entry.get("time_unit", "ns")]
        cpu = entry.get("cpu_time")
        rows.append((name, rep, float(entry["real_time"]) * unit,
                     float(cpu) * unit if isinstance(cpu, (int, float)) else None,
                     int(entry.get("iterations", 0)), None, json.dumps(counters)))
    return rows


# --- the store ---------------------------------------------------------------

class Store:
    """An SQLite file or a PostgreSQL database holding runs; migrated to
    SCHEMA_VERSION when opened. Every write is one transaction: SQLite's
    BEGIN IMMEDIATE (writers wait their turn, up to a minute), PostgreSQL's
    row locks and ON CONFLICT."""

    def __init__(self, url=None, migrate_to=SCHEMA_VERSION, create=True):
        self.url = url or default_db()
        self.postgresql = is_postgresql(self.url)
        if not create and not self.postgresql and not os.path.exists(self.url):
            raise BadInput(f"no results store at {self.url}: `tools/history add RESULTS.json` "
                           "makes one (or give --db)")
        if self.postgresql:
            try:
                import psycopg
            except ImportError:
                raise BadInput("--db=postgresql://... needs the Python package psycopg: "
                               "run tools/setup, which installs tools/requirements.txt")
            try:
                self.conn = psycopg.connect(self.url, autocommit=True)
            except psycopg.Error as e:
                raise BadInput(f"cannot connect to {self.url}: {str(e).strip()}")
        else:
            directory = os.path.dirname(os.path.abspath(self.url))
            try:
                os.makedirs(directory, exist_ok=True)
                self.conn = sqlite3.connect(self.url, timeout=60, isolation_level=None)
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA foreign_keys=ON")
            except (OSError, sqlite3.Error) as e:
                raise BadInput(f"{self.url}: cannot open the results store: {e}")
        # A store at the schema version opens without writing (read-only
        # commands need no write lock); an older one is migrated.
        current = self._current_version()
        if current is not None and current > SCHEMA_VERSION:
            raise BadInput(f"{self.url}: schema version {current} is newer than this "
                           f"tool's {SCHEMA_VERSION}: update libtorch-bench")
        if current is None or current < migrate_to:
            self.migrate(migrate_to)

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _sql(self, sql):
        return sql.replace("?", "%s") if self.postgresql else sql

    def execute(self, sql, params=()):
        try:
            return self.conn.execute(self._sql(sql), params)
        except sqlite3.DatabaseError as e:
            raise BadInput(f"{self.url}: {e}")

    def executemany(self, sql, rows):
        if self.postgresql:
            with self.conn.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self.conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self):
        if self.postgresql:
            with self.conn.transaction():
                yield
            return
        self.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def version(self):
        row = self.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return row[0] or 0

    def _current_version(self):
        """The schema version, or None before the first migration."""
        try:
            return self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        except Exception:  # noqa: BLE001 - no such table, on either database
            return None

    def migrate(self, upto=SCHEMA_VERSION):
        with self.transaction():
            if self.postgresql:  # one migrating writer at a time
                self.execute("SELECT pg_advisory_xact_lock(7413004)")
            self.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            current = self.version()
            if current > SCHEMA_VERSION:
                raise BadInput(f"{self.url}: schema version {current} is newer than this "
                               f"tool's {SCHEMA_VERSION}: update libtorch-bench")
            for v in range(current + 1, upto + 1):
                for step in MIGRATIONS[v]:
                    if callable(step):
                        step(self)
                    else:
                        self.execute(step)
                self.execute("INSERT INTO schema_version (version) VALUES (?)", (v,))

    def refingerprint(self):
        """Every run's fingerprint and its fields made again from its context
        (inside a migration's transaction)."""
        rows = []
        for run_id, context in self.execute("SELECT run_id, context FROM runs").fetchall():
            digest, fields = fingerprint(json.loads(context))
            rows.append((digest, json.dumps(fields, sort_keys=True), run_id))
        if rows:
            self.executemany("UPDATE runs SET fingerprint = ?, machine = ? WHERE run_id = ?",
                             rows)

    def add(self, path, commit=None, repo=REPO):
        """Adds a result file; returns its run id, and whether it was new."""
        run_id, doc = read_run(path)
        context = doc["context"]
        sha, parent, when = commit_of(context, commit, repo)
        date = run_date(doc)
        if when is None:
            when = _date_seconds(date)
        digest, fields = fingerprint(context)
        rows = [(run_id, *row) for row in result_rows(doc)]
        with self.transaction():
            cur = self.execute(
                "INSERT INTO runs (run_id, commit_sha, parent_sha, commit_time, run_date, "
                "fingerprint, machine, context, source, added_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
                (run_id, sha, parent, when, date, digest,
                 json.dumps(fields, sort_keys=True), json.dumps(context, sort_keys=True),
                 os.path.abspath(path), time.time()))
            if cur.rowcount == 0:
                return run_id, False
            self.executemany(
                "INSERT INTO results (run_id, name, repetition, real_time_s, cpu_time_s, "
                "iterations, error, counters) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return run_id, True

    def runs(self, fingerprint_prefix=None):
        """Every run as a dict, in commit order."""
        sql = ("SELECT run_id, commit_sha, parent_sha, commit_time, run_date, fingerprint, "
               "machine, context, source FROM runs")
        params = ()
        if fingerprint_prefix:  # the same test on both databases (LIKE is not)
            sql += " WHERE substr(fingerprint, 1, ?) = ?"
            params = (len(fingerprint_prefix), fingerprint_prefix)
        sql += " ORDER BY commit_time, run_date, run_id"
        keys = ("run_id", "commit", "parent", "commit_time", "date", "fingerprint",
                "machine", "context", "source")
        out = []
        for row in self.execute(sql, params).fetchall():
            run = dict(zip(keys, row))
            run["machine"] = json.loads(run["machine"])
            run["context"] = json.loads(run["context"])
            out.append(run)
        return out

    def results(self, run_id):
        """name -> [(time s or None, error, counters)] of a run, by repetition."""
        out = {}
        for name, rep, t, error, counters in self.execute(
                "SELECT name, repetition, real_time_s, error, counters FROM results "
                "WHERE run_id = ? ORDER BY name, repetition", (run_id,)).fetchall():
            out.setdefault(name, []).append((t, error, json.loads(counters)))
        return out

    def series(self, name_regex=None, fingerprint_prefix=None, dirty=False):
        """{(fingerprint, benchmark): [Point]} over commits, in commit order
        (commit_order): each commit's value
        is the median over its runs of each run's median step time. Runs of a
        checkout with uncommitted changes (commit ending in -dirty) are left
        out unless `dirty`. A commit that one add could not resolve is the
        commit another resolved, where its abbreviation names one alone."""
        pattern = re.compile(name_regex) if name_regex else None
        by_key, parents = {}, {}
        everyone = self.runs()
        resolved = {}
        for run in everyone:
            sha = run["commit"].removesuffix("-dirty")
            if _FULL_SHA.fullmatch(sha):
                resolved.setdefault(sha, run)
        for run in everyone:
            if fingerprint_prefix and not run["fingerprint"].startswith(fingerprint_prefix):
                continue
            if run["commit"].endswith("-dirty") and not dirty:
                continue
            sha = run["commit"].removesuffix("-dirty")
            if not _FULL_SHA.fullmatch(sha) and _SHA.fullmatch(sha):
                matches = [full for full in resolved if full.startswith(sha)]
                if len(matches) == 1:
                    first = resolved[matches[0]]
                    run = dict(run, commit=matches[0] + run["commit"][len(sha):],
                               commit_time=first["commit_time"], parent=first["parent"])
            parents[run["commit"]] = run["parent"]
            for name, reps in self.results(run["run_id"]).items():
                if pattern and not pattern.search(name):
                    continue
                times = [t for t, error, _ in reps if t is not None and error is None]
                if not times:
                    continue
                commits = by_key.setdefault((run["fingerprint"], name), {})
                point = commits.get(run["commit"])
                if point is None:
                    commits[run["commit"]] = Point(run["commit"], run["commit_time"],
                                                   run["date"], [statistics.median(times)],
                                                   [run["run_id"]])
                else:
                    point.run_values.append(statistics.median(times))
                    point.runs.append(run["run_id"])
        return {key: commit_order(commits.values(), parents) for key, commits in by_key.items()}


def commit_order(points, parents):
    """The points in commit order: by the commit's time, then the first run's
    date, except that a commit never comes before its parent's point. A
    rebased or scripted stack of commits shares one committer time (git
    keeps seconds), and the runs' dates are only when someone measured."""
    points = sorted(points, key=lambda p: (p.commit_time, p.date, p.commit))
    index = {p.commit: i for i, p in enumerate(points)}
    children, waiting = {}, set()
    for i, p in enumerate(points):
        parent = index.get(parents.get(p.commit))
        if parent is not None and parent != i:
            children.setdefault(parent, []).append(i)
            waiting.add(i)
    ready = [i for i in range(len(points)) if i not in waiting]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for child in children.get(i, []):
            heapq.heappush(ready, child)
    return [points[i] for i in order]


TRAINING_PHASES = ("forward_backward", "train_step", "train_epoch")
V3_COUNTERS = {"tokens/s": "tokens_per_sec", "samples/s": "samples_per_sec",
               "pp_tok/s": "prefill_tokens_per_sec",
               "tg_tok/s": "decode_tokens_per_sec", "ttft_ms": "ttft_ms",
               "tpot_ms": "tpot_ms", "peak_mem": "peak_memory_bytes", "mfu": "mfu",
               "mbu": "mbu"}


def v3_records(run, results):
    """One run as PyTorch's open benchmark database (v3) records: a record a
    benchmark and metric, its values one a repetition."""
    ctx = run["context"]
    gpus = [g for g in str(ctx.get("gpus", "")).split("; ") if g and not g.startswith("none")]
    runner = {"name": str(ctx.get("host_name", "")),
              "type": gpus[0] if gpus else str(ctx.get("cpu_model", "cpu")),
              "cpu_info": str(ctx.get("cpu_model", "")),
              "cpu_count": ctx.get("num_cpus"),
              "gpu_info": gpus[0] if gpus else "",
              "gpu_count": len(gpus),
              "extra_info": {"fingerprint": run["fingerprint"], **run["machine"]}}
    deps = {"pytorch": {"repo": "pytorch/pytorch", "version": str(ctx.get("libtorch_version", ""))},
            "libtorch-bench": {"sha": run["commit"], "parent_sha": run["parent"]}}
    records = []
    for name, reps in results.items():
        fields = parse_name(name)
        times = [t for t, error, _ in reps if t is not None and error is None]
        if not times:
            continue
        # Quantised weights are part of the dtype: fp32/int8 is not fp32.
        quant = [p for p in name.split("/") if p in ("int8", "int8dyn") or p.startswith("int4:")]
        benchmark = {"name": "libtorch-bench",
                     "mode": "training" if fields["phase"] in TRAINING_PHASES else "inference",
                     "dtype": "/".join([fields["dtype"]] + quant),
                     "extra_info": {"device": fields["device"], "phase": fields["phase"],
                                    "settings": fields["settings"], "suite_name": name}}
        model = {"name": f"{fields['family']}/{fields['size']}", "type": fields["family"],
                 "backend": "libtorch", "origins": ["libtorch-bench"]}
        metrics = [("step_time_ms", [t * 1e3 for t in times])]
        for counter, metric in V3_COUNTERS.items():
            values = [c[counter] for t, e, c in reps if e is None and counter in c]
            if values:
                metrics.append((metric, values))
        for metric, values in metrics:
            records.append({"benchmark": benchmark, "model": model,
                            "metric": {"name": metric, "benchmark_values": values,
                                       "target_value": None},
                            "runners": [runner], "dependencies": deps,
                            "timestamp": int(run["commit_time"])})
    return records
