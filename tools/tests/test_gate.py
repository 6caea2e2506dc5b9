"""tools/gate on fixture JSON files."""
import unittest

from helpers import ToolTest, doc, entry, repeated

NANO = "Transformer/nano/cpu/forward/batch:2/seq:32/fp32"
TRAIN = "Transformer/nano/cpu/train_step/batch:2/seq:32/fp32"
BASE_MS = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.7, 99.3]


def scaled(times, factor):
    return [t * factor for t in times]


def tokens(times):
    return [64 / (t / 1000) for t in times]


class GateTest(ToolTest):
    def gate(self, base, new, *args):
        return self.run_tool("gate", self.write("base.json", base), self.write("new.json", new),
                             *args)

    def row(self, proc, name, metric):
        for line in proc.stdout.splitlines():
            if line.startswith(f"| `{name}` | {metric} |"):
                return line
        self.fail(f"no {metric} row for {name} in:\n{proc.stdout}")

    def test_clear_regression_fails(self):
        proc = self.gate(doc(repeated(NANO, BASE_MS)), doc(repeated(NANO, scaled(BASE_MS, 1.2))))
        self.assertExit(proc, 1)
        row = self.row(proc, NANO, "time")
        self.assertIn("**regression**", row)
        self.assertIn("+20.0%", row)
        self.assertIn("**1 regression**", proc.stdout)

    def test_improvement_passes(self):
        proc = self.gate(doc(repeated(NANO, BASE_MS)), doc(repeated(NANO, scaled(BASE_MS, 0.8))))
        self.assertExit(proc, 0)
        self.assertIn("| improvement |", self.row(proc, NANO, "time"))
        self.assertIn("No regression.", proc.stdout)

    def test_change_within_threshold_passes(self):
        proc = self.gate(doc(repeated(NANO, BASE_MS)), doc(repeated(NANO, scaled(BASE_MS, 1.05))))
        self.assertExit(proc, 0)
        self.assertIn("| ok |", self.row(proc, NANO, "time"))
        # The same change fails a tighter threshold.
        self.assertExit(self.gate(doc(repeated(NANO, BASE_MS)),
                                  doc(repeated(NANO, scaled(BASE_MS, 1.05))), "--threshold", "3%"), 1)

    def test_large_change_with_p_above_alpha_passes(self):
        # Three repetitions a side: the U test cannot reach p < 0.05.
        proc = self.gate(doc(repeated(NANO, [100, 101, 99])), doc(repeated(NANO, [130, 131, 129])))
        self.assertExit(proc, 0)
        row = self.row(proc, NANO, "time")
        self.assertIn("| 0.1 | not significant |", row)
        self.assertIn("smallest p-value", proc.stdout)
        # Overlapping noisy repetitions: a median change of +30%, p far above alpha.
        noisy_base = [100, 60, 140, 100, 70, 130, 95, 150, 65]
        noisy_new = [130, 70, 150, 135, 60, 145, 140, 65, 138]
        proc = self.gate(doc(repeated(NANO, noisy_base)), doc(repeated(NANO, noisy_new)))
        self.assertExit(proc, 0)
        self.assertIn("not significant", self.row(proc, NANO, "time"))
        # A stricter alpha turns a clear regression into noise as well.
        proc = self.gate(doc(repeated(NANO, BASE_MS)), doc(repeated(NANO, scaled(BASE_MS, 1.2))),
                         "--alpha", "0.00001")
        self.assertExit(proc, 0)

    def test_single_runs_are_judged_by_the_threshold_alone(self):
        proc = self.gate(doc(entry(NANO, 100)), doc(entry(NANO, 110)))
        self.assertExit(proc, 1)
        self.assertIn("| — | **regression** |", self.row(proc, NANO, "time"))

    def test_throughput_counter_regression_fails(self):
        # Same times, but fewer tokens per second (bigger is better).
        proc = self.gate(doc(repeated(NANO, BASE_MS, tokens_per_s=tokens(BASE_MS))),
                         doc(repeated(NANO, BASE_MS, tokens_per_s=scaled(tokens(BASE_MS), 0.8))))
        self.assertExit(proc, 1)
        self.assertIn("| ok |", self.row(proc, NANO, "time"))
        row = self.row(proc, NANO, "tokens/s")
        self.assertIn("-20.0%", row)
        self.assertIn("**regression**", row)
        # More tokens per second is an improvement.
        proc = self.gate(doc(repeated(NANO, BASE_MS, tokens_per_s=tokens(BASE_MS))),
                         doc(repeated(NANO, BASE_MS, tokens_per_s=scaled(tokens(BASE_MS), 1.5))))
        self.assertExit(proc, 0)
        self.assertIn("improvement", self.row(proc, NANO, "tokens/s"))

    def test_peak_memory_growth_fails(self):
        proc = self.gate(doc(repeated(NANO, BASE_MS, peak_mem=1_000_000)),
                         doc(repeated(NANO, BASE_MS, peak_mem=1_200_000)))
        self.assertExit(proc, 1)
        row = self.row(proc, NANO, "peak_mem")
        self.assertIn("976.6 KiB | 1.144 MiB | +20.0%", row)
        self.assertIn("**regression**", row)
        proc = self.gate(doc(entry(NANO, 100, peak_mem=1_000_000)),
                         doc(entry(NANO, 100, peak_mem=1_050_000)))
        self.assertExit(proc, 0)
        # From nothing to something is growth too.
        proc = self.gate(doc(entry(NANO, 100, peak_mem=0)), doc(entry(NANO, 100, peak_mem=4096)))
        self.assertExit(proc, 1)
        self.assertIn("+inf%", self.row(proc, NANO, "peak_mem"))

    def test_per_benchmark_thresholds_from_a_file(self):
        rules = self.write("thresholds", "# noisy training steps get more room\n"
                                         "train_step  30%\n\n^Ops/ 50\n")
        base = doc(entry(NANO, 100), entry(TRAIN, 100))
        new = doc(entry(NANO, 120), entry(TRAIN, 120))
        proc = self.gate(base, new, "--thresholds", rules)
        self.assertExit(proc, 1)
        self.assertIn("**regression**", self.row(proc, NANO, "time"))
        self.assertIn("| ok |", self.row(proc, TRAIN, "time"))
        for bad in ("train_step\n", "train_step lots\n", "(unclosed 5%\n"):
            proc = self.gate(base, new, "--thresholds", self.write("bad-rules", bad))
            self.assertExit(proc, 2)
            self.assertIn("bad-rules:1", proc.stderr)
        self.assertExit(self.gate(base, new, "--thresholds", self.tmp + "/none"), 2)

    def test_new_removed_and_errored_benchmarks_are_listed(self):
        gone = "GPT2/nano/cpu/forward/batch:2/seq:32/fp32"
        fresh = "GPT2/nano/cpu/generate/batch:2/prompt:32/new:100/fp32"
        broken = "Transformer/nano/cuda/forward/batch:2/seq:32/fp32"
        base = doc(entry(NANO, 100), entry(gone, 50), entry(broken, 5))
        new = doc(entry(NANO, 100), entry(fresh, 70),
                  entry(broken, 0.001, error="no CUDA device: no GPU or driver was found"))
        proc = self.gate(base, new)
        self.assertExit(proc, 0)
        self.assertIn("New in the contender:\n- `" + fresh + "`", proc.stdout)
        self.assertIn("Missing from the contender:\n- `" + gone + "`", proc.stdout)
        self.assertIn(f"- `{broken}` (contender): no CUDA device: no GPU or driver was found",
                      proc.stdout)
        self.assertNotIn(f"| `{broken}` |", proc.stdout)

    def test_markdown_table_for_a_job_summary(self):
        proc = self.gate(doc(entry(NANO, 100)), doc(entry(NANO, 100)))
        self.assertExit(proc, 0)
        lines = proc.stdout.splitlines()
        header = "| benchmark | metric | baseline | contender | change | p-value | verdict |"
        i = lines.index(header)
        self.assertEqual(lines[i + 1], "|---|---|---|---|---|---|---|")
        self.assertEqual(lines[i + 2], f"| `{NANO}` | time | 100 ms | 100 ms | +0.0% | — | ok |")
        self.assertTrue(lines[0].startswith("## Benchmark gate"))

    def test_bad_input_exits_2(self):
        good = self.write("good.json", doc(entry(NANO, 100)))
        for bad in self.bad_inputs():
            for args in ((bad, good), (good, bad)):
                proc = self.run_tool("gate", *args)
                self.assertExit(proc, 2)
                self.assertIn(bad, proc.stderr)
        other = self.write("other.json", doc(entry(TRAIN, 100)))
        proc = self.run_tool("gate", good, other)
        self.assertExit(proc, 2)
        self.assertIn("no measured benchmark in common", proc.stderr)
        for args in (("--threshold", "seven"), ("--threshold", "-3%"), ("--alpha", "2")):
            proc = self.run_tool("gate", good, good, *args)
            self.assertExit(proc, 2)
            self.assertIn(args[0], proc.stderr)


if __name__ == "__main__":
    unittest.main()
