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
