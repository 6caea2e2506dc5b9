"""tools/gpu-check and tools/gpu-run: the quick rehearsal (--devices=cpu,
nano sizes) of a whole visit against the real bench when it is built, and
a failing, a hanging and an interrupted bench, always."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

from tests.helpers import REPO, TOOLS, ToolTest, built_bench, stable_copy

# Each check of the summary, and the status the rehearsal gives it.
REHEARSAL = {
    "bench runs and lists the suite": "ran",
    "the tools' Python packages": "ran",
    "default suite": "ran",
    "CPU/GPU speedup summary": "skipped",
    "the matrix rate and the memory bandwidth against the peaks": "ran",
    "every family and phase in fp32, bf16, fp16": "ran",
    "TF32 (--tf32=true)": "skipped|not offered",
    "CUDA graphs (--cuda_graphs=true)": "skipped|not offered",
    "generation: prefill and decode counters": "ran",
    "serve: Server and Offline under MLPerf LoadGen": "ran",
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
# What a packed run leaves: plain files alone, at most eight (what comes back
# from the GPU machine).
PACKED = {"summary.md", "console.log", "results.tar.gz"}
VISIT = PACKED | {"visit.md", "setup.log"}
FAMILIES = ("Transformer", "GPT2", "Llama", "ResNet", "CNN", "Encoder", "Whisper", "EncDec")


def summary_rows(text):
    """check -> status from summary.md's table."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| (.+?) \| (ran|skipped|FAILED|not offered|out of time|INTERRUPTED) "
                     r"\| \d* \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def gpu_check(*args, timeout=900, python=sys.executable, env=None):
    return subprocess.run([python, os.path.join(TOOLS, "gpu-check"), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def archived(path):
    """name -> bytes of every file in a results.tar.gz."""
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


class RehearsalTest(unittest.TestCase):
    """One visit rehearsed on the CPU, run once for the class on a stable copy
    of the built bench: tools/gpu-run (no set-up: --prebuilt, which starts
    here), which runs tools/gpu-check --quick --devices=cpu."""

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
        cls.proc = subprocess.run(
            [sys.executable, os.path.join(TOOLS, "gpu-run"), "--devices=cpu", "--budget=3000",
             f"--prebuilt={bench}", cls.out], capture_output=True, text=True, timeout=1800)
        cls.seconds = time.monotonic() - start
        with open(os.path.join(cls.out, "summary.md")) as f:
            cls.summary = f.read()
        cls.files = archived(os.path.join(cls.out, "results.tar.gz"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def load(self, name):
        doc = json.loads(self.files[f"gpu-check/{name}.json"])
        return {e["name"].replace("/manual_time", ""): e for e in doc["benchmarks"]}

    def load_doc(self, name):
        return json.loads(self.files[f"gpu-check/{name}.json"])

    def test_it_passes(self):
        self.assertEqual(self.proc.returncode, 0,
                         f"stdout:\n{self.proc.stdout[-6000:]}\nstderr:\n{self.proc.stderr}")
        self.assertIn("result: passed", self.summary)
        print(f"\ngpu-check rehearsal: {self.seconds:.0f} s", file=sys.stderr)

    def test_it_writes_the_log_and_the_summary(self):
        for name in ("console.log", "summary.md"):
            self.assertTrue(os.path.getsize(os.path.join(self.out, name)) > 0, name)
        with open(os.path.join(self.out, "console.log")) as f:
            log = f.read()
        self.assertIn("=== default suite ===", log)
        self.assertIn("=== summary ===", log)

    def test_it_leaves_eight_plain_files_at_most_and_one_archive_of_every_json(self):
        # No setup.log: a --prebuilt bench that starts skips the set-up.
        self.assertEqual(set(os.listdir(self.out)), VISIT - {"setup.log"})
        self.assertTrue(all(os.path.isfile(os.path.join(self.out, n))
                            for n in os.listdir(self.out)))
        names = {n[len("gpu-check/"):] for n in self.files}
        jsons = {n for n in names if n.endswith(".json") and "/" not in n}
        # One JSON per bench run of the rehearsal, each one readable.
        self.assertEqual(jsons, {
            "default.json", "roofline.json", "precision.json", "generation.json", "serve.json",
            "serve_generate.json", "serve_graphs.json", "serve_graphs_bf16.json",
            "train_epoch_memory.json",
            "train_epoch_disk.json", "profile.json", "sync_true.json", "sync_false.json",
            "memory_guard.json", "oom_host.json", "data_parallel_1.json",
            "failing_rank_cpu.json"})
        for n in jsons:
            self.assertIn("benchmarks", json.loads(self.files["gpu-check/" + n]), n)
        self.assertTrue(any(n.startswith("profile/") and n.endswith(".ops.txt") for n in names))
        self.assertTrue(all(n.startswith("gpu-check/") for n in self.files))

    def test_the_visit_says_what_ran_and_how_long_each_phase_took(self):
        with open(os.path.join(self.out, "visit.md")) as f:
            visit = f.read()
        for text in (visit, self.summary):
            self.assertIn("## The visit (tools/gpu-run)", text)
            self.assertRegex(text, r"\| probe \| ran \| \d+ \|")
            self.assertRegex(text, r"\| setup \| skipped \| \d+ \| --prebuilt \S+ starts here: "
                                   r"no build")
            self.assertRegex(text, r"\| gpu-check \| ran \| \d+ \| --devices=cpu")
            self.assertRegex(text, r"\| cores \| \d+ \|")
        self.assertIn("# gpu-check rehearsal on cpu", self.summary)
        self.assertIn(" --quick", self.summary.splitlines()[0])
        self.assertRegex(self.summary, r"budget: \d+ s")
        self.assertIn("files in", self.proc.stdout)

    def test_summary_lists_every_check_ran_or_skipped(self):
        rows = summary_rows(self.summary)
        self.assertEqual(set(rows), set(REHEARSAL), self.summary)
        for check, status in REHEARSAL.items():
            self.assertRegex(rows[check], f"^({status})$", check)
            self.assertIn(f"## {check}: {rows[check]}", self.summary)
        # What was skipped says why.
        self.assertIn("needs a CUDA GPU", self.summary)
        self.assertIn("- --quick (--ctest runs it)", self.summary)
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
        served = self.load("serve_generate")
        self.assertTrue(served)
        for name, e in served.items():
            self.assertRegex(name, r"^GPT2/nano/cpu/serve/scenario:Server/qps:10/max_batch:4/"
                                   r"prompt:4:16/output:2:8/fp32")
            for counter in ("tokens/s", "ttft_p99_ms", "tpot_p99_ms", "mean_active_slots"):
                self.assertIn(counter, e)
        # Graphed against eager serving: the CPU has no graphs, so eager alone.
        offline = self.load("serve_graphs")
        # Offline's query holds the rehearsal's minimum count, 8 samples.
        self.assertEqual(list(offline), ["GPT2/nano/cpu/serve/scenario:Offline/samples:8/"
                                         "max_batch:4/prompt:4:16/output:2:8/fp32/iterations:1"])
        for e in offline.values():
            self.assertGreater(e["tokens/s"], 0)
            self.assertGreater(e["decode_steps"], 0)
        self.assertIn("serve_graphs: eager alone (no device with CUDA graphs)", self.summary)
        # And Llama's in bf16 (cuDNN's attention on a Hopper GPU).
        bf16 = self.load("serve_graphs_bf16")
        self.assertEqual(list(bf16), ["Llama/nano/cpu/serve/scenario:Offline/samples:8/"
                                      "max_batch:4/prompt:4:16/output:2:8/bf16/iterations:1"])
        self.assertTrue(all(e["tokens/s"] > 0 for e in bf16.values()))
        self.assertIn("serve_graphs_bf16: eager alone (no device with CUDA graphs)",
                      self.summary)
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
        one_rank = self.load_doc("data_parallel_1")
        # A process group of one rank, forced through the data-parallel path.
        self.assertEqual(one_rank["context"]["world_size"], "1")
        self.assertEqual(one_rank["context"]["process_group"], "gloo, 1 rank")
        self.assertTrue(all("grad_buckets" in e for e in one_rank["benchmarks"]))
        # Rank 1 failed mid-run: rank 0 wrote what it measured, and the error.
        failed = {e["name"].split("/")[1]: e
                  for e in self.load_doc("failing_rank_cpu")["benchmarks"]}
        self.assertFalse(failed["ok"].get("error_occurred"))
        self.assertTrue(failed["rank1_fails"]["error_occurred"])
        # The host out-of-memory run's address-space limit follows what bench maps.
        self.assertRegex(self.summary, r"address-space limit \d+\.\d GiB \(\d+\.\d GiB of files")
        # torch.sum, read against the bandwidth peak the roofline run divided by.
        self.assertRegex(self.summary, r"torch\.sum over 0\.25 GiB on cpu: [0-9.]+ TB/s, "
                                       r"0\.\d\d of the bandwidth peak 1 TB/s")


class ServeCommandTest(unittest.TestCase):
    """The serve step's generation command, on a GPU and in the rehearsal,
    registers one Server benchmark of GPT2's generation in bench."""

    def test_the_generation_command_registers_one_server_benchmark(self):
        import types

        from ltb.gpu.check import serve

        bench = built_bench()
        if not os.access(bench, os.X_OK):
            self.skipTest(f"no bench binary at {bench} (set LTB_BENCH)")
        for gpu, size, expected in (
                # The GPU's bounds (200 and 50 ms, not LoadGen's 100) are named.
                (True, "small", "GPT2/small/cpu/serve/scenario:Server/qps:8/max_batch:8/"
                                "prompt:32:128/output:16:64/ttft_bound_ms:200/"
                                "tpot_bound_ms:50/fp32"),
                (False, "nano", "GPT2/nano/cpu/serve/scenario:Server/qps:10/max_batch:4/"
                                "prompt:4:16/output:2:8/fp32")):
            r = types.SimpleNamespace(gpu=gpu, step_devices=["cpu"], step_re="(cpu)",
                                      sizes={"GPT2": size})
            proc = subprocess.run([bench, *serve.text_serve_args(r), "--benchmark_list_tests"],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            listed = [n for n in proc.stdout.split() if n.startswith("GPT2/")]
            self.assertEqual([n.split("/iterations")[0] for n in listed], [expected])


    def test_the_graphs_command_registers_offline_eager_and_graphed_on_a_gpu(self):
        import types

        from ltb.gpu.check import serve

        bench = built_bench()
        if not os.access(bench, os.X_OK):
            self.skipTest(f"no bench binary at {bench} (set LTB_BENCH)")
        # Offline's one query holds the minimum count: 64 samples, 8 rehearsing.
        offline = "/serve/scenario:Offline/samples:{}/max_batch:{}/prompt:{}/output:{}/{}"
        gpu = types.SimpleNamespace(gpu=True, gpus=["cuda"], step_devices=["cpu", "cuda"],
                                    sizes={"GPT2": "small", "Llama": "1B"})
        cpu = types.SimpleNamespace(gpu=False, gpus=[], step_devices=["cpu"],
                                    sizes={"GPT2": "nano", "Llama": "nano"})
        gpu_lengths, cpu_lengths = (64, 8, "32:128", "16:64"), (8, 4, "4:16", "2:8")
        for r, family, dtype, expected in (
                # A GPU's names list without one: registered all the same.
                (gpu, "GPT2", "fp32",
                 ["GPT2/small/cuda" + offline.format(*gpu_lengths, "fp32"),
                  "GPT2/small/cuda" + offline.format(*gpu_lengths, "fp32") + "/graph"]),
                (gpu, "Llama", "bf16",
                 ["Llama/1B/cuda" + offline.format(*gpu_lengths, "bf16"),
                  "Llama/1B/cuda" + offline.format(*gpu_lengths, "bf16") + "/graph"]),
                (cpu, "GPT2", "fp32", ["GPT2/nano/cpu" + offline.format(*cpu_lengths, "fp32")]),
                (cpu, "Llama", "bf16",
                 ["Llama/nano/cpu" + offline.format(*cpu_lengths, "bf16")])):
            proc = subprocess.run([bench, *serve.graph_serve_args(r, family, dtype),
                                   "--benchmark_list_tests"],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            listed = [n.split("/iterations")[0] for n in proc.stdout.split()
                      if n.startswith(family + "/")]
            self.assertEqual(listed, expected)


class GraphedServingTest(unittest.TestCase):
    """The serve step's graphed-against-eager notes and failures, from
    results as bench writes them."""

    NAME = ("GPT2/small/cuda/serve/scenario:Offline/samples:64/max_batch:8/prompt:32:128/"
            "output:16:64/fp32")

    def check(self, entries, gpu=True):
        import types

        from ltb.gpu.check import serve
        from ltb.gpu.check.summary import Check

        c = Check("serve")
        doc = {"benchmarks": [dict(e, name=n + "/iterations:1/manual_time")
                              for n, e in entries.items()]}
        serve.graphed_serving(c, types.SimpleNamespace(gpu=gpu), doc)
        return c

    def test_a_graphed_serve_is_shown_against_its_eager_twin(self):
        c = self.check({
            self.NAME: {"tokens/s": 1000.0, "tpot_p50_ms": 8.0, "decode_steps": 330},
            self.NAME + "/graph": {"tokens/s": 2500.0, "tpot_p50_ms": 3.0,
                                   "decode_steps": 330}})
        self.assertEqual(c.failures, [])
        [note] = c.notes
        self.assertIn(f"{self.NAME}/graph against eager: tokens/s 2500 against "
                      "1000", note)
        self.assertIn("tpot_p50_ms 3 against 8", note)
        self.assertTrue(note.endswith("(2.5x)"), note)

    def test_other_decode_steps_or_no_graphed_serve_on_a_gpu_fail(self):
        c = self.check({
            self.NAME: {"tokens/s": 1000.0, "decode_steps": 330},
            self.NAME + "/graph": {"tokens/s": 2500.0, "decode_steps": 300}})
        self.assertEqual(len(c.failures), 1, c.failures)
        self.assertIn("ran 300 decode steps, eager 330", c.failures[0])
        c = self.check({self.NAME: {"tokens/s": 1000.0, "decode_steps": 330}})
        self.assertEqual(c.failures, ["serve_graphs: no graphed serve of generation ran"])
        c = self.check({self.NAME: {"tokens/s": 1000.0, "decode_steps": 330}}, gpu=False)
        self.assertEqual(c.failures, [])
        self.assertIn("eager alone", c.notes[0])


class FailureTest(ToolTest):
    def check_with_results(self, result):
        """The rehearsal with a bench that writes `result` wherever
        --benchmark_out points (a wrapper standing for a real run)."""
        script = (f"import json, sys\nfor a in sys.argv[1:]:\n"
                  f"    if a.startswith('--benchmark_out='):\n"
                  f"        json.dump({result!r}, open(a.split('=', 1)[1], 'w'))\n")
        bench = self.write("bench", f"#!{sys.executable}\n{script}")
        os.chmod(bench, 0o755)
        out = os.path.join(self.tmp, "out")
        return gpu_check("--devices=cpu", "--no-ctest", f"--bench={bench}", out, timeout=300)

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
        proc = self.check_with_results(result)
        self.assertExit(proc, 1)
        self.assertIn("sync_true: Transformer/nano/cpu/forward/batch:4/seq:512/fp32: "
                      "LibTorch error: something broke", proc.stdout)
        # The memory guard's refusal is expected; a benchmark it let run is not.
        self.assertIn("memory_guard: Transformer/nano/cpu/forward/batch:4/seq:512/fp32: "
                      "LibTorch error", proc.stdout)

    def test_a_bandwidth_peak_that_torch_sum_beats_fails_the_roofline(self):
        # The roofline check's torch.sum against a bandwidth peak of 1 kB/s,
        # which any torch.sum beats, and against one no memory reaches.
        import argparse
        from ltb.gpu import check as gc
        from ltb.gpu.check.roofline import torch_sum
        args = argparse.Namespace(outdir=os.path.join(self.tmp, "out"), devices="cpu",
                                  bench=shutil.which("true"), quick=False, pack=False,
                                  budget=None, timeout=120)
        check = gc.GpuCheck(args)
        check.torch_python = (sys.executable, [])  # the tests' Python has torch
        low = gc.Check("roofline")
        torch_sum(check, low, "cpu", {"peak_bandwidth_cpu": "1000 bytes/s (measured: x)"})
        self.assertEqual(low.status, gc.FAILED)
        self.assertRegex(low.failures[0], r"torch\.sum over 0\.25 GiB on cpu read [0-9.e+-]+ "
                                          r"TB/s, above the bandwidth peak 1e-09 TB/s \(1000 "
                                          r"bytes/s \(measured: x\)\): a wrong peak")
        high = gc.Check("roofline")
        torch_sum(check, high, "cpu", {"peak_bandwidth_cpu": "1e15 bytes/s (--peak_bandwidth)"})
        self.assertEqual((high.status, high.failures), (gc.RAN, []))
        self.assertRegex(high.notes[0], r"torch\.sum over 0\.25 GiB on cpu: [0-9.]+ TB/s, "
                                        r"0\.00 of the bandwidth peak 1000 TB/s")
        none = gc.Check("roofline")
        torch_sum(check, none, "cpu", {})
        self.assertEqual(none.notes, ["torch.sum on cpu: not compared (no peak_bandwidth_cpu "
                                      "in the context)"])
        check.torch_python = (sys.executable, ["/usr/bin/python3"])  # none has torch
        without = gc.Check("roofline")
        torch_sum(check, without, "cpu", {"peak_bandwidth_cpu": "1000 bytes/s (measured: x)"})
        self.assertEqual((without.status, without.notes),
                         (gc.RAN, ["torch.sum on cpu: not compared (no Python with torch)"]))

    def test_a_bench_that_hangs_is_stopped_and_fails(self):
        # It hangs in the default suite's run alone (each other run would
        # wait out the timeout too); the rest answer at once.
        bench = self.write("bench", "#!/bin/sh\ncase \"$*\" in *default.json*) "
                                    "echo started; exec sleep 60;; esac\necho listed\n")
        os.chmod(bench, 0o755)
        out = os.path.join(self.tmp, "out")
        start = time.monotonic()
        proc = gpu_check("--devices=cpu", "--no-ctest", "--timeout=0.5", f"--bench={bench}", out,
                         timeout=300)
        self.assertLess(time.monotonic() - start, 120)
        self.assertExit(proc, 1)
        self.assertIn("default: bench exited with status 124: stopped after 0.5 s", proc.stdout)

    def test_a_step_that_would_start_past_the_budget_is_skipped_as_out_of_time(self):
        calls = os.path.join(self.tmp, "calls")
        bench = self.write("bench", f"#!/bin/sh\necho \"$*\" >>{calls}\necho listed\n")
        os.chmod(bench, 0o755)
        out = os.path.join(self.tmp, "out")
        # The rehearsal's default suite needs about 6 s: not started in 5.
        proc = gpu_check("--quick", "--devices=cpu", "--budget=5", f"--bench={bench}", out,
                         timeout=300)
        self.assertExit(proc, 1)
        with open(os.path.join(out, "summary.md")) as f:
            summary = f.read()
        rows = summary_rows(summary)
        self.assertEqual(rows["default suite"], "out of time")
        self.assertEqual(rows["precision"], "out of time")
        self.assertRegex(summary, r"## default suite: out of time\n\n- \d+ s of the 5 s budget "
                                  r"left, and this step needs about 6 s")
        self.assertIn("result: FAILED", summary)
        with open(calls) as f:
            ran = f.read()
        # Neither was started (later, cheaper steps may fit in what is left).
        self.assertNotIn("default.json", ran)
        self.assertNotIn("precision.json", ran)
        self.assertEqual(set(os.listdir(out)), PACKED)

    def test_bad_usage(self):
        proc = gpu_check(f"--bench={os.path.join(self.tmp, 'missing')}", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("not an executable file", proc.stderr)
        proc = gpu_check("--devices=tpu", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("--devices", proc.stderr)

    def test_budget_and_ctest_flags(self):
        bench = self.write("bench", "#!/bin/sh\n")
        os.chmod(bench, 0o755)
        proc = gpu_check("--budget=0", f"--bench={bench}", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("--budget", proc.stderr)
        proc = gpu_check("--ctest", f"--bench={bench}", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("--ctest goes with --quick", proc.stderr)


# A bench that lists and answers --help at once, and otherwise records its
# process id and sleeps: a step that runs for as long as the test likes.
SLEEPING_BENCH = """#!/bin/sh
case "$*" in *--benchmark_list_tests*|*--help*) echo Transformer/nano/cpu/forward; exit 0;; esac
echo $$ >>{pids}
echo started
exec sleep 300
"""


class InterruptTest(ToolTest):
    """A signal in the middle of a step: the step's processes are stopped
    and the summary names it; every file is still there."""

    def start(self, tool, *args, python=sys.executable, env=None):
        self.pids = os.path.join(self.tmp, "pids")
        bench = self.write("bench", SLEEPING_BENCH.format(pids=self.pids))
        os.chmod(bench, 0o755)
        self.out = os.path.join(self.tmp, "out")
        log = open(os.path.join(self.tmp, "stdout"), "w")
        self.addCleanup(log.close)
        proc = subprocess.Popen([python, os.path.join(TOOLS, tool), *args, "--devices=cpu",
                                 f"--bench={bench}", self.out], stdout=log,
                                stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        # Until the default suite's bench is running (it sleeps).
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if os.path.exists(self.pids):
                break
            time.sleep(0.2)
        self.assertIsNone(proc.poll(), "it ended before its bench ran")
        self.assertTrue(os.path.exists(self.pids), "its bench did not start")
        return proc

    def assertStopped(self):
        with open(self.pids) as f:
            pids = [int(p) for p in f.read().split()]
        self.assertEqual(len(pids), 1)
        for _ in range(50):
            try:
                os.kill(pids[0], 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        self.fail(f"bench (process {pids[0]}) still runs")

    def summary(self):
        with open(os.path.join(self.out, "summary.md")) as f:
            return f.read()

    def test_gpu_check_stopped_by_sigint_names_the_step(self):
        # Started by a python3 that lacks the tools' packages where this
        # machine has one: the project's venv runs them.
        system = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
        proc = self.start("gpu-check", "--quick", python=system)
        proc.send_signal(signal.SIGINT)
        self.assertEqual(proc.wait(timeout=120), 128 + signal.SIGINT)
        self.assertStopped()
        summary = self.summary()
        self.assertIn("result: INTERRUPTED by SIGINT during 'default suite'", summary)
        rows = summary_rows(summary)
        self.assertEqual(rows["default suite (interrupted)"], "INTERRUPTED")
        self.assertEqual(rows["bench runs and lists the suite"], "ran")
        self.assertNotIn("precision", " ".join(rows))  # nothing started after it
        self.assertEqual(set(os.listdir(self.out)), PACKED)
        self.assertTrue(all(n.startswith("gpu-check/")
                            for n in archived(os.path.join(self.out, "results.tar.gz"))))
        with open(os.path.join(self.out, "console.log")) as f:
            self.assertIn("SIGINT during the step 'default suite'", f.read())
        if subprocess.run([system, "-c", "import scipy"], capture_output=True).returncode:
            self.assertEqual(rows["the tools' Python packages"], "ran", summary)
            self.assertRegex(summary, r"- \S+ has scipy, matplotlib, yaml")

    def test_gpu_run_stopped_by_sigterm_leaves_its_files(self):
        proc = self.start("gpu-run", "--budget=3000")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=120), 128 + signal.SIGTERM)
        self.assertStopped()
        summary = self.summary()
        self.assertIn("result: INTERRUPTED by SIGTERM during 'default suite'", summary)
        self.assertIn("INTERRUPTED by SIGTERM during 'gpu-check'", summary)
        self.assertRegex(summary, r"\| gpu-check \| INTERRUPTED \| \d+ \|")
        self.assertTrue(set(os.listdir(self.out)) <= VISIT, os.listdir(self.out))
        self.assertLessEqual(len(os.listdir(self.out)), 8)
        with open(os.path.join(self.out, "visit.md")) as f:
            self.assertIn("INTERRUPTED by SIGTERM during 'gpu-check'", f.read())

    def test_gpu_run_refuses_a_folder_of_other_files(self):
        out = os.path.join(self.tmp, "mine")
        os.makedirs(out)
        self.write("mine/thesis.tex", "")
        bench = self.write("bench", "#!/bin/sh\n")
        os.chmod(bench, 0o755)
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu-run"),
                               f"--bench={bench}", out], capture_output=True, text=True)
        self.assertExit(proc, 2)
        self.assertIn("thesis.tex", proc.stderr)
        self.assertTrue(os.path.exists(os.path.join(out, "thesis.tex")))


class PrebuiltTest(ToolTest):
    """gpu-run --prebuilt: a bench built elsewhere is used where it starts,
    with the Python's torch and nvidia libraries and the kit's on
    LD_LIBRARY_PATH; where it does not start, why, and the build runs."""

    def visit(self, script):
        import argparse
        from ltb.gpu import run as gpu_run
        bench = self.write("prebuilt", "#!/bin/sh\n" + script)
        os.chmod(bench, 0o755)
        kit = os.path.join(self.tmp, "kit")
        args = argparse.Namespace(outdir=os.path.join(self.tmp, "out"), budget=540,
                                  kit=kit, setup="none", bench=None, prebuilt=bench,
                                  devices="cpu")
        v = gpu_run.Visit(args)
        v.prebuilt = None
        return v, bench

    def test_a_prebuilt_that_starts_is_used_with_its_libraries_found(self):
        seen = os.path.join(self.tmp, "seen")
        v, bench = self.visit(f'echo "$LD_LIBRARY_PATH" > {seen}; exit 0\n')
        old = os.environ.get("LD_LIBRARY_PATH")
        try:
            status, note = v.do_setup()
            passed = os.environ["LD_LIBRARY_PATH"]
        finally:
            if old is None:
                os.environ.pop("LD_LIBRARY_PATH", None)
            else:
                os.environ["LD_LIBRARY_PATH"] = old
        self.assertEqual((status, note), ("skipped", f"--prebuilt {bench} starts here: no build"))
        self.assertEqual(v.prebuilt, bench)
        with open(seen) as f:
            self.assertEqual(f.read().strip(), passed)
        self.assertIn(os.path.join(self.tmp, "kit", "usr", "lib", "x86_64-linux-gnu"),
                      passed.split(":"))

    def test_a_prebuilt_that_does_not_start_says_why_and_falls_back(self):
        v, bench = self.visit("echo 'libtorch_cuda.so: cannot open shared object file' >&2; "
                              "exit 127\n")
        status, note = v.do_setup()
        self.assertIsNone(v.prebuilt)
        # --setup=none: the fallback is no build at all, and it says so.
        self.assertEqual(status, "skipped")
        self.assertEqual(note, f"--prebuilt did not start ({bench} --help exited with status "
                               "127: libtorch_cuda.so: cannot open shared object file); "
                               "--setup=none")

    def test_bench_and_prebuilt_together_are_refused(self):
        bench = self.write("b", "#!/bin/sh\n")
        os.chmod(bench, 0o755)
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu-run"), f"--bench={bench}",
                               f"--prebuilt={bench}", os.path.join(self.tmp, "o")],
                              capture_output=True, text=True)
        self.assertExit(proc, 2)
        self.assertIn("--bench and --prebuilt", proc.stderr)
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu-run"),
                               f"--prebuilt={self.tmp}/nothing", os.path.join(self.tmp, "o")],
                              capture_output=True, text=True)
        self.assertExit(proc, 2)
        self.assertIn("is not an executable file", proc.stderr)


class OfflineKitTest(ToolTest):
    def test_stamp_records_the_commit_the_build_will_name(self):
        kit = os.path.join(self.tmp, "kit")
        os.makedirs(kit)
        proc = subprocess.run([os.path.join(TOOLS, "offline-kit"), "--stamp", kit],
                              capture_output=True, text=True)
        self.assertExit(proc, 1)  # not a kit
        self.write("kit/.ltb-kit", "libbenchmark-dev 1.7.1-1\n")
        proc = subprocess.run([os.path.join(TOOLS, "offline-kit"), "--stamp", kit],
                              capture_output=True, text=True)
        self.assertExit(proc, 0)
        git = subprocess.run(["git", "-C", TOOLS, "describe", "--always", "--dirty",
                              "--abbrev=12"], capture_output=True, text=True)
        if git.returncode != 0:
            self.skipTest("not a git checkout")
        with open(os.path.join(kit, "source-commit")) as f:
            self.assertEqual(f.read().strip(), git.stdout.strip())

    def test_prebuilt_wants_a_kit_and_a_torch_version(self):
        kit = os.path.join(self.tmp, "kit")
        os.makedirs(kit)
        proc = subprocess.run([os.path.join(TOOLS, "offline-kit"), "--prebuilt=2.11.0", kit],
                              capture_output=True, text=True)
        self.assertExit(proc, 1)
        self.assertIn("is not a kit", proc.stderr)
        self.write("kit/.ltb-kit", "libbenchmark-dev 1.7.1-1\n")
        proc = subprocess.run([os.path.join(TOOLS, "offline-kit"), "--prebuilt=latest", kit],
                              capture_output=True, text=True)
        self.assertExit(proc, 2)
        self.assertIn("--prebuilt=latest: a torch version, e.g. --prebuilt=2.11.0", proc.stderr)
        # A kit made before it carried Google Benchmark in Release and LoadGen.
        proc = subprocess.run([os.path.join(TOOLS, "offline-kit"), "--prebuilt=2.11.0", kit],
                              capture_output=True, text=True)
        self.assertExit(proc, 1)
        self.assertIn("has no deps/", proc.stderr)
        self.assertIn("make it again", proc.stderr)

    def test_a_tree_without_git_names_the_commit_it_was_given(self):
        # What the build records where .git did not travel (tools/setup
        # --offline and tools/gpu-run pass the kit's stamp as LTB_SOURCE_COMMIT).
        out = os.path.join(self.tmp, "build_info.cc")
        script = os.path.join(REPO, "cmake", "WriteBuildInfo.cmake")
        for env, want in (({}, '"unknown"'),
                          ({"LTB_SOURCE_COMMIT": "abc123 (recorded by tools/offline-kit)"},
                           '"abc123 (recorded by tools/offline-kit)"')):
            proc = subprocess.run(["cmake", f"-DSOURCE_DIR={self.tmp}", f"-DOUTPUT={out}",
                                   "-DBUILD_TYPE=Release", "-P", script],
                                  capture_output=True, text=True,
                                  env=dict(os.environ, GIT_CEILING_DIRECTORIES=self.tmp, **env))
            self.assertExit(proc, 0)
            with open(out) as f:
                self.assertIn(f"kGitCommit[] = {want};", f.read())


if __name__ == "__main__":
    unittest.main()
