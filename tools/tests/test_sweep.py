"""tools/sweep against the real bench binary and its test-only Selftest
benchmarks (LTB_SELFTEST=1): ok is instant, slow takes 0.2 s a step, abort
calls abort()."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from helpers import COMPARE_PY, REPO, TOOLS, ToolTest

FAST = ["--benchmark_min_time=0.01", "--warmup_s=0"]
OK = "Selftest/ok/cpu/step/fp32/manual_time"
SLOW = "Selftest/slow/cpu/step/fp32/manual_time"
ABORT = "Selftest/abort/cpu/step/fp32/manual_time"
SELFTEST = {"LTB_SELFTEST": "1"}


def built_bench():
    build = os.environ.get("LTB_BUILD_DIR") or os.path.join(REPO, "build")
    return os.environ.get("LTB_BENCH") or os.path.join(build, "bench", "bench")


def stable_copy(directory):
    """A copy of the built bench that lists the Selftest benchmarks, so that
    a rebuild during the tests cannot change it; None when there is none."""
    source = built_bench()
    for _ in range(30):  # a rebuild may be relinking it right now
        if os.access(source, os.X_OK) and os.path.getsize(source) > 0:
            copy = os.path.join(directory, "bench")
            shutil.copy2(source, copy)
            proc = subprocess.run([copy, "--benchmark_filter=Selftest", "--benchmark_list_tests"],
                                  capture_output=True, text=True, env=dict(os.environ, **SELFTEST))
            if proc.returncode == 0 and ABORT in proc.stdout:
                return copy
        time.sleep(2)
    return None


class SweepTest(ToolTest):
    @classmethod
    def setUpClass(cls):
        cls.bench_dir = tempfile.TemporaryDirectory()
        cls.bench = stable_copy(cls.bench_dir.name)
        if cls.bench is None:
            cls.bench_dir.cleanup()
            raise unittest.SkipTest(f"no bench binary with Selftest benchmarks at {built_bench()}")

    @classmethod
    def tearDownClass(cls):
        cls.bench_dir.cleanup()

    def sweep(self, *args, bench=None, journal="j.jsonl"):
        return self.run_tool("sweep", "--bench", bench or self.bench,
                             "--journal", os.path.join(self.tmp, journal), *args, env=SELFTEST)

    def merged(self, path):
        with open(path) as f:
            return json.load(f)

    def journal_names(self, journal="j.jsonl"):
        with open(os.path.join(self.tmp, journal)) as f:
            return [json.loads(line).get("name") for line in f if line.strip()][1:]

    def by_name(self, doc):
        return {e["name"]: e for e in doc["benchmarks"]}

    def test_a_crash_loses_only_that_benchmark(self):
        proc = self.sweep("--benchmark_filter=Selftest/(ok|abort)", *FAST)
        self.assertExit(proc, 0)
        out = proc.stdout.strip()
        self.assertEqual(out, os.path.join(self.tmp, "j.json"))
        self.assertIn("[2/2]", proc.stderr)
        self.assertIn("elapsed", proc.stderr)
        self.assertIn("left", proc.stderr)
        doc = self.merged(out)
        entries = self.by_name(doc)
        self.assertEqual(list(entries), [OK, ABORT])
        self.assertFalse(entries[OK].get("error_occurred"))
        self.assertIn("samples/s", entries[OK])
        self.assertTrue(entries[ABORT]["error_occurred"])
        self.assertIn("SIGABRT", entries[ABORT]["error_message"])
        self.assertEqual(doc["context"]["libtorch_version"].split(".")[0], "2")
        self.assertIn("1 failed", doc["context"]["sweep"])

        # The merged JSON is what compare.py, gate, report and plot read.
        if os.path.exists(COMPARE_PY):
            cmp = subprocess.run([sys.executable, COMPARE_PY, "benchmarks", out, out],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(cmp.returncode, 0, cmp.stderr)
            self.assertIn(OK, cmp.stdout)
        gate = self.run_tool("gate", out, out)
        self.assertExit(gate, 0)
        self.assertIn(f"- `{ABORT.replace('/manual_time', '')}` (baseline): bench was killed by "
                      "SIGABRT", gate.stdout)
        self.assertExit(self.run_tool("report", out), 0)
        self.assertExit(self.run_tool("compare", out, out), 0)

    def test_timeout(self):
        proc = self.sweep("--benchmark_filter=Selftest/slow", *FAST, "--timeout", "0.3")
        self.assertExit(proc, 0)
        entry = self.by_name(self.merged(proc.stdout.strip()))[SLOW]
        self.assertTrue(entry["error_occurred"])
        self.assertEqual(entry["error_message"], "timed out after 0.3 s")

    def test_resume_after_being_killed(self):
        # A wrapper logs every benchmark bench is started for.
        log = os.path.join(self.tmp, "runs.log")
        wrapper = self.write("bench-wrapper", f'#!/bin/sh\necho "$*" >>{log}\nexec {self.bench} "$@"\n')
        os.chmod(wrapper, 0o755)
        args = [sys.executable, os.path.join(TOOLS, "sweep"), "--bench", wrapper,
                "--journal", os.path.join(self.tmp, "j.jsonl"),
                "--benchmark_filter=Selftest/(ok|slow)", *FAST, "--warmup_steps=5"]
        sweep = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=dict(os.environ, **SELFTEST))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "Selftest/slow" not in self.read(log):
            time.sleep(0.02)
        sweep.send_signal(signal.SIGKILL)
        sweep.wait()
        first = self.runs(log)
        self.assertEqual(first, [OK, SLOW])
        done = self.journal_names()
        self.assertEqual(done, [OK])  # slow was still running when the sweep was killed
        with open(os.path.join(self.tmp, "j.jsonl"), "a") as f:
            f.write('{"name": "Selftest/slow/cpu/st')  # a line cut short by a kill

        proc = subprocess.run(args, capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, **SELFTEST))
        self.assertExit(proc, 0)
        self.assertIn("1 of 2 benchmarks already in", proc.stderr)
        self.assertEqual(self.runs(log)[len(first):], [SLOW])
        self.assertEqual(self.journal_names(), [OK, SLOW])
        entries = self.by_name(self.merged(proc.stdout.strip()))
        self.assertEqual(list(entries), [OK, SLOW])
        self.assertFalse(any(e.get("error_occurred") for e in entries.values()))

        # A third run has nothing left to do; --merge-only merges again.
        proc = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, **SELFTEST))
        self.assertExit(proc, 0)
        self.assertEqual(self.runs(log)[len(first) + 1:], [])
        os.remove(proc.stdout.strip())
        proc = self.sweep("--merge-only")
        self.assertExit(proc, 0)
        self.assertEqual(list(self.by_name(self.merged(proc.stdout.strip()))), [OK, SLOW])

    def read(self, path):
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def runs(self, log):
        """The benchmarks bench was started for, in order (not the listing)."""
        names = []
        for line in self.read(log).splitlines():
            for arg in line.split():
                if arg.startswith("--benchmark_filter=^"):
                    names.append(arg[len("--benchmark_filter=^"):-1].replace("\\", ""))
        return names

    def test_interrupted_sweep_keeps_its_journal(self):
        args = [sys.executable, os.path.join(TOOLS, "sweep"), "--bench", self.bench,
                "--journal", os.path.join(self.tmp, "j.jsonl"),
                "--benchmark_filter=Selftest/(ok|slow)", *FAST, "--warmup_steps=5"]
        sweep = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, **SELFTEST))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.journal_names_or_none() != [OK]:
            time.sleep(0.02)
        sweep.send_signal(signal.SIGTERM)
        out, err = sweep.communicate(timeout=60)
        self.assertEqual(sweep.returncode, 130, err)
        self.assertIn("run the same command again to resume", err)
        self.assertEqual(self.journal_names(), [OK])

    def journal_names_or_none(self):
        try:
            return self.journal_names()
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def test_bad_input_exits_2(self):
        proc = self.sweep("--benchmark_filter=Selftest/ok", "--benchmark_out=x.json")
        self.assertExit(proc, 2)
        self.assertIn("--benchmark_out is the sweep's own", proc.stderr)
        proc = self.sweep("--benchmark_filter=Selftest/ok", "--dtype=fp99")
        self.assertExit(proc, 2)
        self.assertIn("bench refused the arguments (exit 2): bench: unknown --dtype 'fp99'",
                      proc.stderr)
        proc = self.sweep("--benchmark_filter=Selftest/ok", bench=os.path.join(self.tmp, "nope"))
        self.assertExit(proc, 2)
        self.assertIn("no bench binary", proc.stderr)
        proc = self.sweep("--merge-only", journal="none.jsonl")
        self.assertExit(proc, 2)
        # A journal belongs to one sweep: other arguments are refused.
        self.assertExit(self.sweep("--benchmark_filter=Selftest/ok", *FAST), 0)
        proc = self.sweep("--benchmark_filter=Selftest/ok", "--benchmark_min_time=0.02")
        self.assertExit(proc, 2)
        self.assertIn("journal of another sweep", proc.stderr)
        self.assertExit(self.sweep("--benchmark_filter=Selftest/ok", "--benchmark_min_time=0.02",
                                   "--fresh"), 0)


if __name__ == "__main__":
    unittest.main()
