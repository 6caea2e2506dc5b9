"""tools/gpu-check: its rehearsal (--devices=cpu, nano sizes) against the
real bench when it is built, and a failing bench, always."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

from helpers import TOOLS, ToolTest, built_bench, stable_copy

# Each check of the summary, and the status the rehearsal gives it.
REHEARSAL = {
    "bench runs and lists the suite": "ran",
    "the tools' Python packages": "ran",
    "default suite": "ran",
    "CPU/GPU speedup summary": "skipped",
    "every family and phase in fp32, bf16, fp16": "ran",
    "TF32 (--tf32=true)": "skipped|not offered",
    "CUDA graphs (--cuda_graphs=true)": "skipped|not offered",
    "generation: prefill and decode counters": "ran",
    "gpu_util_% during train_epoch": "skipped",
    "train_epoch from memory": "ran",
    "train_epoch from disk": "ran",
    "--profile": "ran",
    "gpu_busy_% from --profile": "skipped",
    "transfer ops: pinned and pageable, both directions": "skipped",
    "--sync=false against --sync=true": "ran",
    "memory guard refuses a model that cannot fit": "ran",
    "host out-of-memory error caught, the run goes on": "ran",
    "CUDA out-of-memory error caught, the run goes on": "skipped",
    "one-rank data-parallel run through tools/launch (Gloo on the CPU)": "ran",
    "one-rank NCCL data-parallel run through tools/launch": "skipped",
    "a failing rank stops the others, which write what they measured": "ran",
    "ctest": "skipped",
}
FAMILIES = ("Transformer", "GPT2", "Llama", "ResNet", "CNN", "Encoder", "Whisper", "EncDec")


def summary_rows(text):
    """check -> status from summary.md's table."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| (.+?) \| (ran|skipped|FAILED|not offered) \| \d* \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def gpu_check(*args, timeout=900):
    return subprocess.run([sys.executable, os.path.join(TOOLS, "gpu-check"), *args],
                          capture_output=True, text=True, timeout=timeout)


class RehearsalTest(unittest.TestCase):
    """One rehearsal, run once for the class, on a stable copy of the built bench."""

    @classmethod
    def setUpClass(cls):
        if os.environ.get("LTB_IN_GPU_CHECK"):
            raise unittest.SkipTest("running inside gpu-check already")
        cls.tmp = tempfile.TemporaryDirectory()
        bench = stable_copy(cls.tmp.name)
        if bench is None:
            cls.tmp.cleanup()
            raise unittest.SkipTest(f"no bench binary at {built_bench()} (set LTB_BENCH)")
        cls.out = os.path.join(cls.tmp.name, "out")
        start = time.monotonic()
        cls.proc = gpu_check("--devices=cpu", "--no-ctest", f"--bench={bench}", cls.out)
        cls.seconds = time.monotonic() - start
        with open(os.path.join(cls.out, "summary.md")) as f:
            cls.summary = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def load(self, name):
        with open(os.path.join(self.out, name + ".json")) as f:
            doc = json.load(f)
        return {e["name"].replace("/manual_time", ""): e for e in doc["benchmarks"]}

    def test_it_passes(self):
        self.assertEqual(self.proc.returncode, 0,
                         f"stdout:\n{self.proc.stdout[-6000:]}\nstderr:\n{self.proc.stderr}")
        self.assertIn("result: passed", self.summary)
        print(f"\ngpu-check rehearsal: {self.seconds:.0f} s", file=sys.stderr)

    def test_it_writes_the_log_and_the_summary(self):
        for name in ("console.log", "summary.md", "default.json", "precision.json"):
            self.assertTrue(os.path.getsize(os.path.join(self.out, name)) > 0, name)
        with open(os.path.join(self.out, "console.log")) as f:
            log = f.read()
        self.assertIn("=== default suite ===", log)
        self.assertIn("=== summary ===", log)

    def test_summary_lists_every_check_ran_or_skipped(self):
        rows = summary_rows(self.summary)
        self.assertEqual(set(rows), set(REHEARSAL), self.summary)
        for check, status in REHEARSAL.items():
            self.assertRegex(rows[check], f"^({status})$", check)
            self.assertIn(f"## {check}: {rows[check]}", self.summary)
        # What was skipped says why.
        self.assertIn("needs a CUDA GPU", self.summary)
        self.assertIn("- --no-ctest", self.summary)
        # The console ends with the same list.
        for check in REHEARSAL:
            self.assertIn(check, self.proc.stdout)

    def test_every_family_ran_in_every_precision(self):
        default = self.load("default")
        for family in FAMILIES:
            self.assertTrue(any(n.startswith(f"{family}/nano/cpu/") for n in default), family)
        self.assertTrue(any(n.startswith("Ops/matmul/256x256/cpu/") for n in default))
        precision = self.load("precision")
        for family in FAMILIES:
            for dtype in ("fp32", "bf16", "fp16"):
                ran = [n for n, e in precision.items() if n.startswith(f"{family}/nano/cpu/")
                       and f"/{dtype}" in n and not e.get("error_occurred")]
                self.assertTrue(ran, f"{family} {dtype}")

    def test_the_checks_show_what_they_check(self):
        generation = self.load("generation")
        gen = [e for n, e in generation.items() if n.startswith("GPT2/nano/cpu/generate/")]
        self.assertTrue(gen)
        for counter in ("ttft_ms", "tpot_ms", "pp_tok/s", "tg_tok/s"):
            self.assertIn(counter, gen[0])
        for source in ("memory", "disk"):
            epochs = self.load(f"train_epoch_{source}")
            self.assertTrue(any(n.startswith("EncDec/nano/cpu/train_epoch/") for n in epochs))
            self.assertTrue(all("epoch_s" in e for e in epochs.values()))
        nosync = list(self.load("sync_false"))
        self.assertTrue(nosync and all("/nosync" in n for n in nosync), nosync)
        guard = self.load("memory_guard")
        self.assertTrue(guard)
        for name, e in guard.items():
            self.assertTrue(name.startswith("Transformer/2.7B/cpu/train_step/"), name)
            self.assertIn("does not fit", e["error_message"])
        oom = self.load("oom_host")
        medium = [e for n, e in oom.items() if n.startswith("Transformer/medium/cpu/train_step/")]
        self.assertRegex(medium[0]["error_message"], "out of host memory|does not fit")
        after = [e for n, e in oom.items() if n.startswith("GPT2/nano/cpu/forward/")]
        self.assertFalse(after[0].get("error_occurred"))
        with open(os.path.join(self.out, "data_parallel_1.json")) as f:
            one_rank = json.load(f)
        # A process group of one rank, forced through the data-parallel path.
        self.assertEqual(one_rank["context"]["world_size"], "1")
        self.assertEqual(one_rank["context"]["process_group"], "gloo, 1 rank")
        self.assertTrue(all("grad_buckets" in e for e in one_rank["benchmarks"]))
        # Rank 1 failed mid-run: rank 0 wrote what it measured, and the error.
        with open(os.path.join(self.out, "failing_rank_cpu.json")) as f:
            failed = {e["name"].split("/")[1]: e for e in json.load(f)["benchmarks"]}
        self.assertFalse(failed["ok"].get("error_occurred"))
        self.assertTrue(failed["rank1_fails"]["error_occurred"])
        self.assertTrue(any(f.endswith(".ops.txt")
                            for f in os.listdir(os.path.join(self.out, "profile"))))


