"""tools/abtest: the interleaving and the JSON it assembles, with a fake bench
(fake_bench.py) as both binaries; and end to end with the real bench's
Selftest/spin (LTB_SELFTEST=1) when it is built."""
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import unittest

from tests.helpers import (SELFTEST, TOOLS, RealBenchTest, ToolTest, bench_wrapper, fake_bench,
                     selftest)

OK, FAST, ERROR, KILL, SLEEP = (f"Fake/{k}/cpu/step/fp32/manual_time"
                                for k in ("ok", "fast", "error", "kill", "sleep"))
SPIN = selftest("spin")
# Short runs, and enough rounds for the gate's U test: with 8 a side its
# smallest p-value is 0.00016, and a few overlaps still leave it below 0.05.
SPIN_ARGS = ["--benchmark_filter=^Selftest/spin/", "--benchmark_min_time=0.05",
             "--warmup_s=0.05"]
SPIN_ROUNDS = "8"
TRIES = 3


def load_abtest():
    from ltb.commands import abtest
    return abtest


class AbtestRunner:
    """Runs abtest's main in this process (its benches in processes of their
    own; test_interrupted_keeps_what_ran runs the command) with its two
    files in self.tmp."""

    def abtest(self, *args, base=None, head=None, env=None, directory=None):
        self.out = {side: os.path.join(directory or self.tmp, f"{side}.json")
                    for side in ("base", "head")}
        return self.run_main("abtest", load_abtest().main, "--base", base or self.base,
                             "--head", head or self.head, "--out-base", self.out["base"],
                             "--out-head", self.out["head"], *args, env=env)

    def result(self, side):
        with open(self.out[side]) as f:
            return json.load(f)

    def iterations(self, doc, name):
        return [e for e in doc["benchmarks"] if e["name"] == name]

    def aggregate(self, doc, name, aggregate):
        found = [e for e in doc["benchmarks"] if e["name"] == f"{name}_{aggregate}"]
        self.assertEqual(len(found), 1, f"{name}_{aggregate}")
        return found[0]


class ScheduleTest(unittest.TestCase):
    def test_sides_take_turns_and_the_first_alternates(self):
        abtest = load_abtest()
        plan = [("a", ["base", "head"]), ("b", ["base", "head"]), ("c", ["head"])]
        runs = [(name, r, side) for _, name, r, side in abtest.schedule(plan, 3)]
        self.assertEqual(runs, [
            ("a", 0, "base"), ("a", 0, "head"), ("a", 1, "head"), ("a", 1, "base"),
            ("a", 2, "base"), ("a", 2, "head"),
            # The next benchmark starts with the other side: with an odd count
            # of rounds neither side leads more often overall.
            ("b", 0, "head"), ("b", 0, "base"), ("b", 1, "base"), ("b", 1, "head"),
            ("b", 2, "head"), ("b", 2, "base"),
            ("c", 0, "head"), ("c", 1, "head"), ("c", 2, "head")])

    def test_aggregates_are_google_benchmarks(self):
        abtest = load_abtest()
        runs = [{"name": "X/manual_time", "run_name": "X/manual_time", "run_type": "iteration",
                 "threads": 1, "iterations": 10, "real_time": t, "cpu_time": t / 2,
                 "time_unit": unit, "samples/s": s}
                for t, unit, s in ((2.0, "ms", 500.0), (4000.0, "us", 250.0), (3.0, "ms", 300.0))]
        runs.append(dict(runs[0], error_occurred=True, error_message="bench was killed"))
        found = {e["aggregate_name"]: e for e in abtest.aggregates(runs)}
        self.assertEqual(list(found), ["mean", "median", "stddev", "cv"])
        self.assertAlmostEqual(found["mean"]["real_time"], 3.0)
        self.assertAlmostEqual(found["mean"]["cpu_time"], 1.5)
        self.assertAlmostEqual(found["median"]["samples/s"], 300.0)
        self.assertAlmostEqual(found["stddev"]["real_time"], 1.0)
        self.assertAlmostEqual(found["cv"]["real_time"], 1 / 3)
        for e in found.values():
            self.assertEqual((e["name"], e["run_type"], e["repetitions"], e["time_unit"]),
                             (f"X/manual_time_{e['aggregate_name']}", "aggregate", 4, "ms"))
        self.assertEqual(found["cv"]["aggregate_unit"], "percentage")
        self.assertEqual(abtest.aggregates(runs[:1] + runs[3:]), [])  # one measured run
        # A counter whose mean is 0 (token_match_% of random weights) has no
        # cv: left out of that row, so the JSON has no NaN.
        zero = [dict(r, **{"token_match_%": 0.0}) for r in runs[:3]]
        found = {e["aggregate_name"]: e for e in abtest.aggregates(zero)}
        self.assertEqual(found["mean"]["token_match_%"], 0.0)
        self.assertNotIn("token_match_%", found["cv"])
        self.assertIn("samples/s", found["cv"])
        json.dumps(found, allow_nan=False)


