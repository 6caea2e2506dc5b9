"""tools/gate on fixture JSON files."""
import os
import statistics
import subprocess
import sys
import unittest

from tests.helpers import TOOLS, ToolTest, doc, entry, repeated

NANO = "Transformer/nano/cpu/forward/batch:2/seq:32/fp32"
TRAIN = "Transformer/nano/cpu/train_step/batch:2/seq:32/fp32"
GONE = "GPT2/nano/cpu/forward/batch:2/seq:32/fp32"
FRESH = "GPT2/nano/cpu/generate/batch:2/prompt:32/new:100/fp32"
BROKEN = "Transformer/nano/cuda/forward/batch:2/seq:32/fp32"
NO_GPU = "no CUDA device: no GPU or driver was found"
BASE_MS = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.7, 99.3]


def scaled(times, factor):
    return [t * factor for t in times]


def tokens(times):
    return [64 / (t / 1000) for t in times]


class GateTest(ToolTest):
    def gate(self, base, new, *args):
        """tools/gate's main in this process (test_bad_input_exits_2 runs the
        command itself)."""
        from ltb.gate.cli import main
        return self.run_main("gate", main, self.write("base.json", base),
                             self.write("new.json", new), *args)

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

    def test_the_repetition_note_counts_each_pair_of_files(self):
        # 9 repetitions against 3: the exact U test reaches 2 / C(12, 3) =
        # 0.0091, so a clear regression is significant and no note says otherwise.
        proc = self.gate(doc(repeated(NANO, BASE_MS)), doc(repeated(NANO, [130, 131, 129])))
        self.assertExit(proc, 1)
        self.assertIn("| 0.00909 | **regression** |", self.row(proc, NANO, "time"))
        self.assertNotIn("smallest p-value", proc.stdout)
        # 3 against 3 for one benchmark of two: the note names that one alone.
        proc = self.gate(doc(repeated(NANO, BASE_MS), repeated(TRAIN, [100, 101, 99])),
                         doc(repeated(NANO, BASE_MS), repeated(TRAIN, [130, 131, 129])))
        self.assertExit(proc, 0)
        self.assertIn("Note: with 3 repetitions per side the U test's smallest p-value for "
                      "times is 0.1, not below alpha 0.05: the time changes of 1 benchmark "
                      "(of 2) cannot be called significant.", proc.stdout)
        # 2 in the baseline, 4 in the contender: 2 / C(6, 2) = 0.133.
        proc = self.gate(doc(repeated(NANO, [100, 101])), doc(repeated(NANO, [130, 131, 129, 132])))
        self.assertIn("with 2 repetitions in the baseline and 4 in the contender the U test's "
                      "smallest p-value for times is 0.133", proc.stdout)

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

    def test_a_servers_latency_or_verdict_regression_fails(self):
        # A Server at a fixed rate completes the rate whatever its speed: the
        # same time and samples/s, but its p99 latency doubled, or LoadGen's
        # verdict went from valid to invalid.
        served = "GPT2/nano/cpu/serve/scenario:Server/qps:20/max_batch:8/seq:32/fp32"
        base = doc(entry(served, 50, samples_per_s=20.0, p99_ms=40.0, valid=1))
        proc = self.gate(base, doc(entry(served, 50, samples_per_s=20.0, p99_ms=80.0, valid=1)))
        self.assertExit(proc, 1)
        self.assertIn("| ok |", self.row(proc, served, "time"))
        self.assertIn("**regression**", self.row(proc, served, "p99_ms"))
        proc = self.gate(base, doc(entry(served, 50, samples_per_s=20.0, p99_ms=40.0, valid=0)))
        self.assertExit(proc, 1)
        self.assertIn("**regression**", self.row(proc, served, "valid"))
        # Served generation: TTFT's and TPOT's p99.
        text = ("GPT2/nano/cpu/serve/scenario:Server/qps:1/max_batch:8/prompt:32/output:16/"
                "fp32")
        proc = self.gate(doc(entry(text, 50, ttft_p99_ms=100.0, tpot_p99_ms=10.0)),
                         doc(entry(text, 50, ttft_p99_ms=100.0, tpot_p99_ms=13.0)))
        self.assertExit(proc, 1)
        self.assertIn("**regression**", self.row(proc, text, "tpot_p99_ms"))
        self.assertIn("| ok |", self.row(proc, text, "ttft_p99_ms"))

    def test_a_generate_runs_step_tail_is_not_judged(self):
        # generate's tpot_p99_ms is the tail of one run's decode steps (47%
        # apart between two repetitions of one binary), not LoadGen's result.
        base = doc(repeated(FRESH, BASE_MS, tpot_ms=[8.0] * 9, tpot_p99_ms=[8.4] * 9))
        new = doc(repeated(FRESH, BASE_MS, tpot_ms=[8.0] * 9, tpot_p99_ms=[12.3] * 9))
        proc = self.gate(base, new)
        self.assertExit(proc, 0)
        self.assertIn("| ok |", self.row(proc, FRESH, "tpot_ms"))
        self.assertNotIn("tpot_p99_ms", proc.stdout)

    def test_nine_repetitions_reach_a_lower_p_than_eight(self):
        # scipy's default approximates the U test above 8 a side: 9
        # repetitions then reached 4.1e-4, above 8's exact 1.6e-4.
        for n, p, verdict in ((8, "0.000155", "**regression**"),
                              (9, "4.11e-05", "**regression**")):
            proc = self.gate(doc(repeated(NANO, BASE_MS[:n])),
                             doc(repeated(NANO, scaled(BASE_MS[:n], 1.2))), "--alpha", "0.0003")
            self.assertExit(proc, 1)
            self.assertIn(f"| {p} | {verdict} |", self.row(proc, NANO, "time"))
            self.assertNotIn("smallest p-value", proc.stdout)
        # A tie leaves the exact distribution: the approximation, tie-corrected.
        from ltb.gate.verdicts import u_test
        from scipy.stats import mannwhitneyu
        a, b = [1, 2, 3, 3], [4, 5, 6, 7]
        self.assertEqual(u_test(a, b), mannwhitneyu(a, b, method="asymptotic").pvalue)

    def test_settings_the_runs_differ_in_are_said_beside_the_verdicts(self):
        # Two threads against one: a "+73%" regression with no word that the
        # runs differed; said now, and the verdict stays the gate's.
        proc = self.gate(doc(repeated(NANO, BASE_MS), intra_op_threads="2",
                             cpu_capability="AVX512"),
                         doc(repeated(NANO, scaled(BASE_MS, 1.73)), intra_op_threads="1",
                             cpu_capability="AVX512"))
        self.assertExit(proc, 1)
        self.assertIn("The runs' settings differ, so a change is not the code's alone: "
                      "threads 2 vs 1.", proc.stdout)
        proc = self.gate(doc(repeated(NANO, BASE_MS), intra_op_threads="2"),
                         doc(repeated(NANO, BASE_MS), intra_op_threads="2"))
        self.assertExit(proc, 0)
        self.assertNotIn("settings differ", proc.stdout)

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

    def test_a_metric_the_contender_lost_fails_like_a_lost_benchmark(self):
        # peak_mem measured in the baseline, absent from the contender or no
        # finite number there: its growth can no longer be seen.
        base = doc(repeated(NANO, BASE_MS, peak_mem=1_000_000, tokens_per_s=tokens(BASE_MS)))
        for counters in ({}, {"peak_mem": float("nan")}, {"peak_mem": float("inf")}):
            new = doc(repeated(NANO, BASE_MS, tokens_per_s=tokens(BASE_MS), **counters))
            proc = self.gate(base, new)
            self.assertExit(proc, 1)
            self.assertIn("| 976.6 KiB | — | — | — | **lost** |",
                          self.row(proc, NANO, "peak_mem"))
            self.assertIn("| ok |", self.row(proc, NANO, "tokens/s"))
            self.assertIn("**1 lost metric**", proc.stdout)
            proc = self.gate(base, new, "--allow-missing")
            self.assertExit(proc, 0)
            self.assertIn("| — | lost |", self.row(proc, NANO, "peak_mem"))
            self.assertIn("allowed by --allow-missing", proc.stdout)
        # A served benchmark whose p99 latency went missing.
        served = "GPT2/nano/cpu/serve/scenario:Server/qps:20/max_batch:8/seq:32/fp32"
        proc = self.gate(doc(entry(served, 50, samples_per_s=20.0, p99_ms=40.0, valid=1)),
                         doc(entry(served, 50, samples_per_s=20.0, valid=1)))
        self.assertExit(proc, 1)
        self.assertIn("**lost**", self.row(proc, served, "p99_ms"))
        # A metric only the contender measured is no failure, and not judged.
        proc = self.gate(doc(repeated(NANO, BASE_MS)),
                         doc(repeated(NANO, BASE_MS, peak_mem=1_000_000)))
        self.assertExit(proc, 0)
        self.assertNotIn("peak_mem", proc.stdout)

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

    def lost_rows(self, proc):
        """The rows of the lost benchmarks' table, as (name, baseline, contender)."""
        text = proc.stdout.split("\nLost: ", 1)[1]
        lines = [line for line in text.splitlines() if line.startswith("| `")]
        return [tuple(c.strip().strip("`") for c in line.strip("|").split(" | "))
                for line in lines]

    def test_a_benchmark_missing_from_the_contender_fails(self):
        proc = self.gate(doc(entry(NANO, 100), entry(GONE, 50)), doc(entry(NANO, 100)))
        self.assertExit(proc, 1)
        self.assertIn("**1 lost benchmark**", proc.stdout)
        self.assertIn("| benchmark | baseline | contender |", proc.stdout)
        self.assertEqual(self.lost_rows(proc), [(GONE, "ok", "missing")])
        self.assertNotIn("Missing from the contender", proc.stdout)

    def test_a_benchmark_errored_in_the_contender_fails(self):
        proc = self.gate(doc(repeated(NANO, BASE_MS), repeated(BROKEN, BASE_MS)),
                         doc(repeated(NANO, BASE_MS), entry(BROKEN, 0.001, error=NO_GPU)))
        self.assertExit(proc, 1)
        self.assertEqual(self.lost_rows(proc), [(BROKEN, "ok", f"error: {NO_GPU}")])
        self.assertIn("| ok |", self.row(proc, NANO, "time"))
        # One errored repetition among measured ones is lost too.
        partly = repeated(BROKEN, BASE_MS)
        partly[3] = entry(BROKEN, 0, rep=3, reps=9, error="bench was killed by SIGKILL")
        proc = self.gate(doc(repeated(BROKEN, BASE_MS)), doc(partly))
        self.assertExit(proc, 1)
        self.assertEqual(self.lost_rows(proc),
                         [(BROKEN, "ok", "error: bench was killed by SIGKILL")])
        # With nothing left to compare, what was lost is still the verdict.
        proc = self.gate(doc(entry(BROKEN, 5)), doc(entry(BROKEN, 0, error=NO_GPU)))
        self.assertExit(proc, 1)
        self.assertIn("**1 lost benchmark**", proc.stdout)

    def test_a_benchmark_skipped_in_the_contender_is_lost_not_faster(self):
        # Google Benchmark 1.8 and later write a SkipWithMessage benchmark as
        # "skipped" with times of 0: no measurement, not a -100% change.
        skipped = [dict(e, skipped=True, skip_message="no GPU", real_time=0.0, cpu_time=0.0,
                        iterations=0) for e in repeated(NANO, BASE_MS)
                   if e["run_type"] == "iteration"]
        proc = self.gate(doc(repeated(NANO, BASE_MS), entry(TRAIN, 100)),
                         doc(skipped, entry(TRAIN, 100)))
        self.assertExit(proc, 1)
        self.assertNotIn(f"| `{NANO}` | time", proc.stdout)
        self.assertEqual(self.lost_rows(proc), [(NANO, "ok", "error: skipped: no GPU")])
        # Skipped in the baseline already: listed, never a failure.
        proc = self.gate(doc(skipped, entry(TRAIN, 100)), doc(skipped, entry(TRAIN, 100)))
        self.assertExit(proc, 0)
        self.assertIn(f"- `{NANO}` (contender): skipped: no GPU", proc.stdout)

    def test_aggregates_only_are_named_not_compared_quietly(self):
        # --benchmark_report_aggregates_only writes the mean, median, stddev
        # and cv, and no repetition.
        def aggregates_only(times):
            return [dict(e, real_time=statistics.median(times))
                    for e in repeated(NANO, times) if e["run_type"] == "aggregate"]
        # The contender's NANO has no repetition left to compare: lost, not passed.
        proc = self.gate(doc(repeated(NANO, BASE_MS), entry(TRAIN, 100)),
                         doc(aggregates_only(scaled(BASE_MS, 2)), entry(TRAIN, 100)))
        self.assertExit(proc, 1)
        self.assertEqual(self.lost_rows(proc),
                         [(NANO, "ok", "aggregates only: no repetition to compare")])
        # Both files so: bad input that says why.
        proc = self.gate(doc(aggregates_only(BASE_MS)), doc(aggregates_only(BASE_MS)))
        self.assertExit(proc, 2)
        self.assertIn("holds aggregates only", proc.stderr)
        # The baseline's alone (or both, beside a benchmark they compare): not
        # compared, and said so, for the contender lost nothing.
        for new in (repeated(NANO, scaled(BASE_MS, 2)), aggregates_only(scaled(BASE_MS, 2))):
            proc = self.gate(doc(aggregates_only(BASE_MS), entry(TRAIN, 100)),
                             doc(new, entry(TRAIN, 100)))
            self.assertExit(proc, 0)
            self.assertNotIn(f"| `{NANO}` |", proc.stdout)
            self.assertIn("Not compared: the baseline holds only their aggregates",
                          proc.stdout)
            self.assertIn(f"- `{NANO}`", proc.stdout)

    def test_allow_missing_passes_but_still_lists_them(self):
        base = doc(entry(NANO, 100), entry(GONE, 50), entry(BROKEN, 5))
        new = doc(entry(NANO, 100), entry(FRESH, 70), entry(BROKEN, 0.001, error=NO_GPU))
        proc = self.gate(base, new, "--allow-missing")
        self.assertExit(proc, 0)
        self.assertIn("No regression.", proc.stdout)
        self.assertIn("allowed by --allow-missing", proc.stdout)
        self.assertEqual(self.lost_rows(proc),
                         [(GONE, "ok", "missing"), (BROKEN, "ok", f"error: {NO_GPU}")])
        self.assertIn("New in the contender:\n- `" + FRESH + "`", proc.stdout)
        self.assertNotIn(f"| `{BROKEN}` | time", proc.stdout)
        # Without it the same files fail, and a regression is still counted.
        proc = self.gate(base, doc(entry(NANO, 120), entry(FRESH, 70)))
        self.assertExit(proc, 1)
        self.assertIn("**1 regression, 2 lost benchmarks**", proc.stdout)
        # Nothing in common and nothing lost that counts: bad input.
        proc = self.gate(doc(entry(GONE, 50)), doc(entry(FRESH, 70)), "--allow-missing")
        self.assertExit(proc, 2)
        self.assertIn("no measured benchmark in common", proc.stderr)

    def test_new_and_errored_in_both_do_not_fail(self):
        # Errored in the baseline already: nothing that ran was lost.
        base = doc(entry(NANO, 100), entry(BROKEN, 0.001, error=NO_GPU),
                   entry(GONE, 0.001, error="does not fit"))
        new = doc(entry(NANO, 100), entry(FRESH, 70), entry(BROKEN, 0.001, error=NO_GPU))
        proc = self.gate(base, new)
        self.assertExit(proc, 0)
        self.assertNotIn("Lost:", proc.stdout)
        self.assertIn("No regression.", proc.stdout)
        self.assertIn("New in the contender:\n- `" + FRESH + "`", proc.stdout)
        self.assertIn("Missing from the contender:\n- `" + GONE + "`", proc.stdout)
        self.assertIn(f"- `{BROKEN}` (baseline): {NO_GPU}", proc.stdout)
        self.assertIn(f"- `{BROKEN}` (contender): {NO_GPU}", proc.stdout)
        # A benchmark that failed in the baseline and runs in the contender is fine too.
        proc = self.gate(base, doc(entry(NANO, 100), entry(BROKEN, 5), entry(GONE, 5)))
        self.assertExit(proc, 0)

    def test_markdown_table_for_a_job_summary(self):
        proc = self.gate(doc(entry(NANO, 100)), doc(entry(NANO, 100)))
        self.assertExit(proc, 0)
        lines = proc.stdout.splitlines()
        header = "| benchmark | metric | baseline | contender | change | p-value | verdict |"
        i = lines.index(header)
        self.assertEqual(lines[i + 1], "|---|---|---|---|---|---|---|")
        self.assertEqual(lines[i + 2], f"| `{NANO}` | time | 100 ms | 100 ms | +0.0% | — | ok |")
        self.assertTrue(lines[0].startswith("## Benchmark gate"))

    def test_a_reader_that_stopped_reading_does_not_change_the_verdict(self):
        """A closed pipe on stdout (tools/gate ... | head, under pipefail)
        loses the table, never the exit status."""
        base = self.write("base.json", doc(repeated(NANO, BASE_MS)))
        for factor, code in ((1.2, 1), (1.0, 0)):
            new = self.write("new.json", doc(repeated(NANO, scaled(BASE_MS, factor))))
            read, written = os.pipe()
            os.close(read)  # no reader: the first write fails
            try:
                proc = subprocess.run([sys.executable, os.path.join(TOOLS, "gate"), base, new],
                                      stdout=written, stderr=subprocess.PIPE, text=True,
                                      timeout=300)
            finally:
                os.close(written)
            self.assertEqual(proc.returncode, code, proc.stderr)

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
