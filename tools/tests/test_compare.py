"""tools/compare: compare.py without the errored entries."""
import json
import os
import subprocess
import sys
import unittest

from tests.helpers import COMPARE_PY, TOOLS, ToolTest, doc, entry, repeated

FWD = "Transformer/nano/cpu/forward/batch:2/seq:32/fp32"
BROKEN = "Transformer/nano/cuda/forward/batch:2/seq:32/fp32"
OTHER = "GPT2/nano/cpu/forward/batch:2/seq:32/fp32"


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

    def geomean(self, stdout):
        return next(line.split()[1:3] for line in stdout.splitlines()
                    if line.startswith("OVERALL_GEOMEAN"))

    def test_the_geomean_is_over_the_benchmarks_both_files_measured(self):
        # compare.py's OVERALL_GEOMEAN is over every repetition of each file:
        # with OTHER (100 ms) in the baseline alone, or errored in the
        # contender, it read -90% where FWD, the one benchmark compared,
        # did not change.
        base = self.write("base.json", doc(entry(FWD, 1.0), entry(OTHER, 100.0)))
        for contender in (doc(entry(FWD, 1.0)),
                          doc(entry(FWD, 1.0), entry(OTHER, 0.0, error="out of memory"))):
            new = self.write("new.json", contender)
            proc = self.run_tool("compare", base, new, "--no-color")
            self.assertExit(proc, 0)
            self.assertEqual(self.geomean(proc.stdout), ["+0.0000", "+0.0000"])
            self.assertIn(f"compare: only in the baseline {base}, left out: {OTHER}",
                          proc.stderr)
            self.assertNotIn(OTHER, proc.stdout)

    def test_no_geomean_when_the_files_repeat_a_benchmark_unlike(self):
        # FWD twice as slow, OTHER unchanged: 5 repetitions against 1 weigh
        # FWD 5/6 in the baseline's mean and 1/2 in the contender's, and
        # compare.py's OVERALL_GEOMEAN read +556%. It is left out, here and
        # in --dump_to_json, which a relative path writes where compare runs.
        base = self.write("base.json", doc(repeated(FWD, [1.0] * 5), entry(OTHER, 100.0)))
        new = self.write("new.json", doc(entry(FWD, 2.0), entry(OTHER, 100.0)))
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "compare"), base, new,
                               "--no-color", "-d", "report.json"],
                              cwd=self.tmp, capture_output=True, text=True, timeout=300)
        self.assertExit(proc, 0)
        self.assertNotIn("OVERALL_GEOMEAN", proc.stdout)
        self.assertIn(f"compare: no OVERALL_GEOMEAN: the files repeat {FWD} a different "
                      "number of times", proc.stderr)
        row = next(line.split() for line in proc.stdout.splitlines()
                   if line.startswith(FWD + "/manual_time "))
        self.assertEqual(row[1:5], ["+1.0000", "+1.0000", "1", "2"])
        with open(os.path.join(self.tmp, "report.json")) as f:
            report = json.load(f)
        self.assertEqual([r["name"] for r in report],
                         [f"{FWD}/manual_time", f"{OTHER}/manual_time"])
        # Alike, the geomean stays, and --dump_to_json has it.
        new = self.write("new.json", doc(repeated(FWD, [2.0] * 5), entry(OTHER, 100.0)))
        dump = os.path.join(self.tmp, "alike.json")
        proc = self.run_tool("compare", base, new, "--no-color", "--dump_to_json", dump)
        self.assertExit(proc, 0)
        # Every repetition of FWD doubled: the geomean of all six, 2^(5/6) - 1.
        self.assertEqual(self.geomean(proc.stdout), [f"+{2 ** (5 / 6) - 1:.4f}"] * 2)
        with open(dump) as f:
            self.assertIn("OVERALL_GEOMEAN", [r["name"] for r in json.load(f)])

    def test_files_of_aggregates_alone_are_compared(self):
        # --benchmark_report_aggregates_only writes no repetition; compare.py
        # compares the aggregates, which the tool refused as "no measured
        # benchmark in common".
        def aggregates(times):
            return [e for e in repeated(FWD, times) if e["run_type"] == "aggregate"]
        base = aggregates([10.0, 11.0, 12.0])
        for e in base:
            e["real_time"] = e["cpu_time"] = {"mean": 11.0, "median": 11.0, "stddev": 1.0,
                                              "cv": 1 / 11}[e["aggregate_name"]]
        # Twice as slow: times double, the cv (a fraction) stays.
        scale = {"mean": 2, "median": 2, "stddev": 2, "cv": 1}
        new = [dict(e, real_time=e["real_time"] * scale[e["aggregate_name"]],
                    cpu_time=e["cpu_time"] * scale[e["aggregate_name"]]) for e in base]
        proc = self.run_tool("compare", self.write("base.json", doc(base)),
                             self.write("new.json", doc(new)), "--no-color")
        self.assertExit(proc, 0)
        rows = {line.split()[0].rsplit("_", 1)[1]: line.split()[1:5]
                for line in proc.stdout.splitlines() if line.startswith(FWD)}
        self.assertEqual(rows, {"mean": ["+1.0000", "+1.0000", "11", "22"],
                                "median": ["+1.0000", "+1.0000", "11", "22"],
                                "stddev": ["+1.0000", "+1.0000", "1", "2"],
                                "cv": ["+0.0000", "+0.0000", "0", "0"]})

    def test_settings_the_runs_differ_in_are_named(self):
        # Same names, but 2 threads against 4: a change in time is not the
        # code's alone, and compare said nothing.
        base = self.write("base.json", doc(entry(FWD, 10.0), intra_op_threads="2"))
        new = self.write("new.json", doc(entry(FWD, 6.0), intra_op_threads="4"))
        proc = self.run_tool("compare", base, new, "--no-color")
        self.assertExit(proc, 0)
        self.assertIn("compare: forward: the runs' settings differ, so a difference is not "
                      "the code's alone: threads 2 vs 4", proc.stderr)
        proc = self.run_tool("compare", base, base, "--no-color")
        self.assertExit(proc, 0)
        self.assertNotIn("settings differ", proc.stderr)

    def test_a_simulated_cpu_another_libtorch_blas_or_seed_are_named(self):
        # An AVX2-simulated run against a native one compared silently (-37%).
        native = dict(cpu_capability="AVX512", libtorch_version="2.15.0",
                      blas="mkl (linked into LibTorch)", seed="0")
        simulated = dict(native, cpu_capability="AVX2", aten_cpu_capability="avx2",
                         onednn_max_cpu_isa="AVX2", mkl_enable_instructions="AVX2")
        base = self.write("base.json", doc(entry(FWD, 10.0), **native))
        new = self.write("new.json", doc(entry(FWD, 16.0), **simulated))
        proc = self.run_tool("compare", base, new, "--no-color")
        self.assertExit(proc, 0)
        self.assertIn("instructions AVX512 vs AVX2 (aten_cpu_capability=avx2, "
                      "onednn_max_cpu_isa=AVX2, mkl_enable_instructions=AVX2)", proc.stderr)
        other = self.write("other.json", doc(entry(FWD, 9.0), **dict(
            native, libtorch_version="2.14.1", blas="openblas", seed="7")))
        proc = self.run_tool("compare", base, other, "--no-color")
        self.assertExit(proc, 0)
        self.assertIn("LibTorch 2.15.0 vs 2.14.1; BLAS mkl (linked into LibTorch) vs openblas; "
                      "seed 0 vs 7", proc.stderr)
        proc = self.run_tool("compare", base, base, "--no-color")
        self.assertNotIn("settings differ", proc.stderr)

    def test_cpus_held_back_and_another_malloc_are_named(self):
        # One run under taskset -c 0 and a preloaded jemalloc, the other on
        # the whole machine with glibc's tuned malloc: both were silent.
        full = dict(cpu_affinity="0-1 (2 of 2 logical CPUs)",
                    cpu_quota="none (no cgroup CPU quota)",
                    malloc="glibc malloc, tuned: M_MMAP_MAX=0")
        held = dict(cpu_affinity="0 (1 of 2 logical CPUs)",
                    cpu_quota="1 CPU (cgroup v2 cpu.max 100000 100000)",
                    malloc="/usr/lib/x86_64-linux-gnu/libjemalloc.so.2's malloc (preloaded "
                           "or linked before glibc's), so --malloc's glibc settings do not "
                           "apply")
        base = self.write("base.json", doc(entry(FWD, 10.0), **full))
        new = self.write("new.json", doc(entry(FWD, 16.0), **held))
        proc = self.run_tool("compare", base, new, "--no-color")
        self.assertExit(proc, 0)
        self.assertIn("cpus all vs affinity 0 (1 of 2 logical CPUs), quota 1 CPU (cgroup v2 "
                      "cpu.max 100000 100000); malloc tuned vs libjemalloc.so.2", proc.stderr)
        # A file from before these fields: the whole machine, as before.
        old = self.write("old.json", doc(entry(FWD, 10.0),
                                         malloc="glibc malloc, tuned: M_MMAP_MAX=0"))
        proc = self.run_tool("compare", old, base, "--no-color")
        self.assertExit(proc, 0)
        self.assertNotIn("settings differ", proc.stderr)

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