class FailureTest(ToolTest):
    def test_a_failing_bench_fails_the_check_and_says_what(self):
        bench = self.write("bench", "#!/bin/sh\necho 'bench: no such flag' >&2\nexit 3\n")
        os.chmod(bench, 0o755)
        out = os.path.join(self.tmp, "out")
        proc = gpu_check("--devices=cpu", "--no-ctest", f"--bench={bench}", out, timeout=300)
        self.assertExit(proc, 1)
        self.assertIn("gpu-check: FAILED", proc.stdout)
        self.assertIn("default: bench exited with status 3: bench: no such flag", proc.stdout)
        self.assertIn("tools/launch exited with status 3", proc.stdout)
        with open(os.path.join(out, "summary.md")) as f:
            summary = f.read()
        rows = summary_rows(summary)
        self.assertEqual(rows["default suite"], "FAILED")
        self.assertEqual(rows["transfer ops: pinned and pageable, both directions"], "skipped")
        self.assertIn("result: FAILED", summary)
        self.assertIn("- FAILED: default: bench exited with status 3", summary)
        self.assertTrue(os.path.exists(os.path.join(out, "console.log")))

    def test_an_unexpected_benchmark_error_fails_its_check(self):
        # A bench that runs but reports one benchmark errored (a wrapper that
        # writes such a result wherever --benchmark_out points).
        result = {"context": {"world_size": "1"}, "benchmarks": [
            {"name": "Transformer/nano/cpu/forward/batch:4/seq:512/fp32/manual_time",
             "run_type": "iteration", "real_time": 1.0, "time_unit": "ms",
             "error_occurred": True, "error_message": "LibTorch error: something broke"}]}
        script = (f"import json, sys\nfor a in sys.argv[1:]:\n"
                  f"    if a.startswith('--benchmark_out='):\n"
                  f"        json.dump({result!r}, open(a.split('=', 1)[1], 'w'))\n")
        bench = self.write("bench", f"#!{sys.executable}\n{script}")
        os.chmod(bench, 0o755)
        out = os.path.join(self.tmp, "out")
        proc = gpu_check("--devices=cpu", "--no-ctest", f"--bench={bench}", out, timeout=300)
        self.assertExit(proc, 1)
        self.assertIn("sync_true: Transformer/nano/cpu/forward/batch:4/seq:512/fp32: "
                      "LibTorch error: something broke", proc.stdout)
        # The memory guard's refusal is expected; a benchmark it let run is not.
        self.assertIn("memory_guard: Transformer/nano/cpu/forward/batch:4/seq:512/fp32: "
                      "LibTorch error", proc.stdout)

    def test_a_bench_that_hangs_is_stopped_and_fails(self):
        bench = self.write("bench", "#!/bin/sh\necho started\nexec sleep 60\n")
        os.chmod(bench, 0o755)
        out = os.path.join(self.tmp, "out")
        start = time.monotonic()
        proc = gpu_check("--devices=cpu", "--no-ctest", "--timeout=0.5", f"--bench={bench}", out,
                         timeout=300)
        self.assertLess(time.monotonic() - start, 120)
        self.assertExit(proc, 1)
        self.assertIn("default: bench exited with status 124: stopped after 0.5 s", proc.stdout)

    def test_bad_usage(self):
        proc = gpu_check(f"--bench={os.path.join(self.tmp, 'missing')}", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("not an executable file", proc.stderr)
        proc = gpu_check("--devices=tpu", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("--devices", proc.stderr)


if __name__ == "__main__":
    unittest.main()
