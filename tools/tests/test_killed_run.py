"""A run killed with SIGKILL mid-way: the built bench writes each result to
--benchmark_out as it finishes, and every tool reads the file it leaves,
cut short, with the results measured before the kill."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tests.helpers import COMPARE_PY, SELFTEST, TOOLS, stable_copy

# Five quick benchmarks, then Selftest/spin, whose one step busy-waits
# 2 ms x 100000 = 200 s: the run is killed while it waits.
FINISHED = ["Ops/matmul/256x256/cpu/fp32", "Ops/matmul/512x512/cpu/fp32",
            "Transformer/nano/cpu/forward/batch:2/seq:32/fp32",
            "Transformer/nano/cpu/forward/batch:2/seq:64/fp32", "Selftest/ok/cpu/step/fp32"]
FILTER = ("^(Ops/matmul/(256x256|512x512)/cpu/|Transformer/nano/cpu/forward/|"
          "Selftest/(ok|spin)/)")
RECOVERED = (r"the run did not finish \(the file is cut short\): recovered 5 complete "
             r"benchmark entries and its context")


def whole_entries(text):
    """The names of the entries in bench's JSON text whose closing brace is
    written, read without the tools' loader: each entry is `    {` ... `    }`
    at the benchmarks list's depth."""
    return re.findall(r'\n    \{\n      "name": "([^"]+)/manual_time",.*?\n    \}', text, re.S)


class KilledRunTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ltb-killed-")
        bench = stable_copy(cls.tmp)
        if bench is None:
            shutil.rmtree(cls.tmp)
            raise unittest.SkipTest("no built bench (build/bench/bench or LTB_BENCH)")
        cls.out = os.path.join(cls.tmp, "r.json")
        proc = subprocess.Popen(
            [bench, f"--benchmark_filter={FILTER}", "--devices=cpu", "--batch=2",
             "--seq=32,64", "--warmup_s=0", "--benchmark_min_time=0.01", "--peak_flops=1e12",
             "--peak_bandwidth=1e11", f"--benchmark_out={cls.out}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, LTB_SELFTEST_SLOWDOWN="100000", **SELFTEST))
        # The five entries are in the file while Selftest/spin still runs:
        # each was flushed as it finished, not held in a buffer until the end.
        deadline, text = time.monotonic() + 300, ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(cls.out) as f:
                    text = f.read()
            except FileNotFoundError:  # not opened yet
                pass
            if len(whole_entries(text)) >= len(FINISHED):
                break
            time.sleep(0.2)
        running = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        cls.text = text
        cls.problem = None
        if not running:
            cls.problem = f"bench ended before it was killed (exit {proc.returncode}): {err}"
        elif whole_entries(text) != FINISHED:
            cls.problem = (f"the file held {whole_entries(text)} when the run was killed, "
                           f"not {FINISHED} (stderr: {err[-2000:]})")
        with open(cls.out) as f:
            cls.left = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        if self.problem:
            self.fail(self.problem)

    def tool(self, name, *args, expect=0):
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, name), *args],
                              capture_output=True, text=True, timeout=300, cwd=self.tmp)
        self.assertEqual(proc.returncode, expect, f"{name}: {proc.stdout}\n{proc.stderr}")
        # One line a file read, naming it.
        lines = [line for line in proc.stderr.splitlines() if "did not finish" in line]
        self.assertEqual(len(lines), args.count(self.out), proc.stderr)
        for line in lines:
            self.assertRegex(line, f"^{name}: {re.escape(self.out)}: {RECOVERED}$")
        return proc

    def test_the_file_is_cut_short_after_the_finished_entries(self):
        with self.assertRaises(json.JSONDecodeError):
            json.loads(self.left)
        self.assertEqual(whole_entries(self.left), FINISHED)
        self.assertIn('"context_at_start"', self.left)
        self.assertNotIn("Selftest/spin", self.left)

    def test_report(self):
        out = self.tool("report", self.out).stdout
        for name in FINISHED:
            self.assertIn(name.split("/")[0], out)
        self.assertIn("Transformer/nano", out)
        self.assertIn("256x256", out)
        self.assertNotIn("Selftest/spin", out)

    def test_gate_and_compare(self):
        out = self.tool("gate", self.out, self.out).stdout
        for name in FINISHED:
            self.assertIn(name, out)
        if os.path.exists(COMPARE_PY):
            out = self.tool("compare", self.out, self.out).stdout
            for name in FINISHED:
                self.assertIn(name, out)

    def test_history(self):
        db = os.path.join(self.tmp, "history.sqlite")
        self.assertIn("added", self.tool("history", "add", self.out, f"--db={db}").stdout)
        runs = self.tool("history", "runs", f"--db={db}").stdout
        self.assertRegex(runs, r"\| 5 \|")  # the run's benchmarks

    def test_plot(self):
        plots = os.path.join(self.tmp, "plots")
        out = self.tool("plot", self.out, "--out", plots).stdout
        chart = os.path.join(plots, "time_per_token-Transformer.png")
        self.assertIn(chart, out)
        with open(chart, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_speedup(self):
        # The same benchmarks on a second device at twice the rate: the
        # speedup is the cut file's rate against that one.
        with open(self.out) as f:
            text = f.read()
        start = text.index('"benchmarks": [') + len('"benchmarks": [')
        twin = []
        for name in FINISHED:
            i = text.index(f'"name": "{name}/manual_time"', start)
            entry, _ = json.JSONDecoder().raw_decode(text, text.rindex("{", 0, i))
            if "tokens/s" in entry:
                entry = json.loads(json.dumps(entry).replace("/cpu/", "/cuda/"))
                entry["tokens/s"] *= 2
                twin.append(entry)
        self.assertEqual(len(twin), 2)
        other = os.path.join(self.tmp, "cuda.json")
        with open(other, "w") as f:
            json.dump({"context": {}, "benchmarks": twin}, f)
        out = self.tool("speedup", self.out, other).stdout
        self.assertEqual(out.count("2.00x"), 2, out)


if __name__ == "__main__":
    unittest.main()
