"""tools/bisect's judging of one step and its measuring, on fixture runs
(test_history.py bisects a throwaway repository end to end)."""
import contextlib
import io
import os
import subprocess
import sys

from tests.helpers import ToolTest, doc, entry, repeated
from ltb.commands import bisect

FWD = "Transformer/nano/cpu/forward/batch:2/seq:32/fp32"


class BisectStepTest(ToolTest):
    def judge(self, good, this):
        state = {"good_run": self.write("good.json", good), "threshold": 0.07, "alpha": 0.05}
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            verdict = bisect.verdict(state, self.write("this.json", this))
        return verdict, err.getvalue()

    def test_a_step_that_lost_a_throughput_is_judged_by_its_time(self):
        # The step's bench reports no tokens/s (a NaN, a renamed counter):
        # printing the lost metric raised a TypeError, which stopped the
        # whole search. Times print with their unit, not as bare seconds.
        times = [9.9, 10.0, 10.1, 10.2, 10.3]
        good = doc(repeated(FWD, times, tokens_per_s=[12800 / t for t in times]))
        this = doc(repeated(FWD, times, tokens_per_s=float("nan")))
        verdict, log = self.judge(good, this)
        self.assertEqual(verdict, bisect.GOOD)
        self.assertIn(f"bisect:   {FWD} time: 10.1 ms -> 10.1 ms (ok)", log)
        self.assertIn(f"bisect:   {FWD} tokens/s: 1.267k tokens/s -> — (lost)", log)
        slower = [t + 3 for t in times]
        slower = doc(repeated(FWD, slower, tokens_per_s=[12800 / t for t in slower]))
        verdict, log = self.judge(good, slower)
        self.assertEqual(verdict, bisect.BAD)
        self.assertIn(f"bisect:   {FWD} time: 10.1 ms -> 13.1 ms (regression)", log)
        self.assertIn(f"bisect:   {FWD} tokens/s: 1.267k tokens/s -> 977.1 tokens/s "
                      "(regression)", log)


# A stand-in bench that writes, to --benchmark_out, the aggregates of
# FWD alone, as --benchmark_report_aggregates_only makes bench do.
AGGREGATES_BENCH = f"""\
import json, sys
out = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--benchmark_out=")][0]
entries = {[e for e in repeated(FWD, [10.0, 10.1]) if e["run_type"] == "aggregate"]!r}
json.dump({{"context": {{}}, "benchmarks": entries}}, open(out, "w"))
"""


class BisectMeasureTest(ToolTest):
    def test_a_run_of_aggregates_alone_says_so(self):
        # It said no benchmark matched --benchmark_filter, where FWD ran.
        tree = os.path.join(self.tmp, "tree")
        os.makedirs(tree)
        for args in (["init", "-q"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit",
                                      "-q", "--allow-empty", "-m", "one"]):
            subprocess.run(["git", "-C", tree, *args], check=True, capture_output=True)
        with open(os.path.join(tree, "bench.py"), "w") as f:
            f.write(AGGREGATES_BENCH)
        bench = self.write("bench", f"#!/bin/sh\nexec {sys.executable} {tree}/bench.py \"$@\"\n")
        os.chmod(bench, 0o755)
        state = {"worktree": tree, "runs": os.path.join(self.tmp, "runs"), "build": "true",
                 "bench": bench, "filter": FWD, "repetitions": 2,
                 "bench_args": ["--benchmark_report_aggregates_only=true"]}
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertIsNone(bisect.measure(state, "good"))
        self.assertIn("the run reported aggregates alone, no repetition to judge: drop "
                      "--benchmark_report_aggregates_only from the arguments after --",
                      err.getvalue())
        self.assertNotIn("no benchmark matched", err.getvalue())
