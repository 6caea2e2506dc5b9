"""Fixtures shared by the tools' tests: bench-like JSON entries and files,
running a tool as a user would (or its main in the test's process), the
built bench binary (a stable copy of it) and a fake one."""
import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TOOLS)
COMPARE_PY = os.environ.get("LTB_COMPARE_PY", "/usr/share/benchmark/compare.py")
FAKE_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_bench.py")
# bench's test-only benchmarks (LTB_SELFTEST=1): ok is instant, slow takes
# 0.2 s a step, abort calls abort(), spin busy-waits 2 ms times
# LTB_SELFTEST_SLOWDOWN, kill SIGKILLs itself.
SELFTEST = {"LTB_SELFTEST": "1"}
SELFTEST_KINDS = ("ok", "slow", "abort", "spin", "kill")


def selftest(kind):
    return f"Selftest/{kind}/cpu/step/fp32/manual_time"


def built_bench():
    build = os.environ.get("LTB_BUILD_DIR") or os.path.join(REPO, "build")
    return os.environ.get("LTB_BENCH") or os.path.join(build, "bench", "bench")


def built_unit_tests():
    build = os.environ.get("LTB_BUILD_DIR") or os.path.join(REPO, "build")
    return os.environ.get("LTB_UNIT_TESTS") or os.path.join(build, "test", "unit_tests")


def stable_copy(directory):
    """A copy of the built bench that lists every Selftest benchmark, so that
    a rebuild during the tests cannot change it; None when there is none."""
    source, absent = built_bench(), 0
    for _ in range(30):  # a rebuild may be relinking it right now
        if os.access(source, os.X_OK) and os.path.getsize(source) > 0:
            copy = os.path.join(directory, "bench")
            shutil.copy2(source, copy)
            proc = subprocess.run([copy, "--benchmark_filter=Selftest", "--benchmark_list_tests"],
                                  capture_output=True, text=True, env=dict(os.environ, **SELFTEST))
            if proc.returncode == 0 and all(selftest(k) in proc.stdout for k in SELFTEST_KINDS):
                return copy
        elif not os.path.exists(source):
            absent += 1
            if absent == 3:  # not being relinked: not built
                return None
        time.sleep(2)
    return None


def bench_wrapper(path, command, **env):
    """An executable script at path that sets env and execs command with its
    arguments: a bench binary to hand to a tool."""
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in env.items())
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\n{exports}exec {command} "$@"\n')
    os.chmod(path, 0o755)
    return path


def fake_bench(path, **env):
    """The fake bench (fake_bench.py) as an executable at path."""
    return bench_wrapper(path, f"{shlex.quote(sys.executable)} {shlex.quote(FAKE_BENCH)}", **env)


def entry(name, ms, rep=0, reps=1, error=None, **counters):
    """One measured repetition of a benchmark, as bench writes it; counter
    names use _per_s for /s (tokens_per_s -> tokens/s)."""
    e = {"name": name + "/manual_time", "run_name": name + "/manual_time",
         "run_type": "iteration", "repetitions": reps, "repetition_index": rep,
         "threads": 1, "iterations": 10, "real_time": ms, "cpu_time": ms, "time_unit": "ms"}
    e.update({k.replace("_per_s", "/s"): v for k, v in counters.items()})
    if error:
        e.update(error_occurred=True, error_message=error)
    return e


def repeated(name, times_ms, **counters):
    """Repetitions with these times; counters given as lists vary with them,
    others repeat. Ends with the aggregates Google Benchmark adds."""
    entries = []
    for i, ms in enumerate(times_ms):
        values = {k: v[i] if isinstance(v, list) else v for k, v in counters.items()}
        entries.append(entry(name, ms, rep=i, reps=len(times_ms), **values))
    if len(times_ms) > 1:
        for agg in ("mean", "median", "stddev", "cv"):
            entries.append(dict(entries[0], name=f"{name}/manual_time_{agg}",
                                run_type="aggregate", aggregate_name=agg, real_time=1e9))
    return entries


def doc(*entry_lists, **context):
    return {"context": dict({"libtorch_version": "2.15.0"}, **context),
            "benchmarks": [e for group in entry_lists for e in
                           (group if isinstance(group, list) else [group])]}


def run_in_process(tool, main, *args, env=None):
    """What subprocess.run of tools/TOOL gives (returncode, stdout, stderr),
    of the tool's main() (what its launcher calls) run in this process with
    args as its command line and env added to the environment (which the
    processes it starts inherit): no Python start-up, and the modules it
    loads (SciPy takes seconds) loaded once for the tests that run it. Its
    signal handlers are put back after it."""
    out, err = io.StringIO(), io.StringIO()
    argv, environ = sys.argv, dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    sys.argv = [os.path.join(TOOLS, tool), *args]
    os.environ.update({k: str(v) for k, v in (env or {}).items()})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
        for s, handler in handlers.items():
            signal.signal(s, handler)
    return subprocess.CompletedProcess([tool, *args], code, out.getvalue(), err.getvalue())


class ToolTest(unittest.TestCase):
    """A temporary directory to write fixtures into, and a tool runner."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, content):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def run_tool(self, tool, *args, env=None, timeout=300):
        return subprocess.run([sys.executable, os.path.join(TOOLS, tool), *args],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **(env or {})))

    def run_main(self, tool, main, *args, env=None):
        """run_in_process: a tool's main in this process."""
        return run_in_process(tool, main, *args, env=env)

    def assertComparePyReads(self, baseline, contender, *expected):
        """compare.py reads the two result files, and its output shows the
        expected strings (where compare.py is installed)."""
        if not os.path.exists(COMPARE_PY):
            return
        proc = subprocess.run([sys.executable, COMPARE_PY, "benchmarks", baseline, contender],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for text in expected:
            self.assertIn(text, proc.stdout)

    def assertExit(self, proc, code):
        self.assertEqual(proc.returncode, code,
                         f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")

    def bad_inputs(self):
        """Paths of a non-JSON file, a JSON that is no benchmark output, and a
        file that does not exist."""
        return [self.write("bad.json", "not json"),
                self.write("nobench.json", {"no": "benchmarks"}),
                os.path.join(self.tmp, "missing.json")]


class RealBenchTest(ToolTest):
    """Tests that run the built bench (a stable copy, self.bench), skipped
    when there is none."""

    @classmethod
    def setUpClass(cls):
        cls.bench_dir = tempfile.TemporaryDirectory()
        cls.bench = stable_copy(cls.bench_dir.name)
        if cls.bench is None:
            cls.bench_dir.cleanup()
            raise unittest.SkipTest(f"no bench binary with the Selftest benchmarks at "
                                    f"{built_bench()} (set LTB_BENCH or LTB_BUILD_DIR)")

    @classmethod
    def tearDownClass(cls):
        cls.bench_dir.cleanup()
