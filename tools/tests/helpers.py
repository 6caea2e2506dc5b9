"""Fixtures shared by the tools' tests: bench-like JSON entries and files,
and running a tool as a user would."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TOOLS)
COMPARE_PY = os.environ.get("LTB_COMPARE_PY", "/usr/share/benchmark/compare.py")


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

    def assertExit(self, proc, code):
        self.assertEqual(proc.returncode, code,
                         f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")

    def bad_inputs(self):
        """Paths of a non-JSON file, a JSON that is no benchmark output, and a
        file that does not exist."""
        return [self.write("bad.json", "not json"),
                self.write("nobench.json", {"no": "benchmarks"}),
                os.path.join(self.tmp, "missing.json")]