class FakeAbtestTest(AbtestRunner, ToolTest):
    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "runs.log")
        self.base = fake_bench(os.path.join(self.tmp, "A"), FAKE_BENCH_ID="A",
                               FAKE_BENCH_LOG=self.log)
        self.head = fake_bench(os.path.join(self.tmp, "B"), FAKE_BENCH_ID="B",
                               FAKE_BENCH_LOG=self.log, FAKE_BENCH_COMMIT="beef000")

    def runs(self):
        """(binary, benchmark) of every run, in order (not the listings)."""
        try:
            with open(self.log) as f:
                calls = [json.loads(line) for line in f]
        except FileNotFoundError:
            return []
        return [(call[0], arg[len("--benchmark_filter=^"):-1].replace("\\", ""))
                for call in calls if "--benchmark_list_tests" not in call
                for arg in call if arg.startswith("--benchmark_filter=")]

    def test_runs_take_turns_one_benchmark_a_process(self):
        proc = self.abtest("--rounds", "4", "--no-gate", "--benchmark_filter=Fake/(ok|fast)",
                           "--benchmark_min_time=0.01")
        self.assertExit(proc, 0)
        self.assertEqual(proc.stdout.split(), [self.out["base"], self.out["head"]])
        self.assertEqual(self.runs(), [("A", OK), ("B", OK), ("B", OK), ("A", OK),
                                       ("A", OK), ("B", OK), ("B", OK), ("A", OK),
                                       ("B", FAST), ("A", FAST), ("A", FAST), ("B", FAST),
                                       ("B", FAST), ("A", FAST), ("A", FAST), ("B", FAST)])
        with open(self.log) as f:
            for call in map(json.loads, f):
                if "--benchmark_list_tests" not in call:
                    self.assertIn("--benchmark_repetitions=1", call)
                    self.assertIn("--benchmark_min_time=0.01", call)
                    self.assertIn("--benchmark_format=json", call)
        self.assertIn("[2/2] " + FAST + " round 4/4 base: ", proc.stderr)
        self.assertIn("about 0:00:00 left", proc.stderr)

    def test_each_side_is_one_file_of_repetitions(self):
        proc = self.abtest("--rounds", "4", "--no-gate", "--benchmark_filter=Fake/(ok|error)")
        self.assertExit(proc, 0)
        for side, commit in (("base", "fa4e000"), ("head", "beef000")):
            doc = self.result(side)
            # Its own binary's context; what each run reported of its own
            # (date, load) stays with that run.
            self.assertEqual(doc["context"]["suite_commit"], commit)
            self.assertEqual(doc["context"]["libtorch_version"], "2.9.0")
            self.assertNotIn("date", doc["context"])
            self.assertIn(f"{side} {os.path.join(self.tmp, 'AB'[side == 'head'])} against ",
                          doc["context"]["abtest"])
            self.assertIn("4 interleaved rounds", doc["context"]["abtest"])
            reps = self.iterations(doc, OK)
            self.assertEqual([e["repetition_index"] for e in reps], [0, 1, 2, 3])
            for e in reps:
                self.assertEqual((e["repetitions"], e["run_type"], e["family_index"]),
                                 (4, "iteration", 0))
                self.assertEqual(sorted(e["context"]), ["date", "load_avg"])
            times = [e["real_time"] for e in reps]
            self.assertAlmostEqual(self.aggregate(doc, OK, "mean")["real_time"],
                                   statistics.mean(times))
            self.assertAlmostEqual(self.aggregate(doc, OK, "median")["real_time"],
                                   statistics.median(times))
            self.assertAlmostEqual(self.aggregate(doc, OK, "stddev")["real_time"],
                                   statistics.stdev(times))
            self.assertAlmostEqual(self.aggregate(doc, OK, "median")["samples/s"],
                                   statistics.median(e["samples/s"] for e in reps))
            self.assertEqual([e["name"] for e in doc["benchmarks"]][4:8],
                             [f"{OK}_{a}" for a in ("mean", "median", "stddev", "cv")])
            # Errored in every round: four errored repetitions, no aggregates.
            errored = [e for e in doc["benchmarks"] if e["run_name"] == ERROR]
            self.assertEqual(len(errored), 4)
            self.assertTrue(all(e["error_occurred"] and e["family_index"] == 1 for e in errored))
        # Gate and compare.py read them as they read --benchmark_repetitions=4 output.
        from ltb.gate.cli import main as gate
        gate = self.run_main("gate", gate, self.out["base"], self.out["head"])
        self.assertExit(gate, 0)
        self.assertRegex(gate.stdout, r"\| `Fake/ok/cpu/step/fp32` \| time \| .* \| ok \|")
        self.assertIn("- `Fake/error/cpu/step/fp32` (contender): no such device: fake",
                      gate.stdout)
        self.assertComparePyReads(self.out["base"], self.out["head"], "Repetitions: 4 vs 4",
                                  f"{OK}_median")

    def test_the_default_suite_takes_turns_a_member_a_process(self):
        # Without a filter: bench's default suite, whose shapes no filter
        # selects, a member (Family/size) a run; Fake/error only on the head.
        base = fake_bench(os.path.join(self.tmp, "A"), FAKE_BENCH_ID="A", FAKE_BENCH_LOG=self.log,
                          FAKE_BENCH_ONLY="Fake/(ok|fast)/")
        head = fake_bench(os.path.join(self.tmp, "B"), FAKE_BENCH_ID="B", FAKE_BENCH_LOG=self.log,
                          FAKE_BENCH_ONLY="Fake/(ok|fast|error)/")
        proc = self.abtest("--rounds", "2", "--no-gate", base=base, head=head)
        self.assertExit(proc, 0)
        runs = []
        with open(self.log) as f:
            for call in map(json.loads, f):
                if "--benchmark_list_tests" in call or "--list_families" in call:
                    continue
                self.assertFalse([a for a in call if a.startswith(
                    ("--benchmark_filter", "--benchmark_min_time"))], call)
                self.assertIn("--benchmark_repetitions=1", call)
                runs += [(call[0], a.split("=", 1)[1]) for a in call
                         if a.startswith("--suite_skip=")]
        but = {m: ",".join(o for o in ("Fake/ok", "Fake/fast", "Fake/error", "Fake/kill")
                           if o != m) for m in ("Fake/ok", "Fake/fast", "Fake/error")}
        self.assertEqual(runs, [("A", but["Fake/ok"]), ("B", but["Fake/ok"]),
                                ("B", but["Fake/ok"]), ("A", but["Fake/ok"]),
                                ("B", but["Fake/fast"]), ("A", but["Fake/fast"]),
                                ("A", but["Fake/fast"]), ("B", but["Fake/fast"]),
                                ("B", but["Fake/error"]), ("B", but["Fake/error"])])
        suite = [f"Fake/{kind}/cpu/{phase}/batch:1/fp32/manual_time"
                 for kind in ("ok", "fast", "error") for phase in ("step", "train")]
        for side, names in (("base", suite[:4]), ("head", suite)):
            doc = self.result(side)
            self.assertIn("each Family/size of bench's default suite in its own bench process",
                          doc["context"]["abtest"])
            reps = [e for e in doc["benchmarks"] if e["run_type"] == "iteration"]
            self.assertEqual([e["name"] for e in reps], [n for n in names for _ in range(2)])
            self.assertEqual([e["repetition_index"] for e in reps], [0, 1] * len(names))
        self.assertIn(f"[1/3] Fake/ok round 2/2 base: {suite[0]} ", proc.stderr)

    def test_the_gate_decides(self):
        proc = self.abtest("--rounds", "5", "--benchmark_filter=Fake/ok")
        self.assertExit(proc, 0)
        self.assertIn("No regression.", proc.stdout)
        slowed = fake_bench(os.path.join(self.tmp, "slowed"), FAKE_BENCH_SLOWDOWN="1.15")
        proc = self.abtest("--rounds", "5", "--benchmark_filter=Fake/ok", head=slowed)
        self.assertExit(proc, 1)
        self.assertRegex(proc.stdout, r"\| `Fake/ok/cpu/step/fp32` \| time \| .* \| \+1[45]\.\d% "
                                      r"\| 0\.0079\d* \| \*\*regression\*\* \|")
        # The gate's options are passed on.
        proc = self.abtest("--rounds", "5", "--benchmark_filter=Fake/ok", "--threshold", "20%",
                           head=slowed)
        self.assertExit(proc, 0)
        self.assertIn("Threshold 20%", proc.stdout)
        rules = self.write("rules", "^Fake/ok 30%\n")
        proc = self.abtest("--rounds", "5", "--benchmark_filter=Fake/ok", "--thresholds", rules,
                           "--alpha", "0.001", head=slowed)
        self.assertExit(proc, 0)
        self.assertIn(f"(per benchmark from {rules})", proc.stdout)
        self.assertIn("alpha 0.001", proc.stdout)

    def test_a_crash_or_a_timeout_is_an_errored_repetition(self):
        killing = fake_bench(os.path.join(self.tmp, "killing"), FAKE_BENCH_KILL="Fake/ok")
        proc = self.abtest("--rounds", "2", "--timeout", "1", "--benchmark_filter=Fake/(ok|sleep)",
                           head=killing, env={"FAKE_BENCH_SLEEP_S": "30"})
        self.assertExit(proc, 1)
        self.assertIn("round 1/2 head: FAILED: bench was killed by SIGKILL", proc.stderr)
        head = self.result("head")
        for name, message in ((OK, "bench was killed by SIGKILL (out of memory?)"),
                              (SLEEP, "timed out after 1 s")):
            reps = self.iterations(head, name)
            self.assertEqual([(e["error_occurred"], e["error_message"], e["repetition_index"])
                              for e in reps], [(True, message, 0), (True, message, 1)])
        # What ran in the baseline and crashed in the contender fails the gate.
        self.assertIn("**1 lost benchmark**", proc.stdout)
        self.assertIn("| `Fake/ok/cpu/step/fp32` | ok | error: bench was killed by SIGKILL",
                      proc.stdout)
        self.assertEqual(len(self.iterations(self.result("base"), OK)), 2)

    def test_a_benchmark_one_binary_lacks(self):
        older = fake_bench(os.path.join(self.tmp, "older"), FAKE_BENCH_ID="older",
                           FAKE_BENCH_LOG=self.log, FAKE_BENCH_ONLY="Fake/ok")
        # New in the head: run on the head alone, listed, passes.
        proc = self.abtest("--rounds", "2", "--benchmark_filter=Fake/(ok|fast)", base=older)
        self.assertExit(proc, 0)
        self.assertIn("New in the contender:\n- `Fake/fast/cpu/step/fp32`", proc.stdout)
        self.assertEqual([b for b, name in self.runs() if name == FAST], ["B", "B"])
        self.assertEqual(self.iterations(self.result("base"), FAST), [])
        # Missing from the head: lost, unless --allow-missing.
        proc = self.abtest("--rounds", "2", "--benchmark_filter=Fake/(ok|fast)", head=older)
        self.assertExit(proc, 1)
        self.assertIn("| `Fake/fast/cpu/step/fp32` | ok | missing |", proc.stdout)
        proc = self.abtest("--rounds", "2", "--allow-missing", "--benchmark_filter=Fake/(ok|fast)",
                           head=older)
        self.assertExit(proc, 0)
        self.assertIn("| `Fake/fast/cpu/step/fp32` | ok | missing |", proc.stdout)

    def test_interrupted_keeps_what_ran(self):
        self.out = {side: os.path.join(self.tmp, f"{side}.json") for side in ("base", "head")}
        args = [sys.executable, os.path.join(TOOLS, "abtest"), "--base", self.base,
                "--head", self.head, "--out-base", self.out["base"], "--out-head",
                self.out["head"], "--rounds", "2", "--benchmark_filter=Fake/(ok|sleep)"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, FAKE_BENCH_SLEEP_S="60"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (("B", SLEEP) not in self.runs()):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, err)
        self.assertIn("abtest: interrupted; the runs done so far are in", err)
        self.assertEqual(out, "")  # no gate on half the runs
        for side in ("base", "head"):
            doc = self.result(side)
            self.assertEqual(len(self.iterations(doc, OK)), 2)
            self.assertEqual(self.iterations(doc, SLEEP), [])
            self.assertIn("(interrupted)", doc["context"]["abtest"])
        self.assertEqual(self.runs()[-1], ("B", SLEEP))

    def test_bad_input_exits_2(self):
        cases = [
            (("--benchmark_repetitions=9",), "--benchmark_repetitions is the abtest's own: "
                                             "use --rounds"),
            (("--benchmark_out=x.json",), "use --out-base and --out-head"),
            (("--rounds", "0"), "--rounds must be >= 1"),
            (("--threshold", "seven"), "--threshold"),
            (("--benchmark_filter=Fake/ok", "--dtype=fp99"),
             f"--base {self.base}: bench refused the arguments (exit 2): "
             "bench: unknown --dtype 'fp99'"),
            (("--benchmark_filter=Nothing",), "the bench arguments select no benchmark"),
            (("--benchmark_filter=Fake/ok", "--thresholds", os.path.join(self.tmp, "none")),
             "cannot read"),
            (("--suite_skip=Fake/nope",),
             f"--base {self.base}: bench refused the arguments (exit 2): bench: --suite_skip: "
             "Fake/nope is not a member of the default suite; its members: Fake/ok, "
             "Fake/fast, Fake/error, Fake/kill"),
        ]
        for args, message in cases:
            proc = self.abtest(*args)
            self.assertExit(proc, 2)
            self.assertIn(message, proc.stderr)
        proc = self.abtest("--benchmark_filter=Fake/ok", head=os.path.join(self.tmp, "nope"))
        self.assertExit(proc, 2)
        self.assertIn("nope: no bench binary there", proc.stderr)
        self.assertIn("give --head", proc.stderr)
        self.assertEqual(self.runs(), [])  # nothing ran


