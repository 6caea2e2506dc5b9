"""tools/history and tools/bisect: the results store (idempotent adds, bad
files refused whole, two writers at once, migrations, one fingerprint a
machine kind), change points on synthetic series with known steps (the
detection rates docs/tools.md reports), PyTorch's v3 export, the HTML
report's store section, the same store on a real PostgreSQL (Debian's
postgresql, started by the test), and a planted slowdown bisected to its
commit in a throwaway repository."""
import datetime
import glob
import hashlib
import json
import math
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

from tests import browser
from tests.helpers import REPO, run_in_process

TOOLS = os.path.join(REPO, "tools")
from ltb.history.changes import changes
from ltb.history.store import SCHEMA_VERSION, Store
from ltb.results.names import base_name

HISTORY = os.path.join(TOOLS, "history")
BISECT = os.path.join(TOOLS, "bisect")
CONTEXT = {"date": "2026-11-25T10:00:00+00:00", "host_name": "ci-7", "cpu_model": "Zen 4",
           "cpu_capability": "AVX512", "num_cpus": 2, "libtorch_version": "2.15.0",
           "intra_op_threads": "2", "blas": "MKL", "gpus": "none (no GPU)"}


def result_doc(times, commit="unknown", **context):
    """A bench JSON document: {name: [step time in ms a repetition]}."""
    entries = []
    for name, reps in times.items():
        for i, ms in enumerate(reps):
            entries.append({"name": f"{name}/manual_time", "run_name": f"{name}/manual_time",
                            "run_type": "iteration", "repetitions": len(reps),
                            "repetition_index": i, "iterations": 10, "real_time": ms,
                            "cpu_time": ms, "time_unit": "ms", "tokens/s": 1000.0 / ms})
        if len(reps) > 1:
            entries.append({"name": f"{name}/manual_time_median", "run_type": "aggregate",
                            "aggregate_name": "median", "real_time": sorted(reps)[len(reps) // 2],
                            "time_unit": "ms"})
    return {"context": {**CONTEXT, "suite_commit": commit, **context}, "benchmarks": entries}


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def history(*args, db, check=True):
    """tools/history's main in this process (ruptures and SciPy, which
    `changes` loads, loaded once); add_at_once runs the command itself."""
    from ltb.history.cli import main
    run = run_in_process("history", main, *args, f"--db={db}")
    if check:
        assert run.returncode == 0, run.stdout + run.stderr
    return run


def add_at_once(case, db, batches):
    """Runs one `tools/history add` a batch of files, all at once; returns
    how many files they added in all."""
    procs = [subprocess.Popen([sys.executable, HISTORY, "add", *files, f"--db={db}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for files in batches]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        case.assertEqual(p.returncode, 0, out + err)
    return sum(out.count("added: ") for out, _ in outs)


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def throwaway_repo(path, commits):
    """A git repository of `commits` commits, each writing speed.txt with the
    given step time (ms); returns their shas, oldest first."""
    os.makedirs(path)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    shas = []
    for i, ms in enumerate(commits):
        with open(os.path.join(path, "speed.txt"), "w") as f:
            f.write(f"{ms}\n")
        git(path, "add", "speed.txt")
        env_date = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}"
        subprocess.run(["git", "-C", path, "commit", "-q", "--allow-empty", "-m", f"commit {i}"],
                       check=True,
                       env={**os.environ, "GIT_COMMITTER_DATE": env_date,
                            "GIT_AUTHOR_DATE": env_date})
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


# Schema version 2 as tools/history wrote it before the allocator and
# OpenMP's waiting joined the fingerprint (commit 762c30d), in SQL, so that
# the migration of a store holding runs is tested without an old checkout;
# version 3 has the same tables, its runs the fingerprint of version 3's
# fields (before the CPUs a run may use and its CPU quota joined it).
SCHEMA_2 = [
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE runs (
         run_id TEXT PRIMARY KEY, commit_sha TEXT NOT NULL, parent_sha TEXT NOT NULL,
         commit_time DOUBLE PRECISION NOT NULL, run_date TEXT NOT NULL,
         fingerprint TEXT NOT NULL, machine TEXT NOT NULL, context TEXT NOT NULL,
         source TEXT NOT NULL, added_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE results (
         run_id TEXT NOT NULL REFERENCES runs (run_id), name TEXT NOT NULL,
         repetition INTEGER NOT NULL, real_time_s DOUBLE PRECISION,
         cpu_time_s DOUBLE PRECISION, iterations BIGINT, error TEXT, counters TEXT NOT NULL,
         PRIMARY KEY (run_id, name, repetition))""",
    "CREATE INDEX runs_by_fingerprint ON runs (fingerprint, commit_time)",
    "INSERT INTO schema_version (version) VALUES (1)",
    "INSERT INTO schema_version (version) VALUES (2)",
]
FINGERPRINT_KEYS_2 = ("cpu_model", "cpu_capability", "num_cpus", "gpus", "libtorch_version",
                      "cuda_runtime", "blas", "intra_op_threads", "inter_op_threads",
                      "blas_threads", "cpu_simulation", "aten_cpu_capability",
                      "onednn_max_cpu_isa", "ltb_max_cpu_isa", "cuda_tf32", "build_type",
                      "world_size")
FINGERPRINT_KEYS_3 = FINGERPRINT_KEYS_2 + ("malloc", "omp_wait_policy", "gomp_spincount",
                                           "kmp_blocktime")
TUNED = "glibc malloc, tuned: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB, M_TOP_PAD=64MiB"


def connect(url):
    """A DB-API connection to either database, taking '?' parameters."""
    if url.startswith("postgresql://"):
        import psycopg

        class Pg:
            def __init__(self):
                self.conn = psycopg.connect(url, autocommit=True)

            def execute(self, sql, params=()):
                return self.conn.execute(sql.replace("?", "%s"), params)

            def close(self):
                self.conn.close()
        return Pg()
    return sqlite3.connect(url, isolation_level=None)


# lib/base/threads.cc's words for a run on the whole of a 2-CPU machine,
# under `taskset -c 0`, and in a container limited to 1 CPU.
WHOLE_MACHINE = {"cpu_affinity": "0-1 (2 of 2 logical CPUs)",
                 "cpu_quota": "none (no cgroup CPU quota)"}
PINNED = {**WHOLE_MACHINE, "cpu_affinity": "0 (1 of 2 logical CPUs)"}
QUOTA = {**WHOLE_MACHINE, "cpu_quota": "1 CPU (cgroup v2 cpu.max 100000 100000)"}


def old_fingerprint(context, keys):
    """(fingerprint, fields) of a context as the schema version whose
    fingerprint was made of `keys` made it."""
    fields = {k: str(context[k]) for k in keys if k in context}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12], fields


def old_store(url, files, repo, version=2):
    """A store of schema version 2 or 3 holding the files' runs, written in
    SQL as that version wrote them: the fingerprint of its fields."""
    from ltb.history.store import commit_of, read_run, result_rows
    from ltb.results.records import run_date
    keys = {2: FINGERPRINT_KEYS_2, 3: FINGERPRINT_KEYS_3}[version]
    c = connect(url)
    for sql in SCHEMA_2:
        c.execute(sql)
    if version == 3:
        c.execute("INSERT INTO schema_version (version) VALUES (3)")
    for path in files:
        run_id, doc = read_run(path)
        context = doc["context"]
        sha, parent, when = commit_of(context, None, repo)
        date = run_date(doc)
        if when is None:  # a commit that did not resolve: the run's date orders it
            when = datetime.datetime.fromisoformat(date).timestamp()
        digest, fields = old_fingerprint(context, keys)
        c.execute("INSERT INTO runs (run_id, commit_sha, parent_sha, commit_time, run_date, "
                  "fingerprint, machine, context, source, added_at) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  (run_id, sha, parent, when, date, digest,
                   json.dumps(fields, sort_keys=True), json.dumps(context, sort_keys=True),
                   os.path.abspath(path), 0.0))
        for row in result_rows(doc):
            c.execute("INSERT INTO results (run_id, name, repetition, real_time_s, cpu_time_s, "
                      "iterations, error, counters) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                      (run_id, *row))
    c.close()


def store_rows(url):
    """(runs by id: every column but added_at; results; schema versions)."""
    c = connect(url)
    runs = {r[0]: r[1:] for r in c.execute(
        "SELECT run_id, commit_sha, parent_sha, commit_time, run_date, fingerprint, machine, "
        "context, source FROM runs").fetchall()}
    results = sorted(tuple(r) for r in c.execute(
        "SELECT run_id, name, repetition, real_time_s, cpu_time_s, iterations, error, counters "
        "FROM results").fetchall())
    versions = sorted(r[0] for r in c.execute("SELECT version FROM schema_version").fetchall())
    c.close()
    return runs, results, versions


def migration_files(work):
    """Runs over 12 commits of a throwaway repository, as a store of schema 2
    held them: the tuned allocator's (two runs at some commits, a step at
    the 7th commit, a repetition that failed), glibc's defaults', passive
    OpenMP's (one of them of a dirty checkout), one of a bench too old to
    name its allocator and one whose commit does not resolve. Returns (the
    repository, its commits, the files)."""
    repo = os.path.join(work, "repo")
    shas = throwaway_repo(repo, [1] * 12)
    name, other = "MLP/nano/cpu/forward/fp32", "Ops/add/1M/cpu/fp32"
    docs = []
    for i, sha in enumerate(shas):
        date = f"2026-11-25T10:{i:02d}:00+00:00"
        level = 1.3 if i >= 6 else 1.0
        wobble = 1 + 0.01 * (i % 3 - 1)
        docs.append(result_doc({name: [level * wobble, level, level * 1.01],
                                other: [0.5 * wobble]}, commit=sha[:9], date=date, malloc=TUNED))
        if i % 3 == 0:
            docs.append(result_doc({name: [level * 1.005]}, commit=sha, malloc=TUNED,
                                   date=f"2026-11-25T11:{i:02d}:00+00:00"))
        docs.append(result_doc({name: [1.5 * wobble]}, commit=sha, date=date,
                               malloc="glibc malloc, default settings"))
        docs.append(result_doc({name: [1.2 * wobble]}, commit=sha + ("-dirty" if i == 2 else ""),
                               date=date, malloc=TUNED, omp_wait_policy="PASSIVE"))
    failed = docs[0]["benchmarks"][1]
    failed.update(error_occurred=True, error_message="out of memory")
    docs.append(result_doc({name: [1.0]}, date="2026-11-26T10:00:00+00:00"))
    docs.append(result_doc({name: [1.0]}, commit="v1.0-3-gdeadbee", malloc=TUNED,
                           date="2026-11-26T11:00:00+00:00"))
    return repo, shas, [write(os.path.join(work, f"{i:02d}.json"), d)
                        for i, d in enumerate(docs)]


def check_schema_2_migration(case, old_url, fresh_url, work):
    """A store of schema 2 holding runs, opened by this tool: every run keeps
    its results and gets the fingerprint a fresh store gives it; the series
    and their change points are a fresh store's of the same files; a second
    open migrates nothing."""
    repo, shas, files = migration_files(work)
    old_store(old_url, files, repo)
    with Store(fresh_url) as fresh:
        for f in files:
            fresh.add(f, repo=repo)
    before = store_rows(old_url)
    case.assertEqual(before[2], [1, 2])
    case.assertEqual(len({run[4] for run in before[0].values()}), 1)  # one kind, version 2's

    with Store(old_url) as migrated:
        case.assertEqual(migrated.version(), SCHEMA_VERSION)
    after, fresh = store_rows(old_url), store_rows(fresh_url)
    case.assertEqual(after[2], [1, 2, 3, 4])
    case.assertEqual(after[1], before[1])  # every result kept as it was
    case.assertEqual(after[1], fresh[1])
    case.assertEqual(sorted(after[0]), sorted(fresh[0]))
    for run_id, run in after[0].items():
        # The commit, its parent and time, the date and the context as they
        # were; the fingerprint and its fields a fresh store's.
        case.assertEqual(run[:4] + run[6:], before[0][run_id][:4] + before[0][run_id][6:])
        case.assertEqual(run[:8], fresh[0][run_id][:8], run_id)
    # tuned, glibc's defaults, passive OpenMP, and the bench that named none
    case.assertEqual(len({run[4] for run in after[0].values()}), 4)

    def series(url, dirty):
        with Store(url) as store:
            return {key: [(p.commit, p.commit_time, p.date, p.run_values, p.runs) for p in pts]
                    for key, pts in store.series(dirty=dirty).items()}

    for dirty in (False, True):
        case.assertEqual(series(old_url, dirty), series(fresh_url, dirty))
    found = json.loads(history("changes", "--json", db=old_url, check=False).stdout)
    case.assertEqual(found, json.loads(history("changes", "--json", db=fresh_url,
                                               check=False).stdout))
    # The tuned allocator's step at the 7th commit, alone: the other kinds
    # do not blur it.
    case.assertEqual([(c["benchmark"], [(s["good"], s["bad"]) for s in c["changes"]])
                      for c in found], [("MLP/nano/cpu/forward/fp32", [(shas[5], shas[6])])])

    with mock.patch.object(Store, "migrate", side_effect=AssertionError("migrated again")):
        with Store(old_url) as again:
            case.assertEqual(again.version(), SCHEMA_VERSION)
    case.assertEqual(store_rows(old_url), after)


def check_schema_3_migration(case, old_url, fresh_url, work):
    """A store of schema 3 holding runs of one machine over 10 commits, made
    on its whole (by a bench that recorded the CPUs it may use and its quota,
    or one too old to), and from the 6th commit on also under `taskset -c 0`
    and under a 1-CPU quota, all in one series there: opened by this tool,
    the pinned and the quota-limited runs are series of their own, as a fresh
    store holds them, and the whole machine's runs keep version 3's
    fingerprint and series, with no step in it."""
    repo = os.path.join(work, "repo")
    shas = throwaway_repo(repo, [1] * 10)
    name = "MLP/nano/cpu/forward/fp32"
    docs = []
    for i, sha in enumerate(shas):
        date = f"2026-11-25T10:{i:02d}:00+00:00"
        wobble = 1 + 0.01 * (i % 3 - 1)
        docs.append(result_doc({name: [wobble]}, commit=sha, date=date,
                               **(WHOLE_MACHINE if i % 2 else {})))
        if i >= 5:
            docs.append(result_doc({name: [1.9 * wobble]}, commit=sha, date=date, **PINNED))
            docs.append(result_doc({name: [1.7 * wobble]}, commit=sha, date=date, **QUOTA))
    files = [write(os.path.join(work, f"{i:02d}.json"), d) for i, d in enumerate(docs)]
    old_store(old_url, files, repo, version=3)
    with Store(fresh_url) as fresh:
        for f in files:
            fresh.add(f, repo=repo)
    before = store_rows(old_url)
    case.assertEqual(before[2], [1, 2, 3])
    # Version 3 read the pinned and the quota-limited runs as a slowdown of
    # the machine at the 6th commit.
    with Store(old_url, migrate_to=3) as unmigrated:
        (points,) = unmigrated.series().values()
    case.assertEqual([c.after for c in changes([p.value for p in points],
                                                commits=[p.commit for p in points])],
                     [shas[5]])

    with Store(old_url) as migrated:
        case.assertEqual(migrated.version(), SCHEMA_VERSION)
        runs = migrated.runs()
    after, fresh = store_rows(old_url), store_rows(fresh_url)
    case.assertEqual(after[2], [1, 2, 3, 4])
    case.assertEqual(after[1], before[1])
    case.assertEqual({k: run[:8] for k, run in after[0].items()},
                     {k: run[:8] for k, run in fresh[0].items()})
    kinds = {}
    for run in runs:
        restricted = (run["context"].get("cpu_affinity") == PINNED["cpu_affinity"],
                      run["context"].get("cpu_quota") == QUOTA["cpu_quota"])
        kinds.setdefault(restricted, set()).add(run["fingerprint"])
        if restricted == (False, False):  # the fingerprint and fields it had
            case.assertEqual(after[0][run["run_id"]][4:6], before[0][run["run_id"]][4:6])
    case.assertEqual(sorted(kinds), [(False, False), (False, True), (True, False)])
    case.assertEqual(sorted(len(fps) for fps in kinds.values()), [1, 1, 1])
    case.assertEqual(len(set.union(*kinds.values())), 3)
    with Store(old_url) as migrated:
        case.assertEqual(sorted(len(pts) for pts in migrated.series().values()), [5, 5, 10])
    case.assertEqual(json.loads(history("changes", "--json", db=old_url).stdout), [])


class StoreTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ltb-history-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.db = os.path.join(self.tmp, "h.sqlite")

    def count(self, table):
        with sqlite3.connect(self.db) as c:
            return c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def test_adding_a_file_twice_is_a_no_op(self):
        f = write(os.path.join(self.tmp, "a.json"),
                  result_doc({"Transformer/nano/cpu/forward/batch:2/fp32": [1.0, 1.1, 0.9]}))
        first = history("add", f, db=self.db)
        self.assertIn("added", first.stdout)
        again = history("add", f, db=self.db)
        self.assertIn("already there", again.stdout)
        self.assertEqual(self.count("runs"), 1)
        self.assertEqual(self.count("results"), 3)  # the 3 repetitions, not the median
        with sqlite3.connect(self.db) as c:
            rows = c.execute("SELECT repetition, real_time_s, counters FROM results "
                             "ORDER BY repetition").fetchall()
        self.assertEqual([r[0] for r in rows], [0, 1, 2])
        self.assertAlmostEqual(rows[1][1], 1.1e-3)
        self.assertAlmostEqual(json.loads(rows[1][2])["tokens/s"], 1000 / 1.1)

    def test_a_bad_file_is_refused_whole_and_the_others_are_added(self):
        good = write(os.path.join(self.tmp, "good.json"), result_doc({"MLP/nano/cpu/forward/fp32": [2.0]}))
        text = json.dumps(result_doc({"MLP/nano/cpu/forward/fp32": [2.0, 2.1]}))
        truncated = os.path.join(self.tmp, "cut.json")
        with open(truncated, "w") as f:  # cut before any entry: nothing to add
            f.write(text[:text.index('"suite_commit"')])
        not_bench = write(os.path.join(self.tmp, "other.json"), {"hello": 1})
        empty = write(os.path.join(self.tmp, "empty.json"), {"context": {}, "benchmarks": []})
        no_time = write(os.path.join(self.tmp, "notime.json"),
                        {"context": {}, "benchmarks": [{"name": "A"}, {"name": "B",
                                                                      "real_time": 1}]})
        run = history("add", truncated, good, not_bench, empty, no_time, db=self.db, check=False)
        self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
        errors = run.stderr.strip().splitlines()
        self.assertEqual(len(errors), 4, run.stderr)  # one sentence a bad file
        self.assertIn("cut.json: not JSON", errors[0])
        self.assertIn("nothing was added", errors[0])
        self.assertIn("other.json is not a bench result file", errors[1])
        self.assertIn("empty.json is not a bench result file", errors[2])
        self.assertIn("notime.json: benchmark entry 0 has no name, finite time", errors[3])
        self.assertEqual(self.count("runs"), 1)
        self.assertEqual(self.count("results"), 1)
        nan = write(os.path.join(self.tmp, "nan.json"),
                    {"context": {}, "benchmarks": [{"name": "A", "real_time": float("nan")}]})
        refused = history("add", nan, db=self.db, check=False)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("nan.json: benchmark entry 0 has no name, finite time", refused.stderr)
        # Reading a store that is not there says so rather than making one.
        missing = history("runs", db=os.path.join(self.tmp, "typo.sqlite"), check=False)
        self.assertEqual(missing.returncode, 2)
        self.assertIn("no results store at", missing.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "typo.sqlite")))

    def test_a_file_a_killed_run_cut_short_adds_its_whole_entries(self):
        text = json.dumps(result_doc({"MLP/nano/cpu/forward/fp32": [2.0, 2.1, 2.2],
                                      "MLP/nano/cpu/train_step/fp32": [5.0]}), indent=2)
        cut = os.path.join(self.tmp, "cut.json")
        with open(cut, "w") as f:  # inside the third repetition
            f.write(text[:text.index('"repetition_index": 2')])
        run = history("add", cut, db=self.db)
        self.assertIn("cut.json: the run did not finish (the file is cut short): recovered 2 "
                      "complete benchmark entries and its context", run.stderr)
        self.assertEqual(self.count("runs"), 1)
        self.assertEqual(self.count("results"), 2)
        with sqlite3.connect(self.db) as c:
            times = [r[0] for r in c.execute("SELECT real_time_s FROM results ORDER BY "
                                             "repetition")]
            commit = c.execute("SELECT commit_sha FROM runs").fetchone()[0]
        self.assertEqual(len(times), 2)
        for got, ms in zip(times, (2.0, 2.1)):
            self.assertAlmostEqual(got, ms * 1e-3)
        self.assertEqual(commit, "unknown")  # the context's suite_commit, kept

    def test_a_failure_inside_the_transaction_leaves_nothing_half_written(self):
        f = write(os.path.join(self.tmp, "a.json"),
                  result_doc({"A/nano/cpu/forward/fp32": [1.0], "B/nano/cpu/forward/fp32": [2.0]}))
        store = Store(self.db)
        real = store.executemany

        def fail_after_the_run_row(sql, rows):
            raise sqlite3.OperationalError("disk I/O error (planted)")
        store.executemany = fail_after_the_run_row
        with self.assertRaises(sqlite3.OperationalError):
            store.add(f)
        store.executemany = real
        self.assertEqual(self.count("runs"), 0)
        self.assertEqual(store.add(f)[1], True)
        self.assertEqual(self.count("results"), 2)
        store.close()

    def test_two_writers_at_once_lose_nothing(self):
        files = [[write(os.path.join(self.tmp, f"w{w}-{i}.json"),
                        result_doc({f"Ops/add/{w}x{i}/cpu/fp32": [1.0 + i]},
                                   date=f"2026-11-25T10:{w:02d}:{i:02d}+00:00"))
                  for i in range(12)] for w in range(2)]
        shared = write(os.path.join(self.tmp, "shared.json"), result_doc({"X/nano/cpu/forward/fp32": [1.0]}))
        Store(self.db).close()  # the schema, before the race
        added = add_at_once(self, self.db, [mine + [shared] for mine in files])
        self.assertEqual(added, 25)  # shared.json once
        self.assertEqual(self.count("runs"), 25)
        self.assertEqual(self.count("results"), 25)
        with sqlite3.connect(self.db) as c:
            self.assertEqual(c.execute("PRAGMA integrity_check").fetchone()[0], "ok")

    def test_an_old_store_is_migrated_and_a_newer_one_refused(self):
        f = write(os.path.join(self.tmp, "a.json"), result_doc({"A/nano/cpu/forward/fp32": [1.0]}))
        old = Store(self.db, migrate_to=1)
        old.add(f)
        self.assertEqual(old.version(), 1)
        old.close()
        with sqlite3.connect(self.db) as c:
            indexes = c.execute("SELECT name FROM sqlite_master WHERE type='index' "
                                "AND name='runs_by_fingerprint'").fetchall()
        self.assertEqual(indexes, [])
        history("runs", db=self.db)
        with sqlite3.connect(self.db) as c:
            self.assertEqual(c.execute("SELECT MAX(version) FROM schema_version").fetchone()[0],
                             SCHEMA_VERSION)
            self.assertEqual(c.execute("SELECT COUNT(*) FROM sqlite_master WHERE "
                                       "name='runs_by_fingerprint'").fetchone()[0], 1)
            c.execute("INSERT INTO schema_version (version) VALUES (99)")
        self.assertEqual(self.count("runs"), 1)
        refused = history("runs", db=self.db, check=False)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("schema version 99 is newer than this tool's", refused.stderr)

    def test_runs_are_compared_only_within_one_fingerprint(self):
        name = "MLP/nano/cpu/forward/fp32"
        a = write(os.path.join(self.tmp, "a.json"), result_doc({name: [1.0]}))
        b = write(os.path.join(self.tmp, "b.json"), result_doc({name: [1.0]}, host_name="other",
                                                               date="2026-11-26T10:00:00+00:00"))
        c = write(os.path.join(self.tmp, "c.json"), result_doc({name: [5.0]}, cpu_model="Xeon"))
        history("add", a, b, c, db=self.db)
        with Store(self.db) as store:
            series = store.series()
        self.assertEqual(len(series), 2)  # the host name is not part of it; the CPU is
        self.assertEqual(sorted(len(points) for points in series.values()), [1, 1])
        same = [pts for pts in series.values() if pts[0].value < 2e-3][0]
        self.assertEqual(len(same[0].run_values), 2)  # one commit ("unknown"), two runs

    def test_runs_of_another_allocator_or_openmp_wait_are_another_series(self):
        # bench --malloc=system, or OMP_WAIT_POLICY=passive, changes every
        # step time on one machine and build: such runs in one series would
        # be a change at whichever commit they were first used.
        name = "MLP/nano/cpu/forward/fp32"
        tuned = "glibc malloc, tuned: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB, M_TOP_PAD=64MiB"
        docs = [result_doc({name: [1.0]}, commit="aaaaaaa", malloc=tuned),
                result_doc({name: [1.3]}, commit="bbbbbbb", malloc="glibc malloc, default settings",
                           date="2026-11-26T10:00:00+00:00"),
                result_doc({name: [1.2]}, commit="ccccccc", malloc=tuned,
                           omp_wait_policy="PASSIVE", date="2026-11-27T10:00:00+00:00")]
        files = [write(os.path.join(self.tmp, f"{i}.json"), d) for i, d in enumerate(docs)]
        old = Store(self.db, migrate_to=2)
        for f in files:
            old.add(f)
        old.close()
        # Runs stored before the allocator was part of the fingerprint get
        # theirs again from their context when the store is migrated.
        with sqlite3.connect(self.db) as c:
            c.execute("UPDATE runs SET fingerprint = 'before', machine = '{}'")
        with Store(self.db) as store:
            series = store.series()
            machines = [r["machine"] for r in store.runs()]
        self.assertEqual(sorted(len(points) for points in series.values()), [1, 1, 1])
        self.assertEqual([m.get("malloc") for m in machines],
                         [tuned, "glibc malloc, default settings", tuned])
        self.assertEqual(machines[2]["omp_wait_policy"], "PASSIVE")

    def test_a_store_of_schema_2_holding_runs_is_migrated_as_a_fresh_store_holds_them(self):
        check_schema_2_migration(self, os.path.join(self.tmp, "old.sqlite"),
                                 os.path.join(self.tmp, "fresh.sqlite"), self.tmp)

    def test_a_run_pinned_or_under_a_cpu_quota_is_another_series(self):
        # taskset -c 0, or a container limited to 1 CPU, slows every step on
        # one machine and build: in the whole machine's series such a run
        # would be a slowdown at whichever commit it was first made.
        name = "MLP/nano/cpu/forward/fp32"
        docs = [result_doc({name: [1.0]}, commit="aaaaaaa"),  # a bench that named neither
                result_doc({name: [1.0]}, commit="bbbbbbb", date="2026-11-26T10:00:00+00:00",
                           **WHOLE_MACHINE),
                result_doc({name: [1.9]}, commit="ccccccc", date="2026-11-27T10:00:00+00:00",
                           **PINNED),
                result_doc({name: [1.7]}, commit="ddddddd", date="2026-11-28T10:00:00+00:00",
                           **QUOTA)]
        files = [write(os.path.join(self.tmp, f"{i}.json"), d) for i, d in enumerate(docs)]
        history("add", *files, db=self.db)
        with Store(self.db) as store:
            runs = store.runs()
            series = store.series()
        self.assertEqual([r["context"]["date"][:10] for r in runs],
                         ["2026-11-25", "2026-11-26", "2026-11-27", "2026-11-28"])
        old, whole, pinned, quota = runs
        # The whole machine's run keeps the fingerprint of a file without
        # the fields, which is version 3's: a store's series is not split.
        self.assertEqual(whole["fingerprint"], old["fingerprint"])
        self.assertEqual(whole["machine"], old["machine"])
        self.assertEqual((whole["fingerprint"], whole["machine"]),
                         old_fingerprint(whole["context"], FINGERPRINT_KEYS_3))
        self.assertEqual(len({whole["fingerprint"], pinned["fingerprint"],
                              quota["fingerprint"]}), 3)
        # What the fields say of the machine where it was restricted, alone.
        restricted = [(r["machine"].get("cpu_affinity"), r["machine"].get("cpu_quota"))
                      for r in (pinned, quota)]
        self.assertEqual(restricted, [(PINNED["cpu_affinity"], None), (None, QUOTA["cpu_quota"])])
        self.assertEqual(sorted(len(points) for points in series.values()), [1, 1, 2])

    def test_a_store_of_schema_3_holding_pinned_runs_splits_them_off_as_a_fresh_store_does(self):
        check_schema_3_migration(self, os.path.join(self.tmp, "old.sqlite"),
                                 os.path.join(self.tmp, "fresh.sqlite"), self.tmp)

    def test_commits_are_resolved_with_their_parents(self):
        repo = os.path.join(self.tmp, "repo")
        shas = throwaway_repo(repo, [1, 1])
        f = write(os.path.join(self.tmp, "a.json"),
                  result_doc({"A/nano/cpu/forward/fp32": [1.0]}, commit=shas[1][:12] + "-dirty"))
        history("add", f, f"--repo={repo}", db=self.db)
        with Store(self.db) as store:
            run = store.runs()[0]
        self.assertEqual(run["commit"], shas[1] + "-dirty")
        self.assertEqual(run["parent"], shas[0])
        # A checkout with uncommitted changes is no point of a series unless asked.
        with Store(self.db) as store:
            self.assertEqual(store.series(), {})
            self.assertEqual(len(store.series(dirty=True)), 1)
        bad = history("add", f, f"--repo={repo}", "--commit=no-such-branch", db=self.db,
                      check=False)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--commit=no-such-branch: not a commit of", bad.stderr)

    def test_commits_of_one_second_are_in_the_order_of_their_parents(self):
        # A rebased stack: every commit has the same committer time. Measured
        # newest first, the run dates run against the history; the series
        # must still follow the commits, and a slowdown stay one.
        repo = os.path.join(self.tmp, "repo")
        os.makedirs(repo)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "t@example.com")
        git(repo, "config", "user.name", "t")
        shas = []
        for i in range(8):
            subprocess.run(["git", "-C", repo, "commit", "-q", "--allow-empty", "-m", f"c{i}"],
                           check=True, env={**os.environ,
                                            "GIT_COMMITTER_DATE": "2026-01-01T00:00:00",
                                            "GIT_AUTHOR_DATE": f"2026-01-01T00:00:0{i}"})
            shas.append(git(repo, "rev-parse", "HEAD"))
        name = "A/nano/cpu/forward/fp32"
        files = [write(os.path.join(self.tmp, f"{i}.json"),
                       result_doc({name: [1.0 if i < 4 else 1.3]}, commit=sha[:12],
                                  date=f"2026-02-01T00:00:{59 - i:02d}+00:00"))
                 for i, sha in enumerate(shas)]
        history("add", *files, f"--repo={repo}", db=self.db)
        with Store(self.db) as store:
            (points,) = store.series().values()
        self.assertEqual([p.commit for p in points], shas)
        steps = changes([p.value for p in points], min_confidence=0.9,
                        commits=[p.commit for p in points])
        self.assertEqual([(c.before, c.after) for c in steps], [(shas[3], shas[4])])
        self.assertAlmostEqual(steps[0].size, 0.3)

    def test_a_commit_resolved_elsewhere_is_one_point(self):
        # One machine's run was added where the commit resolved, another's
        # where it did not (a clone without it): both are that commit's.
        repo = os.path.join(self.tmp, "repo")
        shas = throwaway_repo(repo, [1, 1, 1])
        name = "A/nano/cpu/forward/fp32"
        files = [write(os.path.join(self.tmp, f"{i}.json"),
                       result_doc({name: [ms]}, commit=sha[:12]))
                 for i, (sha, ms) in enumerate(zip(shas, (1.0, 2.0, 2.0)))]
        history("add", *files, f"--repo={repo}", db=self.db)
        late = write(os.path.join(self.tmp, "late.json"),
                     result_doc({name: [1.2]}, commit=shas[0][:12] + "-dirty",
                                date="2027-01-01T00:00:00+00:00"))
        again = write(os.path.join(self.tmp, "again.json"),
                      result_doc({name: [1.2]}, commit=shas[0][:12],
                                 date="2027-01-01T00:00:00+00:00"))
        history("add", late, again, f"--repo={self.tmp}", db=self.db)
        with Store(self.db) as store:
            (points,) = store.series().values()
            with_dirty = list(store.series(dirty=True).values())[0]
        self.assertEqual([p.commit for p in points], shas)
        self.assertEqual([sorted(p.run_values) for p in points],
                         [[1e-3, 1.2e-3], [2e-3], [2e-3]])
        self.assertEqual([p.commit for p in with_dirty],
                         [shas[0], shas[0] + "-dirty", shas[1], shas[2]])

    def test_a_merged_files_date_is_its_first_runs(self):
        # tools/sweep and tools/abtest keep each bench process's date in its
        # entries (they differ); the run is dated by the first of them, and
        # where its commit cannot be resolved that date orders it.
        name = "A/nano/cpu/forward/fp32"
        early = write(os.path.join(self.tmp, "early.json"),
                      result_doc({name: [1.0]}, commit="aaaaaaa"))
        doc = result_doc({name: [2.0], "B/nano/cpu/forward/fp32": [3.0]}, commit="bbbbbbb")
        del doc["context"]["date"]
        for i, entry in enumerate(doc["benchmarks"]):
            entry["context"] = {"date": f"2026-11-26T1{2 - i}:00:00+00:00", "load_avg": [i]}
        merged = write(os.path.join(self.tmp, "merged.json"), doc)
        history("add", merged, early, f"--repo={self.tmp}", db=self.db)
        with Store(self.db) as store:
            dates = {r["commit"]: r["date"] for r in store.runs()}
            points = store.series()
        self.assertEqual(dates, {"aaaaaaa": CONTEXT["date"],
                                 "bbbbbbb": "2026-11-26T11:00:00+00:00"})
        series = [pts for (fp, n), pts in points.items() if n == name][0]
        self.assertEqual([p.commit for p in series], ["aaaaaaa", "bbbbbbb"])
        # A directory of runs (the report's history) is in the same order.
        from ltb.history.runs import history_runs
        runs, _ = history_runs(self.tmp)
        self.assertEqual([label.split()[-1] for label, _ in runs], ["early.json", "merged.json"])

    def test_a_directory_of_runs_is_in_the_order_they_ran_across_utc_offsets(self):
        # Autumn's daylight saving change: 02:30+02:00 ran 40 minutes before
        # 02:10+01:00, though its text sorts after it.
        name = "A/nano/cpu/forward/fp32"
        for path, date in (("first.json", "2026-10-25T02:30:00+02:00"),
                           ("second.json", "2026-10-25T02:10:00+01:00")):
            write(os.path.join(self.tmp, path), result_doc({name: [1.0]}, date=date))
        from ltb.history.runs import history_runs
        runs, _ = history_runs(self.tmp)
        self.assertEqual([label.split()[-1] for label, _ in runs], ["first.json", "second.json"])

    def test_a_skipped_benchmark_is_no_time_of_zero(self):
        # Google Benchmark 1.8 reports SkipWithMessage as "skipped" with
        # times of 0: stored as a time, it would be a point of 0 s, and a
        # change to it of -100% (its log is no number).
        name, skipped = "MLP/nano/cpu/forward/fp32", "Ops/add/1M/cuda/fp32"
        files = []
        for i in range(6):
            doc = result_doc({name: [1.0], skipped: [1.0]}, commit=f"{i + 1:07x}",
                             date=f"2026-11-25T10:{i:02d}:00+00:00")
            if i >= 3:
                doc["benchmarks"][1].update(real_time=0, cpu_time=0, skipped=True,
                                            skip_message="no CUDA device")
                del doc["benchmarks"][1]["tokens/s"]
            files.append(write(os.path.join(self.tmp, f"{i}.json"), doc))
        history("add", *files, db=self.db)
        with Store(self.db) as store:
            series = store.series()
            last = store.results(store.runs()[-1]["run_id"])
        self.assertEqual(sorted(len(points) for points in series.values()), [3, 6])
        self.assertEqual(last[skipped], [(None, "skipped: no CUDA device", {})])
        self.assertEqual(history("changes", db=self.db).returncode, 0)

    def test_a_field_that_is_not_a_number_is_refused_not_stored_as_one(self):
        # A time of true would be stored as 1 ms, a counter of "fast" dropped
        # without a word, iterations of "abc" or a repetition_index of null
        # would stop the add with a traceback: each is refused in one sentence.
        cases = {"real_time": True, "cpu_time": "2", "iterations": "abc", "tokens/s": "fast",
                 "repetition_index": None}
        for field, value in cases.items():
            doc = result_doc({"A/nano/cpu/forward/fp32": [1.0, 1.2]})
            doc["benchmarks"][1][field] = value
            bad = write(os.path.join(self.tmp, "bad.json"), doc)
            run = history("add", bad, db=self.db, check=False)
            self.assertEqual(run.returncode, 2, field + run.stdout + run.stderr)
            self.assertNotIn("Traceback", run.stderr)
            self.assertIn(f"bad.json: benchmark entry 1 is not one Google Benchmark writes "
                          f"(A/nano/cpu/forward/fp32/manual_time: its {field} is not a",
                          run.stderr)
            self.assertIn("nothing was added", run.stderr)
            self.assertEqual(self.count("runs"), 0, field)

    def test_a_file_of_aggregates_only_is_refused(self):
        # bench --benchmark_display_aggregates_only --benchmark_format=json
        # prints mean, median, stddev and cv, no repetition: nothing to store.
        doc = result_doc({"A/nano/cpu/forward/fp32": [1.0, 1.2, 1.1]})
        doc["benchmarks"] = [e for e in doc["benchmarks"] if e["run_type"] == "aggregate"]
        for e in doc["benchmarks"]:
            e["run_name"] = "A/nano/cpu/forward/fp32/manual_time"
        only = write(os.path.join(self.tmp, "agg.json"), doc)
        run = history("add", only, db=self.db, check=False)
        self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
        self.assertIn("agg.json: A/nano/cpu/forward/fp32 has only aggregates", run.stderr)
        self.assertIn("--benchmark_display_aggregates_only", run.stderr)
        self.assertEqual(self.count("runs"), 0)

    def test_export_is_pytorchs_v3_format(self):
        name = "GPT2/nano/cpu/train_step/batch:2/seq:64/bf16"
        f = write(os.path.join(self.tmp, "a.json"), result_doc({name: [4.0, 5.0]}))
        history("add", f, db=self.db)
        out = os.path.join(self.tmp, "v3.json")
        history("export", f"--out={out}", db=self.db)
        with open(out) as fh:
            records = json.load(fh)
        by_metric = {r["metric"]["name"]: r for r in records}
        self.assertEqual(set(by_metric), {"step_time_ms", "tokens_per_sec"})
        step = by_metric["step_time_ms"]
        self.assertEqual(step["metric"]["benchmark_values"], [4.0, 5.0])
        self.assertEqual(by_metric["tokens_per_sec"]["metric"]["benchmark_values"], [250.0, 200.0])
        self.assertEqual(step["benchmark"]["name"], "libtorch-bench")
        self.assertEqual(step["benchmark"]["mode"], "training")
        self.assertEqual(step["benchmark"]["dtype"], "bf16")
        self.assertEqual(step["benchmark"]["extra_info"]["device"], "cpu")
        self.assertEqual(step["model"]["name"], "GPT2/nano")
        self.assertEqual(step["runners"][0]["cpu_info"], "Zen 4")
        self.assertEqual(step["dependencies"]["pytorch"]["version"], "2.15.0")
        for record in records:
            self.assertEqual(set(record) - {"timestamp"},
                             {"benchmark", "model", "metric", "runners", "dependencies"})
        # Quantised weights are in the dtype: fp32/int8 and fp32 are not one.
        quantised = "GPT2/nano/cpu/generate/batch:1/prompt:8/new:4/fp32/int8"
        f = write(os.path.join(self.tmp, "q.json"),
                  result_doc({quantised: [1.0], quantised.replace("/int8", ""): [2.0]}))
        history("add", f, db=self.db)
        history("export", f"--out={out}", db=self.db)
        with open(out) as fh:
            dtypes = {r["benchmark"]["extra_info"]["suite_name"]: r["benchmark"]["dtype"]
                      for r in json.load(fh)}
        self.assertEqual(dtypes[quantised], "fp32/int8")
        self.assertEqual(dtypes[quantised.replace("/int8", "")], "fp32")
        missing = history("export", "--run=ffff", db=self.db, check=False)
        self.assertEqual(missing.returncode, 2)
        self.assertIn("no run id starts with ffff", missing.stderr)


def synthetic(n, at, size, cv, rng, outlier=None):
    """n step times (s) with lognormal noise of sd cv, times 1+size from
    index `at` on, and one run `outlier` times slower at a random point."""
    values = [1e-3 * math.exp(rng.gauss(0, cv)) * (1 + size if i >= at else 1) for i in range(n)]
    if outlier:
        values[rng.randrange(n)] *= outlier
    return values


def detection_rates(sizes, cv, trials, seed=7, n=40, at=24):
    """(false alarms on noise alone, false alarms with one slow run, {size:
    share of steps found within one commit of where they are})."""
    rng = random.Random(seed)
    noise = sum(bool(changes(synthetic(n, n, 0, cv, rng))) for _ in range(trials))
    lone = sum(bool(changes(synthetic(n, n, 0, cv, rng, outlier=1.5)))
               for _ in range(trials))
    found = {}
    for size in sizes:
        hits = 0
        for _ in range(trials):
            steps = changes(synthetic(n, at, size, cv, rng))
            hits += any(abs(c.index - at) <= 1 for c in steps)
        found[size] = hits / trials
    return noise / trials, lone / trials, found


class ChangesTest(unittest.TestCase):
    def test_a_step_is_found_at_its_commit_with_its_size(self):
        rng = random.Random(3)
        values = synthetic(30, 18, 0.10, 0.01, rng)
        commits = [f"c{i}" for i in range(30)]
        steps = changes(values, commits=commits)
        self.assertEqual(len(steps), 1)
        self.assertEqual((steps[0].index, steps[0].before, steps[0].after), (18, "c17", "c18"))
        self.assertAlmostEqual(steps[0].size, 0.10, delta=0.02)
        self.assertGreater(steps[0].confidence, 0.999)

    def test_one_slow_run_is_no_step_anywhere_in_the_series(self):
        for i in range(20):
            values = [1e-3] * 20
            values[i] = 3e-3
            self.assertEqual(changes(values), [], i)
        # Two slow runs in a row at the end are a step (the level holds).
        values = [1e-3] * 18 + [1.3e-3] * 2
        self.assertEqual([c.index for c in changes(values, min_confidence=0.9)], [18])

    def test_a_step_back_is_a_second_change(self):
        values = [1e-3] * 12 + [1.2e-3] * 8 + [1e-3] * 10
        steps = changes(values)
        self.assertEqual([(c.index, round(c.size, 3)) for c in steps], [(12, 0.2), (20, -0.167)])

    def test_detection_rates_on_synthetic_series(self):
        # The figures docs/tools.md reports come from this generator (more
        # trials there); here fewer, with bounds they clear by a margin.
        for cv in (0.01, 0.02):
            noise, lone, found = detection_rates((0.02, 0.05, 0.10, 0.30), cv, trials=40)
            self.assertLessEqual(noise, 0.05, cv)
            self.assertLessEqual(lone, 0.05, cv)
            self.assertGreaterEqual(found[0.10], 0.9, (cv, found))
            self.assertGreaterEqual(found[0.30], 0.95, (cv, found))
            if cv == 0.01:
                self.assertGreaterEqual(found[0.05], 0.9, found)

    def test_changes_over_commits_of_a_repository(self):
        tmp = tempfile.mkdtemp(prefix="ltb-history-")
        self.addCleanup(shutil.rmtree, tmp)
        repo = os.path.join(tmp, "repo")
        shas = throwaway_repo(repo, [1] * 16)
        db = os.path.join(tmp, "h.sqlite")
        rng = random.Random(5)
        files = []
        name = "Transformer/nano/cpu/forward/batch:2/fp32"
        for i, sha in enumerate(shas):
            ms = 2.0 * (1.25 if i >= 9 else 1.0) * (1.5 if i == 4 else 1.0)  # one slow run
            reps = [ms * math.exp(rng.gauss(0, 0.01)) for _ in range(3)]
            files.append(write(os.path.join(tmp, f"{i}.json"), result_doc({name: reps}, commit=sha[:12])))
        history("add", *files, f"--repo={repo}", db=db)
        run = history("changes", db=db)
        self.assertIn(f"{shas[8][:12]}..{shas[9][:12]}", run.stdout)
        self.assertIn("+25.", run.stdout)
        self.assertIn("1 change(s) in 1 series", run.stdout)
        as_json = json.loads(history("changes", "--json", db=db).stdout)
        self.assertEqual(as_json[0]["changes"][0]["bad"], shas[9])
        self.assertEqual(as_json[0]["changes"][0]["good"], shas[8])
        failing = history("changes", "--fail", db=db, check=False)
        self.assertEqual(failing.returncode, 1)
        none = history("changes", "--benchmark_filter=^GPT2", "--fail", db=db)
        self.assertIn("0 change(s) in 0 series", none.stdout)
        # The HTML report reads the store: the series with its change marked.
        from ltb.report.cli import main as report
        page = run_in_process("report", report, "--format=html", f"--db={db}")
        self.assertEqual(page.returncode, 0, page.stderr)
        self.assertIn('id="store"', page.stdout)
        data = json.loads(page.stdout.split('id="ltb-data">')[1].split("</script>")[0])
        charts = [c for c in data["charts"] if c["section"] == "store"]
        self.assertEqual(len(charts), 1)
        points = charts[0]["config"]["data"]["datasets"][0]
        self.assertEqual(len(points["data"]), 16)
        marked = [i for i, r in enumerate(points["pointRadius"]) if r > 3]
        self.assertEqual(marked, [9])
        self.assertIn(shas[9][:12], page.stdout)  # the open changes' table
        # Drawn in headless Chromium where it is installed (tools/setup does).
        why = browser.unavailable()
        if why is None:
            seen = browser.open_page(write_text(os.path.join(tmp, "store.html"), page.stdout))
            self.assertEqual(seen["console_errors"], [])
            self.assertEqual(seen["requests"], [seen["url"]])
            self.assertEqual(seen["drawn"]["sections"], {"store": 16})
        else:
            print(f"the store page was not drawn: headless Chromium: {why}", file=sys.stderr)

    def test_a_reader_that_stopped_reading_does_not_change_changes_fail(self):
        """changes --fail piped into a reader that closed its end (head,
        under pipefail) still exits 1 on an open slowdown."""
        tmp = tempfile.mkdtemp(prefix="ltb-history-")
        self.addCleanup(shutil.rmtree, tmp)
        repo = os.path.join(tmp, "repo")
        shas = throwaway_repo(repo, [1] * 12)
        db = os.path.join(tmp, "h.sqlite")
        rng = random.Random(3)
        name = "Transformer/nano/cpu/forward/batch:2/fp32"
        files = [write(os.path.join(tmp, f"{i}.json"), result_doc(
            {name: [2.0 * (1.25 if i >= 7 else 1.0) * math.exp(rng.gauss(0, 0.01))
                    for _ in range(3)]}, commit=sha[:12])) for i, sha in enumerate(shas)]
        history("add", *files, f"--repo={repo}", db=db)
        for extra in ((), ("--json",)):
            read, written = os.pipe()
            os.close(read)  # no reader: the first write fails
            try:
                proc = subprocess.run([sys.executable, os.path.join(TOOLS, "history"),
                                       "changes", "--fail", *extra, f"--db={db}"],
                                      stdout=written, stderr=subprocess.PIPE, text=True,
                                      timeout=300)
            finally:
                os.close(written)
            self.assertEqual(proc.returncode, 1, proc.stderr)


def _pg_binaries():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def _psycopg():
    try:
        import psycopg  # noqa: F401
        return None
    except ImportError:
        return "no psycopg (tools/requirements.txt): run tools/setup"


PG_BIN = _pg_binaries()


@unittest.skipUnless(PG_BIN, "no PostgreSQL server binaries (Debian's postgresql package)")
class PostgreSQLTest(unittest.TestCase):
    """The same store on a real PostgreSQL, started here in a scratch
    directory on a free port (as the postgres user when running as root)."""

    @classmethod
    def setUpClass(cls):
        why = _psycopg()
        if why:
            raise unittest.SkipTest(why)
        cls.tmp = tempfile.mkdtemp(prefix="ltb-pg-")
        os.chmod(cls.tmp, 0o777)
        data = os.path.join(cls.tmp, "data")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            cls.port = s.getsockname()[1]
        prefix = []
        if os.geteuid() == 0:
            prefix = ["runuser", "-u", "postgres", "--"]
        init = subprocess.run(prefix + [os.path.join(PG_BIN, "initdb"), "-D", data, "-A", "trust",
                                        "-U", "ltb", "--no-sync"], capture_output=True, text=True)
        if init.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise unittest.SkipTest("PostgreSQL cannot start here: initdb: "
                                    + init.stderr.strip().splitlines()[-1])
        cls.pg_ctl = prefix + [os.path.join(PG_BIN, "pg_ctl"), "-D", data]
        start = subprocess.run(cls.pg_ctl + ["-w", "-l", os.path.join(cls.tmp, "log"), "-o",
                                             f"-p {cls.port} -k {cls.tmp} -h 127.0.0.1", "start"],
                               capture_output=True, text=True, timeout=120)
        if start.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise unittest.SkipTest("PostgreSQL cannot start here: " + start.stderr.strip())
        cls.url = f"postgresql://ltb@127.0.0.1:{cls.port}/postgres"

    @classmethod
    def tearDownClass(cls):
        subprocess.run(cls.pg_ctl + ["-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_store_works_the_same_on_postgresql(self):
        work = tempfile.mkdtemp(prefix="ltb-pg-files-")
        self.addCleanup(shutil.rmtree, work)
        name = "MLP/nano/cpu/forward/fp32"
        files = [[write(os.path.join(work, f"w{w}-{i}.json"),
                        result_doc({name: [1.0 if i < 6 else 1.3]},
                                   date=f"2026-11-25T10:{i:02d}:{w:02d}+00:00"))
                  for i in range(10)] for w in range(2)]
        shared = files[0][0]
        self.assertEqual(add_at_once(self, self.url, [mine + [shared] for mine in files]), 20)
        again = history("add", shared, db=self.url)
        self.assertIn("already there", again.stdout)
        cut = os.path.join(work, "cut.json")
        with open(shared) as f, open(cut, "w") as g:
            g.write(f.read()[:40])
        refused = history("add", cut, db=self.url, check=False)
        self.assertEqual(refused.returncode, 2)
        with Store(self.url) as store:
            self.assertEqual(store.version(), SCHEMA_VERSION)
            self.assertEqual(len(store.runs()), 20)
            series = store.series()
        self.assertEqual(len(series), 1)
        points = list(series.values())[0]
        self.assertEqual(len(points), 1)  # every run is of the same (unknown) commit
        self.assertEqual(len(points[0].run_values), 20)
        exported = json.loads(history("export", db=self.url).stdout)
        self.assertEqual(len(exported), 40)  # 20 runs x (step time, tokens/s)

    def test_a_store_of_schema_2_holding_runs_is_migrated_as_a_fresh_store_holds_them(self):
        work = tempfile.mkdtemp(prefix="ltb-pg-files-")
        self.addCleanup(shutil.rmtree, work)
        admin = connect(self.url)
        for db in ("schema2", "fresh"):
            admin.execute(f"CREATE DATABASE {db}")
        admin.close()
        base = self.url.rsplit("/", 1)[0]
        check_schema_2_migration(self, f"{base}/schema2", f"{base}/fresh", work)

    def test_a_store_of_schema_3_holding_pinned_runs_splits_them_off_as_a_fresh_store_does(self):
        work = tempfile.mkdtemp(prefix="ltb-pg-files-")
        self.addCleanup(shutil.rmtree, work)
        admin = connect(self.url)
        for db in ("schema3", "fresh3"):
            admin.execute(f"CREATE DATABASE {db}")
        admin.close()
        base = self.url.rsplit("/", 1)[0]
        check_schema_3_migration(self, f"{base}/schema3", f"{base}/fresh3", work)


@unittest.skipUnless(os.environ.get("LTB_BENCH"), "LTB_BENCH is not set (ctest sets it)")
class BenchHistoryTest(unittest.TestCase):
    def test_tools_bench_history_records_the_run(self):
        tmp = tempfile.mkdtemp(prefix="ltb-bench-history-")
        self.addCleanup(shutil.rmtree, tmp)
        db, out = os.path.join(tmp, "h.sqlite"), os.path.join(tmp, "run.json")
        # LTB_BENCH: tools/bench runs that binary and builds nothing, so that
        # this test never relinks the bench other tests are running.
        run = subprocess.run([os.path.join(TOOLS, "bench"), f"--history={db}",
                              "--benchmark_filter=Ops/add/.*/cpu/fp32", "--devices=cpu",
                              "--benchmark_min_time=0.01", "--warmup_s=0",
                              "--peak_flops=1e12", "--peak_bandwidth=1e10",
                              f"--benchmark_out={out}"],
                             capture_output=True, text=True, timeout=600,
                             env=dict(os.environ))
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        self.assertIn("added: " + out, run.stderr)
        with open(out) as f:
            names = {base_name(b) for b in json.load(f)["benchmarks"]}
        with Store(db) as store:
            runs = store.runs()
            self.assertEqual(len(runs), 1)
            self.assertEqual(set(store.results(runs[0]["run_id"])), names)
        self.assertTrue(names)


FAKE_BENCH = textwrap.dedent("""\
    #!/usr/bin/env python3
    # A stand-in bench: each repetition's step time is speed.txt's, in ms.
    import json, sys
    args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    ms = float(open("speed.txt").read())
    reps = int(args["--benchmark_repetitions"])
    name = args["--benchmark_filter"]
    entries = [{"name": name + "/manual_time", "run_name": name + "/manual_time",
                "run_type": "iteration", "repetitions": reps, "repetition_index": i,
                "iterations": 10, "real_time": ms * (1 + 0.002 * i), "time_unit": "ms"}
               for i in range(reps)]
    json.dump({"context": {"suite_commit": "x"}, "benchmarks": entries},
              open(args["--benchmark_out"], "w"))
    """)


class BisectTest(unittest.TestCase):
    def test_a_planted_slowdown_is_bisected_to_its_commit(self):
        tmp = tempfile.mkdtemp(prefix="ltb-bisect-")
        self.addCleanup(shutil.rmtree, tmp)
        repo = os.path.join(tmp, "repo")
        speeds = [10, 10, 10.2, 9.9, 10, 10.1, 13, 13, 12.9, 13, 13.1, 13]  # slower from 6 on
        shas = throwaway_repo(repo, speeds)
        worktree = os.path.join(tmp, "worktree")
        build_log = os.path.join(tmp, "builds")
        # "Building" installs the stand-in bench and counts the builds.
        fake = write_text(os.path.join(tmp, "fake_bench.py"), FAKE_BENCH)
        build = f"cp {fake} bench.py && chmod +x bench.py && git rev-parse HEAD >> {build_log}"
        run = subprocess.run([sys.executable, BISECT, f"--good={shas[0]}", f"--bad={shas[-1]}",
                              "--benchmark_filter=Toy/nano/cpu/forward/fp32", f"--repo={repo}",
                              f"--worktree={worktree}", f"--build={build}", "--bench=bench.py",
                              "--repetitions=5"],
                             capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn(f"first bad commit: {shas[6]}", run.stdout)
        self.assertIn("commit 6", run.stdout)
        with open(build_log) as f:
            built = f.read().split()
        # good, bad, then a binary search of the 11 commits between: few builds.
        self.assertEqual(built[:2], [shas[0], shas[-1]])
        self.assertLessEqual(len(built), 2 + 5)
        # The repository's own checkout was not touched.
        self.assertEqual(git(repo, "rev-parse", "HEAD"), shas[-1])
        self.assertEqual(git(repo, "status", "--porcelain"), "")
        # No slowdown between two fast commits: nothing to search.
        none = subprocess.run([sys.executable, BISECT, f"--good={shas[0]}", f"--bad={shas[5]}",
                               "--benchmark_filter=Toy/nano/cpu/forward/fp32", f"--repo={repo}",
                               f"--worktree={worktree}", f"--build={build}", "--bench=bench.py"],
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(none.returncode, 1, none.stdout + none.stderr)
        self.assertIn("is not slower than", none.stdout)
        reversed_ = subprocess.run([sys.executable, BISECT, f"--good={shas[5]}",
                                    f"--bad={shas[0]}", "--benchmark_filter=x",
                                    f"--repo={repo}", f"--worktree={worktree}"],
                                   capture_output=True, text=True, timeout=600)
        self.assertEqual(reversed_.returncode, 2)
        self.assertIn("is not an ancestor of", reversed_.stderr)


if __name__ == "__main__":
    unittest.main()
