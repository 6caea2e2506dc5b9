"""tools/compare: compare.py without the errored entries."""
import os
import unittest

from tests.helpers import COMPARE_PY, ToolTest, doc, entry, repeated

FWD = "Transformer/nano/cpu/forward/batch:2/seq:32/fp32"
BROKEN = "Transformer/nano/cuda/forward/batch:2/seq:32/fp32"


@unittest.skipUnless(os.path.exists(COMPARE_PY), "compare.py (libbenchmark-tools) is missing")
class CompareTest(ToolTest):
    def test_errored_entries_are_dropped_and_named(self):
        base = self.write("base.json", doc(repeated(FWD, [10.0, 11.0, 12.0]),
                                           entry(BROKEN, 0.001, error="no CUDA device")))
        new = self.write("new.json", doc(repeated(FWD, [20.0, 21.0, 22.0]),
                                         entry(BROKEN, 5.0)))
        proc = self.run_tool("compare", base, new, "--no-color")
        self.assertExit(proc, 0)
        self.assertIn(f"dropped errored {BROKEN} (baseline {base})", proc.stderr)
        self.assertIn("Comparing baseline.json to contender.json", proc.stdout)
        self.assertIn(f"{FWD}/manual_time_median", proc.stdout)
        self.assertNotIn(BROKEN, proc.stdout)

    def test_a_benchmark_whose_time_unit_changed_is_compared(self):
        # compare.py pairs only entries in the unit of the baseline's first
        # and would leave this benchmark out without a word: the contender
        # writes microseconds, and is twice as slow.
        def with_cv(entries):
            for e in entries:
                if e.get("aggregate_name") == "cv":
                    e.update(real_time=0.1, cpu_time=0.1, aggregate_unit="percentage")
            return entries
        in_us = [dict(e, real_time=e["real_time"] * 2000, cpu_time=e["cpu_time"] * 2000,
                      time_unit="us") for e in repeated(FWD, [10.0, 11.0, 12.0])]
        base = self.write("base.json", doc(with_cv(repeated(FWD, [10.0, 11.0, 12.0]))))
        new = self.write("new.json", doc(with_cv(in_us)))
        proc = self.run_tool("compare", base, new, "--no-color")
        self.assertExit(proc, 0)
        rows = [line.split() for line in proc.stdout.splitlines()
                if line.startswith(FWD + "/manual_time ")]
        self.assertEqual([row[1:5] for row in rows],
                         [["+1.0000", "+1.0000", "10", "20"], ["+1.0000", "+1.0000", "11", "22"],
                          ["+1.0000", "+1.0000", "12", "24"]])
        self.assertIn(f"compare: {FWD}: the files' time units differ: compared in ms",
                      proc.stderr)
        # A cv is a fraction in either unit: the same in both files.
        cv = next(line.split() for line in proc.stdout.splitlines()
                  if line.startswith(FWD + "/manual_time_cv "))
        self.assertEqual(cv[1:3], ["+0.0000", "+0.0000"])

    def test_nothing_in_common_and_bad_input_exit_2(self):
        base = self.write("base.json", doc(entry(FWD, 10.0)))
        new = self.write("new.json", doc(entry(BROKEN, 0.0, error="no CUDA device")))
        proc = self.run_tool("compare", base, new)
        self.assertExit(proc, 2)
        self.assertIn("no measured benchmark in common", proc.stderr)
        for bad in self.bad_inputs():
            self.assertExit(self.run_tool("compare", base, bad), 2)
        proc = self.run_tool("compare", base, base, env={"LTB_COMPARE_PY": "/nonexistent.py"})
        self.assertExit(proc, 2)
        self.assertIn("compare.py not found", proc.stderr)


if __name__ == "__main__":
    unittest.main()