class AbtestTest(AbtestRunner, RealBenchTest):
    """The real bench's Selftest/spin, a 2 ms busy wait a step. The gate's
    verdict is a statistical one on a machine that may be busy with other
    work, so each check gets up to TRIES attempts."""

    same = None  # (the first abtest of the binary against itself, its two files)

    def setUp(self):
        super().setUp()
        self.base = self.head = self.bench

    def same_binary(self):
        """The binary against itself, run once for the class: its files are
        those test_the_files_read_like_repetitions reads, and its verdict
        test_the_same_binary_passes' first try."""
        cls = type(self)
        if cls.same is None:
            directory = os.path.join(cls.bench_dir.name, "same")
            os.makedirs(directory)
            proc = self.abtest("--rounds", SPIN_ROUNDS, *SPIN_ARGS, env=SELFTEST,
                               directory=directory)
            cls.same = proc, self.out
        return cls.same

    def verdicts(self, head, expected, first=None):
        codes = []
        for _ in range(TRIES):
            proc = first or self.abtest("--rounds", SPIN_ROUNDS, *SPIN_ARGS, head=head,
                                        env=SELFTEST)
            first = None
            codes.append(proc.returncode)
            if proc.returncode == expected:
                return proc
        self.fail(f"exits {codes} in {TRIES} tries, never {expected}:\n{proc.stdout}\n"
                  f"{proc.stderr}")

    def test_the_same_binary_passes(self):
        proc = self.verdicts(self.bench, 0, first=self.same_binary()[0])
        # A 2 ms spin, or more where the machine's load preempts it.
        self.assertRegex(proc.stdout, r"\| `Selftest/spin/cpu/step/fp32` \| time \| \d+(\.\d+)? ms")

    def test_a_slowed_head_fails(self):
        # Three times slower: a 15% slowdown was lost in the noise of a 2-core
        # machine with one core busy and another test beside this one (a spin
        # that is preempted ends when it runs again, milliseconds late).
        slowed = bench_wrapper(os.path.join(self.tmp, "slowed"), self.bench,
                               LTB_SELFTEST_SLOWDOWN="3")
        proc = self.verdicts(slowed, 1)
        self.assertRegex(proc.stdout, r"\| `Selftest/spin/cpu/step/fp32` \| time \| .* \| "
                                      r"\*\*regression\*\* \|")

    def test_the_files_read_like_repetitions(self):
        self.out = self.same_binary()[1]  # SPIN_ROUNDS rounds
        mine = self.result("base")
        bench = subprocess.run([self.bench, *SPIN_ARGS, f"--benchmark_repetitions={SPIN_ROUNDS}",
                                "--benchmark_format=json"], capture_output=True, text=True,
                               env=dict(os.environ, **SELFTEST), timeout=300)
        self.assertEqual(bench.returncode, 0, bench.stderr)
        theirs = json.loads(bench.stdout)
        self.assertEqual([e["name"] for e in mine["benchmarks"]],
                         [e["name"] for e in theirs["benchmarks"]])
        for a, b in zip(mine["benchmarks"], theirs["benchmarks"]):
            self.assertEqual(sorted(set(a) - {"context"}), sorted(b), a["name"])
            for key in ("run_name", "run_type", "repetitions", "repetition_index",
                        "aggregate_name", "aggregate_unit", "time_unit", "family_index"):
                self.assertEqual(a.get(key), b.get(key), f"{a['name']}: {key}")
        self.assertEqual(mine["context"]["libtorch_version"], theirs["context"]["libtorch_version"])
        self.assertEqual(mine["context"]["suite_commit"], theirs["context"]["suite_commit"])
        self.assertComparePyReads(self.out["base"], self.out["head"],
                                  f"Repetitions: {SPIN_ROUNDS} vs {SPIN_ROUNDS}")


if __name__ == "__main__":
    unittest.main()
