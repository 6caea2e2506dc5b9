"""tools/sweep against the real bench binary and its test-only Selftest
benchmarks (LTB_SELFTEST=1), when it is built, and against a fake bench
(fake_bench.py), always."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import unittest

from tests.helpers import SELFTEST, TOOLS, RealBenchTest, ToolTest, fake_bench, selftest

FAST = ["--benchmark_min_time=0.01", "--warmup_s=0"]
OK, SLOW, ABORT, KILL = (selftest(k) for k in ("ok", "slow", "abort", "kill"))
FAKE_OK, FAKE_KILL, FAKE_ERROR = (f"Fake/{k}/cpu/step/fp32/manual_time"
                                  for k in ("ok", "kill", "error"))
# The fake bench's default suite, in its order: shapes no filter selects.
FAKE_MEMBERS = ["Fake/ok", "Fake/fast", "Fake/error", "Fake/kill"]
FAKE_SUITE = [f"{m}/cpu/{phase}/batch:1/fp32/manual_time"
              for m in FAKE_MEMBERS for phase in ("step", "train")]


class SweepRunner:
    """Runs the sweep on self.bench with a journal in self.tmp."""

    def sweep(self, *args, bench=None, journal="j.jsonl", env=None):
        return self.run_tool("sweep", "--bench", bench or self.bench,
                             "--journal", os.path.join(self.tmp, journal), *args,
                             env=dict(SELFTEST, **(env or {})))

    def merged(self, path):
        with open(path) as f:
            return json.load(f)

    def journal_lines(self, journal="j.jsonl"):
        with open(os.path.join(self.tmp, journal)) as f:
            return [json.loads(line) for line in f if line.strip()]

    def journal_names(self, journal="j.jsonl"):
        return [line.get("name") for line in self.journal_lines(journal)][1:]

    def by_name(self, doc):
        return {e["name"]: e for e in doc["benchmarks"]}

    def assert_killed_one_kept_the_other(self, proc, ok, killed):
        """A sweep over ok and killed: killed is recorded as errored, ok as run."""
        self.assertExit(proc, 0)
        self.assertIn("FAILED: bench was killed by SIGKILL (out of memory?)", proc.stderr)
        entries = self.by_name(self.merged(proc.stdout.strip()))
        self.assertEqual(sorted(entries), sorted([ok, killed]))
        self.assertFalse(entries[ok].get("error_occurred"))
        self.assertGreater(entries[ok]["real_time"], 0)
        self.assertTrue(entries[killed]["error_occurred"])
        self.assertTrue(entries[killed]["error_message"].startswith(
            "bench was killed by SIGKILL"), entries[killed]["error_message"])


class SweepTest(SweepRunner, RealBenchTest):
    def test_running_out_of_host_memory_loses_only_that_benchmark(self):
        # A 6 GiB address-space limit on the sweep and its bench processes:
        # Transformer/medium's training step (weights, gradients and AdamW's
        # moments: 6.8 GB) runs out of memory while its model is built, though
        # the machine's free memory passed the memory guard; nano then runs.
        import resource
        medium = "Transformer/medium/cpu/train_step/batch:1/seq:32/fp32/manual_time"
        nano = "Transformer/nano/cpu/forward/batch:1/seq:32/fp32/manual_time"
        proc = subprocess.run(
            [sys.executable, os.path.join(TOOLS, "sweep"), "--bench", self.bench,
             "--journal", os.path.join(self.tmp, "j.jsonl"), *FAST, "--batch=1", "--seq=32",
             "--devices=cpu", "--peak_flops=1e12",
             "--benchmark_filter=Transformer/medium/cpu/train_step/|Transformer/nano/cpu/forward/"],
            capture_output=True, text=True, timeout=600,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30)))
        self.assertExit(proc, 0)
        entries = self.by_name(self.merged(proc.stdout.strip()))
        self.assertEqual(sorted(entries), sorted([medium, nano]))
        self.assertFalse(entries[nano].get("error_occurred"), entries[nano].get("error_message"))
        self.assertTrue(entries[medium]["error_occurred"])
        self.assertIn("out of host memory", entries[medium]["error_message"])

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
        self.assertRegex(doc["context"]["libtorch_version"], r"^\d+\.\d+")
        self.assertIn("1 failed", doc["context"]["sweep"])

        # The merged JSON is what compare.py, gate, report and plot read.
        self.assertComparePyReads(out, out, OK)
        gate = self.run_tool("gate", out, out)
        self.assertExit(gate, 0)
        self.assertIn(f"- `{ABORT.replace('/manual_time', '')}` (baseline): bench was killed by "
                      "SIGABRT", gate.stdout)
        self.assertExit(self.run_tool("report", out), 0)
        self.assertExit(self.run_tool("compare", out, out), 0)

    def test_a_benchmark_killed_by_sigkill_loses_only_itself(self):
        proc = self.sweep("--benchmark_filter=Selftest/(ok|kill)", *FAST)
        self.assert_killed_one_kept_the_other(proc, OK, KILL)

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
        # bench's own words, passed on: the bad value and the valid ones.
        self.assertRegex(proc.stderr, r"bench refused the arguments \(exit 2\): bench: .*"
                                      r"'fp99'.*valid: fp32, bf16, fp16")
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


class FakeSweepTest(SweepRunner, ToolTest):
    """The sweep with fake_bench.py as bench: runs without a build."""

    def setUp(self):
        super().setUp()
        self.bench = fake_bench(os.path.join(self.tmp, "bench"))

    def test_a_benchmark_killed_by_sigkill_loses_only_itself(self):
        proc = self.sweep("--benchmark_filter=Fake/(ok|kill)")
        self.assert_killed_one_kept_the_other(proc, FAKE_OK, FAKE_KILL)
        self.assertEqual(self.journal_names(), [FAKE_OK, FAKE_KILL])
        self.assertEqual([r["status"] for r in self.journal_lines()[1:]], ["ok", "failed"])

    def test_the_journal_records_the_binary(self):
        with open(self.bench, "rb") as f:
            sha256 = hashlib.sha256(f.read()).hexdigest()
        proc = self.sweep("--benchmark_filter=Fake/ok")
        self.assertExit(proc, 0)
        header, record = self.journal_lines()
        self.assertEqual(header["sweep"]["sha256"], sha256)
        self.assertEqual(record["context"]["libtorch_version"], "2.9.0")
        self.assertEqual(record["context"]["suite_commit"], "fa4e000")
        self.assertEqual(self.merged(proc.stdout.strip())["context"]["bench_sha256"], sha256)

    def test_ctrl_c_keeps_the_journal_and_a_rerun_resumes(self):
        log = os.path.join(self.tmp, "runs.log")
        sleep = "Fake/sleep/cpu/step/fp32/manual_time"
        args = [sys.executable, os.path.join(TOOLS, "sweep"), "--bench", self.bench,
                "--journal", os.path.join(self.tmp, "j.jsonl"),
                "--benchmark_filter=Fake/(ok|sleep)"]
        # A shell runs a background job with SIGINT ignored, and Python keeps
        # an ignored SIGINT ignored: the sweep gets it as a terminal's Ctrl-C
        # would give it, whatever started these tests.
        sweep = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, FAKE_BENCH_LOG=log),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sleep not in self.started(log):
            time.sleep(0.02)
        self.assertEqual(self.started(log), [FAKE_OK, sleep])
        sweep.send_signal(signal.SIGINT)
        out, err = sweep.communicate(timeout=30)  # not the 60 s the fake bench sleeps
        self.assertEqual(sweep.returncode, 130, err)
        self.assertNotIn("Traceback", err)
        self.assertIn("run the same command again to resume", err)
        self.assertEqual(out, "")  # nothing merged from half a sweep
        self.assertEqual(self.journal_names(), [FAKE_OK])

        proc = subprocess.run(args, capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, FAKE_BENCH_LOG=log, FAKE_BENCH_SLEEP_S="0"))
        self.assertExit(proc, 0)
        self.assertIn("1 of 2 benchmarks already in", proc.stderr)
        self.assertEqual(self.started(log)[2:], [sleep])  # the one interrupted, alone
        self.assertEqual(self.journal_names(), [FAKE_OK, sleep])
        entries = self.by_name(self.merged(proc.stdout.strip()))
        self.assertEqual(sorted(entries), [FAKE_OK, sleep])
        self.assertFalse(any(e.get("error_occurred") for e in entries.values()))

    def started(self, log):
        """The benchmarks the fake bench was started to run, in order."""
        try:
            with open(log) as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        return [arg[len("--benchmark_filter=^"):-1].replace("\\", "")
                for argv in lines for arg in argv
                if arg.startswith("--benchmark_filter=^")]

    def test_resuming_with_another_build_is_refused(self):
        args = ("--benchmark_filter=Fake/(ok|error)",)
        self.assertExit(self.sweep(*args), 0)
        # The same path, another build: its results must not join the others.
        fake_bench(self.bench, FAKE_BENCH_COMMIT="beef000", FAKE_BENCH_LIBTORCH="2.10.0")
        for again in ((), ("--retry-failed",)):
            proc = self.sweep(*args, *again)
            self.assertExit(proc, 2)
            self.assertIn("was written by another build of", proc.stderr)
            self.assertIn("libtorch_version 2.9.0, suite_commit fa4e000", proc.stderr)
            self.assertRegex(proc.stderr, r"sha256 [0-9a-f]{16}, libtorch_version.*"
                                          r"now has sha256 [0-9a-f]{16}")
            self.assertIn("Use --fresh to start over", proc.stderr)
        self.assertEqual(len(self.journal_lines()), 3)  # untouched
        proc = self.sweep(*args, "--fresh")
        self.assertExit(proc, 0)
        doc = self.merged(proc.stdout.strip())
        self.assertEqual(doc["context"]["suite_commit"], "beef000")
        # A journal of an older sweep, which recorded no sha256, is refused too.
        lines = self.journal_lines()
        del lines[0]["sweep"]["sha256"]
        self.write("j.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
        proc = self.sweep(*args)
        self.assertExit(proc, 2)
        self.assertIn("(an unrecorded sha256, libtorch_version 2.10.0", proc.stderr)

    def test_bad_input_exits_2(self):
        proc = self.sweep("--benchmark_filter=Fake/ok", "--benchmark_format=json")
        self.assertExit(proc, 2)
        self.assertIn("--benchmark_format is the sweep's own: use --out", proc.stderr)
        proc = self.sweep("--benchmark_filter=Fake/ok", "--dtype=fp99")
        self.assertExit(proc, 2)
        self.assertIn("bench refused the arguments (exit 2): bench: unknown --dtype 'fp99'",
                      proc.stderr)
        # The default suite's members are bench's: one it does not have is
        # refused before anything runs, with the valid ones.
        proc = self.sweep("--suite_skip=Fake/nope", journal="skip.jsonl")
        self.assertExit(proc, 2)
        self.assertIn("bench refused the arguments (exit 2): bench: --suite_skip: Fake/nope is "
                      "not a member of the default suite; its members: Fake/ok, Fake/fast, "
                      "Fake/error, Fake/kill", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "skip.jsonl")))
        proc = self.sweep("--benchmark_filter=Nothing")
        self.assertExit(proc, 2)
        self.assertIn("the bench arguments select no benchmark", proc.stderr)

    def test_each_run_keeps_its_own_context(self):
        proc = self.sweep("--benchmark_filter=Fake/(ok|error)")
        self.assertExit(proc, 0)
        out = proc.stdout.strip()
        doc = self.merged(out)
        context = doc["context"]
        # What every run reported alike stays on top; what differs (the date,
        # the load) moves into each run's entries.
        self.assertEqual(context["libtorch_version"], "2.9.0")
        self.assertEqual(context["num_cpus"], 2)
        self.assertNotIn("date", context)
        self.assertNotIn("load_avg", context)
        entries = self.by_name(doc)
        for name in (FAKE_OK, FAKE_ERROR):
            self.assertEqual(sorted(entries[name]["context"]), ["date", "load_avg"])
        lines = self.journal_lines()[1:]
        self.assertEqual([entries[r["name"]]["context"]["date"] for r in lines],
                         [r["context"]["date"] for r in lines])
        self.assertComparePyReads(out, out, FAKE_OK)
        self.assertExit(self.run_tool("gate", out, out), 0)

    def test_a_benchmark_that_reported_an_error_is_counted(self):
        # Its process ran to the end, but it measured nothing: the summary
        # must not say that nothing went wrong.
        proc = self.sweep("--benchmark_filter=Fake/(ok|error|kill)")
        self.assertExit(proc, 0)
        self.assertIn("merged 3 benchmarks (1 failed, 1 errored) into", proc.stderr)
        doc = self.merged(proc.stdout.strip())
        self.assertEqual(doc["context"]["sweep"],
                         "3 benchmarks, each in its own bench process; 1 failed, 1 errored")
        proc = self.sweep("--benchmark_filter=Fake/ok", journal="ok.jsonl")
        self.assertIn("merged 1 benchmarks (0 failed) into", proc.stderr)


class FakeSuiteSweepTest(SweepRunner, ToolTest):
    """The sweep of bench's default suite (no filter), a member at a time,
    with fake_bench.py as bench."""

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "runs.log")
        # Fake/ok's train dies after its step has reported: the step is kept.
        self.bench = fake_bench(os.path.join(self.tmp, "bench"), FAKE_BENCH_LOG=self.log,
                                FAKE_BENCH_KILL="^Fake/ok/cpu/train/")

    def runs(self):
        """The --suite_skip of each bench process that ran benchmarks, in
        order, after checking that it ran them as the default suite does:
        without a filter or a minimum time of its own."""
        skips = []
        with open(self.log) as f:
            for line in f:
                argv = json.loads(line)[1:]
                if "--benchmark_list_tests" in argv or "--list_families" in argv:
                    continue
                self.assertFalse([a for a in argv if a.startswith(
                    ("--benchmark_filter", "--benchmark_min_time"))], argv)
                skips.append([a.split("=", 1)[1] for a in argv
                              if a.startswith("--suite_skip=")])
        os.remove(self.log)
        return skips

    def test_each_member_runs_in_its_own_process_with_the_suites_names(self):
        proc = self.sweep()
        self.assertExit(proc, 0)
        self.assertEqual(self.runs(), [[",".join(m for m in FAKE_MEMBERS if m != member)]
                                       for member in FAKE_MEMBERS])
        doc = self.merged(proc.stdout.strip())
        self.assertEqual([e["name"] for e in doc["benchmarks"]], FAKE_SUITE)
        self.assertEqual(doc["context"]["sweep"],
                         "8 benchmarks of bench's default suite, each Family/size in its own "
                         "bench process; 3 failed, 2 errored")
        entries = self.by_name(doc)
        ok_step, ok_train, _, _, error_step, _, kill_step, kill_train = FAKE_SUITE
        for name in FAKE_SUITE[2:4] + [ok_step]:
            self.assertFalse(entries[name].get("error_occurred"), name)
            self.assertGreater(entries[name]["real_time"], 0)
        self.assertEqual(entries[error_step]["error_message"], "no such device: fake")
        # A crash loses what of its member had not reported, each saying why.
        for name, member in ((ok_train, "Fake/ok"), (kill_step, "Fake/kill"),
                             (kill_train, "Fake/kill")):
            self.assertTrue(entries[name]["error_occurred"])
            self.assertEqual(entries[name]["error_message"],
                             "bench was killed by SIGKILL (out of memory?), in the bench process "
                             f"of {member}, before this benchmark reported")
        self.assertEqual(self.journal_names(), FAKE_SUITE)
        self.assertIn("[8/8] Fake/kill/cpu/train/batch:1/fp32/manual_time: FAILED", proc.stderr)
        self.assertComparePyReads(proc.stdout.strip(), proc.stdout.strip(), ok_step)

        # Resuming runs no member whose benchmarks are all in the journal;
        # --retry-failed runs those with a failed one again, whole.
        proc = self.sweep()
        self.assertExit(proc, 0)
        self.assertEqual(self.runs(), [])
        self.assertIn("sweep: 4 of 4 Family/size of the default suite (8 of 8 benchmarks) "
                      "already in",
                      proc.stderr)
        proc = self.sweep("--retry-failed")
        self.assertExit(proc, 0)
        self.assertEqual(self.runs(), [["Fake/fast,Fake/error,Fake/kill"],
                                       ["Fake/ok,Fake/fast,Fake/error"]])
        self.assertEqual(self.journal_names(), FAKE_SUITE + [ok_step, ok_train, kill_step,
                                                             kill_train])
        # A member that a killed sweep left half in the journal runs again.
        lines = self.journal_lines()[:len(FAKE_SUITE)]  # the header, all but the last
        self.write("j.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
        proc = self.sweep()
        self.assertExit(proc, 0)
        self.assertEqual(self.runs(), [["Fake/ok,Fake/fast,Fake/error"]])
        self.assertIn("sweep: 3 of 4 Family/size of the default suite (6 of 8 benchmarks) "
                      "already in",
                      proc.stderr)
        proc = self.sweep("--merge-only")
        self.assertExit(proc, 0)
        self.assertIn("of bench's default suite", self.merged(proc.stdout.strip())["context"]["sweep"])

    def test_the_users_suite_skip_is_kept(self):
        for args in (("--suite_skip=Fake/kill,Fake/error",),
                     ("--benchmark_filter=", "--suite_skip=Fake/kill,Fake/error")):
            proc = self.sweep(*args, journal=f"j{len(args)}.jsonl")
            self.assertExit(proc, 0)
            self.assertEqual(self.runs(), [["Fake/fast,Fake/error,Fake/kill"],
                                           ["Fake/ok,Fake/error,Fake/kill"]])
            self.assertEqual([e["name"] for e in self.merged(proc.stdout.strip())["benchmarks"]],
                             FAKE_SUITE[:4])

    def test_a_member_that_takes_too_long_is_stopped(self):
        # Its limit is --timeout for each of its benchmarks.
        slow = fake_bench(os.path.join(self.tmp, "slow"), FAKE_BENCH_ONLY="Fake/ok/")
        wrapper = self.write("sleepy", f'#!/bin/sh\ncase "$*" in *benchmark_out*) sleep 30;; '
                                       f'esac\nexec {slow} "$@"\n')
        os.chmod(wrapper, 0o755)
        proc = self.sweep("--timeout", "0.5", bench=wrapper)
        self.assertExit(proc, 0)
        entries = self.by_name(self.merged(proc.stdout.strip()))
        self.assertEqual(sorted(entries), FAKE_SUITE[:2])
        for entry in entries.values():
            self.assertEqual(entry["error_message"], "timed out after 1 s, in the bench process "
                             "of Fake/ok, before this benchmark reported")


class SuiteGroupsTest(RealBenchTest):
    """The default suite's members as the real bench spells them: running
    each with --suite_skip naming every other member lists exactly its
    benchmarks of the default suite's listing (listing only: nothing runs)."""

    def test_each_member_alone_lists_its_benchmarks(self):
        from ltb.bench_process.bench import list_benchmarks
        from ltb.bench_process.suite import groups
        grouped, spelled = groups(self.bench, [])
        self.assertIn("Ops/matmul", spelled)
        self.assertIn("GPT2/small", grouped)
        self.assertEqual([n for names in grouped.values() for n in names],
                         list_benchmarks(self.bench, []))
        for member, names in grouped.items():
            skip = ",".join(m for m in spelled if m != member)
            self.assertEqual(list_benchmarks(self.bench, [f"--suite_skip={skip}"]), names,
                             member)


if __name__ == "__main__":
    unittest.main()
