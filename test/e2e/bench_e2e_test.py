"""End-to-end tests: run the bench binary as a user would and check its JSON.

LTB_BENCH names the binary; LTB_COMPARE_PY names Google Benchmark's compare.py;
LTB_TORCH_VERSION is the version of the LibTorch it was built against;
LTB_LOADGEN_VERSION the MLPerf LoadGen version pinned in third_party/loadgen/pin.txt.
"""
import importlib.metadata
import json
import math
import re
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock

# The project's Python reads the CPU's cache apart from bench's C++.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools"))
from ltb.pysuite.cpu_cache import last_level_cache  # noqa: E402

BENCH = os.environ.get("LTB_BENCH", "")
TORCH_VERSION = os.environ.get("LTB_TORCH_VERSION", "")
LOADGEN_VERSION = os.environ.get("LTB_LOADGEN_VERSION", "")
COMPARE_PY = os.environ.get("LTB_COMPARE_PY", "/usr/share/benchmark/compare.py")
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# Given peaks skip their measurement (a few seconds); PeaksTest measures.
FAST = ["--benchmark_min_time=0.01", "--warmup_s=0", "--seq=32", "--batch=2",
        "--peak_flops=1e12", "--peak_bandwidth=1e10"]


def tmpfs_at(path):
    """Whether a tmpfs is mounted at `path`."""
    try:
        with open("/proc/mounts") as f:
            return any(line.split()[1:3] == [path, "tmpfs"] for line in f)
    except OSError:
        return False


def simulated(var):
    """ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS or LTB_MAX_CPU_ISA as
    bench sees it: where unset, ATEN_CPU_CAPABILITY=avx2 or default sets
    each to its level."""
    value = os.environ.get(var, "")
    aten = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    if not value and aten in ("avx2", "default"):
        if var == "ONEDNN_MAX_CPU_ISA":
            return "AVX2" if aten == "avx2" else "SSE41"
        if var == "MKL_ENABLE_INSTRUCTIONS":
            return "AVX2" if aten == "avx2" else "SSE4_2"
        return aten
    return value


def cpu_flags():
    """The first CPU's flags as Linux reports them, less those LTB_MAX_CPU_ISA
    hides (bench's peak loops and native arithmetic follow the same limit)."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    limit = simulated("LTB_MAX_CPU_ISA").lower()
    newest = ("amx", "avx10", "avx512_bf16", "avx512_fp16", "avx_ne_convert",
              "avx_vnni_int8", "avx_vnni_int16")
    def level(flag):
        if flag.startswith(newest):
            return 3
        if flag.startswith("avx512"):
            return 2
        if flag.startswith("avx") or flag in ("fma", "f16c"):
            return 1
        return 0
    allowed = {"default": 0, "avx2": 1, "avx512": 2}.get(limit, 3)
    return {f for f in flags if level(f) <= allowed}, flags


def onednn_runs_bf16():
    """ATen's own check (mkldnn_bf16_device_check asks the hardware for
    AVX-512 BW/VL/DQ or AVX-NE-CONVERT), and oneDNN's ISA limit."""
    _, hardware = cpu_flags()
    has = {"avx512bw", "avx512vl", "avx512dq"} <= hardware or "avx_ne_convert" in hardware
    limit = simulated("ONEDNN_MAX_CPU_ISA").upper()
    below = limit in ("SSE41", "AVX", "AVX2", "AVX2_VNNI") or (
        limit == "AVX2_VNNI_2" and "avx_ne_convert" not in hardware)
    return has and not below


def native_bf16():
    """bench's bf16 loop peak (lib/peaks/cpu_peak.cc): AVX512_BF16 or AMX
    tiles, of those LTB_MAX_CPU_ISA leaves."""
    allowed, _ = cpu_flags()
    return "avx512_bf16" in allowed or {"amx_bf16", "amx_tile"} <= allowed


def without_arithmetic():
    """What a peak's reason says lacks a dtype's arithmetic: the CPU, or
    the older one simulated (LTB_MAX_CPU_ISA)."""
    limit = os.environ.get("LTB_MAX_CPU_ISA", "")
    return f"the CPU simulated (LTB_MAX_CPU_ISA={limit})" if limit else "this CPU"


def simulating_this_cpu():
    """Whether the older CPU the e2e_older_cpu tests simulate (ATEN_CPU_CAPABILITY,
    ONEDNN_MAX_CPU_ISA, LTB_MAX_CPU_ISA) is this CPU: a simulation asked for
    that hides none of its instructions (an AVX2 CPU without AVX-VNNI)."""
    if not any(os.environ.get(v) for v in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                           "LTB_MAX_CPU_ISA")):
        return False
    allowed, hardware = cpu_flags()
    return allowed == hardware and "avx_vnni" not in hardware


def assert_mbu_or_held_by_the_cache(test, b, step_bytes, peak):
    """A step the CPU's cache holds has no mbu, and its label says why; any
    other divides its reads by the peak."""
    cache = last_level_cache()
    if 0 < step_bytes <= cache:
        test.assertNotIn("mbu", b, b["name"])
        test.assertIn("mbu left out: a step works over ", b.get("label", ""))
        test.assertIn("cache holds: it reads from the cache, not from memory", b["label"])
    else:
        rate = b.get("read_GB/s", b.get("weight_GB/s")) * 1e9
        test.assertAlmostEqual(b["mbu"], rate / peak, delta=1e-6 * b["mbu"])


# Peaks given rather than measured (seconds of loops and GEMMs), for tests
# that do not look at mfu or mbu.
GIVEN_PEAKS = ("--peak_flops=1e12", "--peak_bandwidth=1e11")


def run_bench(*args, check=True):
    proc = subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"bench {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def torch_wheel_version():
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return ""


def same_minor(a, b):
    return bool(a) and a.split(".")[:2] == b.split(".")[:2]


def run_json(*args):
    return json.loads(run_bench("--benchmark_format=json", *args).stdout)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class NanoJsonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.files = []
        cls.console = ""
        for i in range(2):
            path = os.path.join(cls.tmp.name, f"run{i}.json")
            proc = run_bench("--benchmark_filter=Transformer/nano/cpu", *FAST,
                             "--benchmark_repetitions=2", f"--benchmark_out={path}",
                             "--benchmark_out_format=json")
            cls.console += proc.stdout + proc.stderr
            cls.files.append(path)
        with open(cls.files[0]) as f:
            cls.doc = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def iterations(self):
        return [b for b in self.doc["benchmarks"] if b["run_type"] == "iteration"]

    def test_every_phase_ran_without_error(self):
        names = {b["run_name"] for b in self.iterations()}
        self.assertEqual(names, {
            f"Transformer/nano/cpu/{phase}/batch:2/seq:32/fp32/manual_time"
            for phase in ("forward", "forward_backward", "train_step")} |
            {"Transformer/nano/cpu/train_epoch/batch:2/seq:32/fp32/iterations:2/manual_time"})
        for b in self.doc["benchmarks"]:
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))

    def test_every_entry_has_the_counters(self):
        for b in self.iterations():
            for counter in ("tokens/s", "FLOP/s", "peak_mem", "params"):
                self.assertIn(counter, b, b["name"])
            self.assertEqual(b["params"], 259392)
            self.assertGreater(b["peak_mem"], 0)

    def test_rates_use_the_measured_step_time(self):
        for b in self.iterations():
            if "/train_epoch/" in b["run_name"]:
                continue  # an epoch is many steps
            seconds = b["real_time"] * {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]]
            self.assertAlmostEqual(b["tokens/s"] * seconds / (2 * 32), 1.0, places=3)

    def test_context_records_what_ran(self):
        ctx = self.doc["context"]
        for key in ("libtorch_version", "blas", "intra_op_threads", "inter_op_threads",
                    "blas_threads", "cpu_model", "cuda_runtime", "build_type",
                    "suite_commit", "malloc", "sync", "grad_mode"):
            self.assertIn(key, ctx)
            self.assertTrue(ctx[key], key)
        # How OpenMP threads wait changes the speed: recorded when set (ctest
        # sets OMP_WAIT_POLICY=passive).
        for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):
            self.assertEqual(ctx.get(var.lower()), os.environ.get(var) or None, var)

    def test_openmp_binding_narrows_neither_the_cpus_nor_the_threads(self):
        # Where OpenMP binds its threads, its runtime pins the main thread to
        # the first place when it loads, before main(): the process may still
        # run on every place's CPUs, and the run takes as many threads.
        cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
        base = {k: v for k, v in os.environ.items()
                if k not in ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES",
                             "GOMP_CPU_AFFINITY")}

        def context(**env):
            proc = subprocess.run([BENCH, "--benchmark_format=json", "--devices=cpu",
                                   "--benchmark_filter=^Ops/noop/", *FAST],
                                  capture_output=True, text=True, timeout=600,
                                  env=dict(base, **env))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            ctx = json.loads(proc.stdout)["context"]
            return ctx["cpu_affinity"], ctx["intra_op_threads"]

        plain = context()
        for env in ({"OMP_PROC_BIND": "close"}, {"OMP_PLACES": "cores"},
                    {"GOMP_CPU_AFFINITY": cpus}):
            self.assertEqual(context(**env), plain, env)

    def test_google_benchmark_is_built_for_release(self):
        # Debian's libbenchmark is compiled without NDEBUG: it warns on every
        # run, and its timing loop carries the library's assertions.
        self.assertEqual(self.doc["context"]["library_build_type"], "release")
        self.assertNotIn("Library was built as DEBUG", self.console)

    @unittest.skipUnless(LOADGEN_VERSION, "LTB_LOADGEN_VERSION is not set")
    def test_context_names_the_loadgen_linked_in(self):
        self.assertEqual(self.doc["context"]["loadgen_version"], LOADGEN_VERSION)

    def test_compare_py_accepts_two_runs(self):
        proc = subprocess.run([sys.executable, COMPARE_PY, "benchmarks", *self.files],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("Transformer/nano/cpu/forward/batch:2/seq:32/fp32", proc.stdout)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class BadInputTest(unittest.TestCase):
    def assert_usage_error(self, args, *expected):
        proc = run_bench(*args, check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        for text in expected:
            self.assertIn(text, proc.stderr)
        self.assertEqual(proc.stdout.count("Transformer/"), 0, "ran before rejecting")

    def test_bad_flag_values_exit_2_with_the_valid_choices(self):
        self.assert_usage_error(["--dtype=fp64"], "valid: fp32, bf16, fp16")
        self.assert_usage_error(["--devices=gpu"], "valid: cpu, cuda, cuda:N")
        self.assert_usage_error(["--batch=0"], "--batch", "positive integers")
        self.assert_usage_error(["--seq=12x"], "--seq", "positive integers")
        self.assert_usage_error(["--sync=maybe"], "valid: true, false")
        self.assert_usage_error(["--threads=-2"], "--threads")
        self.assert_usage_error(["--malloc=jemalloc"], "valid: tuned, system")
        self.assert_usage_error(["--no_such_flag=1"], "unknown flag", "--devices")
        self.assert_usage_error(["--batch"], "--batch needs a value")
        self.assert_usage_error(["--warmup_s=inf"], "--warmup_s")
        self.assert_usage_error(["--cpu_linear=blas"], "valid: aten, onednn")
        self.assert_usage_error(["--benchmark_filter=("], "not a valid regular expression")
        self.assert_usage_error(["--benchmark_filter=NoSuchModel"], "no benchmark matches")
        # A model file's settings without a model file.
        for flag in ("--inputs=8x64:fp32", "--flops_per_step=1e9"):
            self.assert_usage_error([flag], flag.split("=")[0] + " sets what a --model file "
                                    "runs, and no --model is given")
        # An anchored filter's unknown family or size: the valid ones named.
        self.assert_usage_error(["--benchmark_filter=^NoSuchModel/"],
                                "no family is called 'NoSuchModel'; families: ",
                                "Transformer, ")
        self.assert_usage_error(["--benchmark_filter=^GPT2/huge/"],
                                "no GPT2 benchmark is named GPT2/huge/...; after GPT2/ "
                                "come: nano, small, medium, large, xl")
        # A checkpoint that is not there: refused before anything runs (a
        # list of names needs none).
        missing = os.path.join(tempfile.gettempdir(), "no-such-dir", "model.safetensors")
        self.assert_usage_error([f"--weights={missing}", "--benchmark_filter=^GPT2/nano/"],
                                f"--weights={missing}: no such file or folder; valid: ")
        run_bench(f"--weights={missing}", "--benchmark_filter=^GPT2/nano/",
                  "--benchmark_list_tests")
        self.assert_usage_error(["--epochs=2,5"], "--epochs", "one value, not a list")
        self.assert_usage_error(["--steps=3,4"], "--steps", "one value, not a list")
        self.assert_usage_error(["--dtype="], "--dtype needs at least one value")
        # A path that is not UTF-8 would reach the names and make the JSON
        # unreadable: refused (the byte 0xff, passed as the file system's).
        self.assert_usage_error(["--weights=/tmp/bad\udcff"], "is not UTF-8 text")
        # An environment that makes CUDA's fp32 names untrue is refused
        # before anything runs, on a machine with a GPU or without.
        env = dict(os.environ, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="1")
        proc = subprocess.run([BENCH, "--devices=cuda", "--benchmark_filter=Ops/noop"],
                              capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes every fp32 matmul", proc.stderr)
        # And one that lets oneDNN compute the CPU's fp32 in bf16; a run
        # without CPU fp32 benchmarks is not refused.
        env = dict(os.environ, ONEDNN_DEFAULT_FPMATH_MODE="BF16")
        for dtype, code in (("fp32", 2), ("bf16", 0)):
            proc = subprocess.run([BENCH, "--devices=cpu", f"--dtype={dtype}",
                                   "--benchmark_filter=^GPT2/nano/cpu/forward/",
                                   "--benchmark_list_tests"],
                                  capture_output=True, text=True, timeout=600, env=env)
            self.assertEqual(proc.returncode, code, proc.stderr)
            if code:
                self.assertIn("ONEDNN_DEFAULT_FPMATH_MODE=BF16 lets oneDNN compute fp32 in "
                              "a narrower type", proc.stderr)
        # OpenMP's limits that would run fewer threads than the context
        # reports (one thread where it said two: the step took twice as
        # long), and an ATEN_CPU_CAPABILITY that ATen ignores while oneDNN,
        # MKL and the peaks would follow it: refused; a limit the threads
        # fit under is not.
        for extra, args, code, said in (
                ({"OMP_THREAD_LIMIT": "1"}, ["--threads=2"], 2,
                 "OMP_THREAD_LIMIT=1 holds OpenMP to 1 thread, fewer than the 2 intra-op "
                 "threads this run would report"),
                ({"OMP_THREAD_LIMIT": "1"}, ["--threads=1"], 0, ""),
                ({"OMP_DYNAMIC": "true"}, [], 2,
                 "OMP_DYNAMIC=true lets OpenMP run fewer threads than asked"),
                ({"ATEN_CPU_CAPABILITY": "AVX2"}, [], 2,
                 "ATEN_CPU_CAPABILITY=AVX2 is not a value ATen reads")):
            proc = subprocess.run([BENCH, "--devices=cpu", "--benchmark_list_tests",
                                   "--benchmark_filter=^GPT2/nano/cpu/forward/", *args],
                                  capture_output=True, text=True, timeout=600,
                                  env=dict(os.environ, **extra))
            self.assertEqual(proc.returncode, code, (extra, proc.stderr))
            self.assertIn(said, proc.stderr)
        # A path given empty ("--weights=$UNSET") is refused, not run as if
        # left out (random weights, the default suite in place of --model).
        for flag in ("weights", "eval_tokens", "compiled", "model", "inputs", "data_dir",
                     "profile", "serve_log_dir"):
            self.assert_usage_error([f"--{flag}="], f"--{flag}= is empty: give a path")
        # A directory opens as a stream; reading it is what fails.
        self.assert_usage_error([f"--eval_tokens={tempfile.gettempdir()}"],
                                f"--eval_tokens: {tempfile.gettempdir()} is a directory; "
                                "valid: a text file of token ids")

    def test_unavailable_device_is_an_error_entry_not_an_absence(self):
        doc = run_json("--benchmark_filter=Transformer/nano/cuda:7/forward/", *FAST)
        entries = doc["benchmarks"]
        self.assertEqual(len(entries), 1)
        self.assertTrue(entries[0]["error_occurred"])
        self.assertIn("cuda:7", entries[0]["run_name"])
        self.assertIn("no ", entries[0]["error_message"])

    def test_memory_guard_skips_what_cannot_fit_and_the_run_goes_on(self):
        doc = run_json("--benchmark_filter=Transformer/(2.7B|nano)/cpu/train_step",
                       "--devices=cpu", "--benchmark_min_time=0.01", "--warmup_s=0",
                       "--seq=32", "--batch=512", *GIVEN_PEAKS)
        by_size = {b["run_name"].split("/")[1]: b for b in doc["benchmarks"]}
        self.assertTrue(by_size["2.7B"]["error_occurred"])
        message = by_size["2.7B"]["error_message"]
        self.assertIn("does not fit", message)
        self.assertIn("GiB available", message)
        self.assertFalse(by_size["nano"].get("error_occurred", False))
        self.assertIn("tokens/s", by_size["nano"])
        self.assertTrue(doc["context"]["memory_guard"].startswith("on"))

    def test_without_the_guard_an_out_of_memory_error_is_caught_and_the_run_goes_on(self):
        import resource
        # 6 GiB of address space: the 2.7B model's fp32 weights alone are 10.8 GB.
        limit = 6 << 30
        proc = subprocess.run(
            [BENCH, "--benchmark_format=json", "--memory_guard=false",
             "--benchmark_filter=Transformer/(2.7B|nano)/cpu/train_step", "--devices=cpu",
             "--steps=2", "--warmup_s=0", "--seq=32", "--batch=2", *GIVEN_PEAKS],
            capture_output=True, text=True, timeout=600,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        doc = json.loads(proc.stdout)
        by_size = {b["run_name"].split("/")[1]: b for b in doc["benchmarks"]}
        message = by_size["2.7B"]["error_message"]
        self.assertTrue(by_size["2.7B"]["error_occurred"])
        self.assertNotIn("does not fit", message, "the guard is off")
        self.assertIn("out of host memory (estimate was", message)
        self.assertFalse(by_size["nano"].get("error_occurred", False))
        self.assertTrue(doc["context"]["memory_guard"].startswith("off"))


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class GenerateTest(unittest.TestCase):
    def test_generation_counters_add_up_to_the_step_time(self):
        doc = run_json("--benchmark_filter=GPT2/nano/cpu/generate", "--batch=1,4",
                       "--prompt=16", "--new_tokens=40", "--benchmark_min_time=0.2",
                       "--warmup_s=0", *GIVEN_PEAKS)
        entries = [b for b in doc["benchmarks"] if b["run_type"] == "iteration"]
        self.assertEqual(len(entries), 2)
        for b in entries:
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            self.assertIn("/prompt:16/new:40/", b["run_name"])
            step_ms = b["real_time"] * {"ms": 1, "us": 1e-3, "ns": 1e-6}[b["time_unit"]]
            self.assertAlmostEqual((b["ttft_ms"] + 39 * b["tpot_ms"]) / step_ms, 1, delta=0.05)
            for counter in ("tokens/s", "pp_tok/s", "tg_tok/s", "weight_GB/s",
                            "tpot_growth_%", "FLOP/s", "peak_mem", "params"):
                self.assertIn(counter, b)
            batch = int(b["run_name"].split("/batch:")[1].split("/")[0])
            self.assertAlmostEqual(b["tokens/s"] * step_ms / 1e3, batch * 40, delta=0.01 * batch * 40)

    def test_a_depth_fills_the_cache_and_the_reads_count_it(self):
        doc = run_json("--benchmark_filter=^Llama/nano/cpu/generate/", "--batch=1",
                       "--prompt=8", "--new_tokens=8", "--depth=0,600",
                       "--benchmark_min_time=0.05", "--warmup_s=0", *GIVEN_PEAKS)
        entries = {b["run_name"]: b for b in doc["benchmarks"] if b["run_type"] == "iteration"}
        base = "Llama/nano/cpu/generate/batch:1/prompt:8/new:8/"
        self.assertEqual(set(entries), {base + "fp32/manual_time",
                                        base + "depth:600/fp32/manual_time"})
        # nano: 2 layers of keys and values, 2 kv heads of 16 fp32 values a
        # position (512 bytes); a decode step reads the 187,200 weights (the
        # head is the tied embedding) and the cache up to its position.
        for depth in (0, 600):
            b = entries[base + (f"depth:{depth}/" if depth else "") + "fp32/manual_time"]
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            self.assertEqual(b["kv_cache_bytes"], 512 * (depth + 16))
            weights = 187200 * 4 * 7
            cache = 512 * sum(depth + 8 + i for i in range(1, 8))
            self.assertAlmostEqual(b["read_GB/s"] / b["weight_GB/s"], (weights + cache) / weights,
                                   places=9)
            self.assertLessEqual(b["tpot_p50_ms"], b["tpot_p90_ms"])
            self.assertLessEqual(b["tpot_p90_ms"], b["tpot_p99_ms"])
            self.assertAlmostEqual(b["tg_tok/s"] * b["tpot_ms"] / 1e3, 1, places=6)
            # A decode step's reads, on average: 0.77 MB at depth 0, 1.1 at
            # 600, which a last-level cache holds.
            assert_mbu_or_held_by_the_cache(self, b, (weights + cache) / 7, 1e11)

    def test_one_new_token_has_no_decode_step_and_says_so(self):
        # The one token comes from the prefill: the step is the prompt's
        # forward alone, and nothing timed or read by decode steps exists.
        doc = run_json("--benchmark_filter=^(GPT2|Whisper)/nano/cpu/generate/", "--batch=2",
                       "--prompt=5", "--new_tokens=1", "--benchmark_min_time=0.01",
                       "--warmup_s=0", *GIVEN_PEAKS)
        entries = {b["run_name"].split("/")[0]: b for b in doc["benchmarks"]
                   if b["run_type"] == "iteration"}
        self.assertEqual(set(entries), {"GPT2", "Whisper"})
        # FLOPs of the prefill alone, by hand from the model cards (width 64,
        # 2 layers, vocabulary 1000, batch 2), logits of the last position:
        # GPT2: 24 w^2 a token and 4 w T^2 of attention a layer, over 5 tokens;
        # Whisper: its 4 start tokens, 28 w^2 and cross-attention over 1500
        # positions a token, and the cross keys and values of 1500 positions.
        head = 2 * 2 * 64 * 1000
        gpt2 = 2 * 2 * (24 * 5 * 64 ** 2 + 4 * 5 * 5 * 64) + head
        whisper = (2 * 4 * 2 * 1500 * 64 ** 2
                   + 2 * 2 * (28 * 4 * 64 ** 2 + 4 * 4 * 4 * 64 + 4 * 4 * 1500 * 64) + head)
        for family, flops, prompt in (("GPT2", gpt2, 5), ("Whisper", whisper, 4)):
            b = entries[family]
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            self.assertIn(f"/prompt:{prompt}/new:1/", b["run_name"])
            step_s = b["real_time"] * {"ms": 1, "us": 1e-3, "ns": 1e-6}[b["time_unit"]] / 1e3
            self.assertAlmostEqual(b["FLOP/s"] * step_s / flops, 1, places=6)
            self.assertAlmostEqual(b["tokens/s"] * step_s, 2, places=6)
            self.assertAlmostEqual(b["pp_tok/s"] * b["ttft_ms"] / 1e3, 2 * prompt, places=6)
            for counter in ("tpot_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "tg_tok/s",
                            "weight_GB/s", "read_GB/s", "tpot_growth_%", "mbu"):
                self.assertNotIn(counter, b, family)
            self.assertIn("tpot_ms, tg_tok/s, weight_GB/s, read_GB/s and mbu left out: "
                          "--new_tokens=1 takes its one token from the prefill, and no "
                          "decode step runs", b.get("label", ""), family)

    def test_more_positions_than_the_model_has_is_reported(self):
        doc = run_json("--benchmark_filter=GPT2/nano/cpu/generate", "--prompt=1000",
                       "--new_tokens=100", "--benchmark_min_time=0.01")
        [entry] = doc["benchmarks"]
        self.assertTrue(entry["error_occurred"])
        self.assertIn("1100 positions, but GPT2 has 1024", entry["error_message"])


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class DomainsTest(unittest.TestCase):
    def test_encoder_lengths_that_cannot_fit_are_skipped_and_the_run_goes_on(self):
        doc = run_json(*FAST, "--seq=64,4096", "--batch=8",
                       "--benchmark_filter=Encoder/nano/cpu/forward_backward/batch:8/seq:64/"
                       "|Encoder/default/cpu/forward_backward/")
        by = {(b["run_name"].split("/")[1], b["run_name"].split("/seq:")[1].split("/")[0]): b
              for b in doc["benchmarks"]}
        self.assertEqual(set(by), {("nano", "64"), ("default", "64"), ("default", "4096")})
        skipped = by[("default", "4096")]
        self.assertTrue(skipped["error_occurred"])
        self.assertIn("does not fit", skipped["error_message"])
        self.assertIn("GiB available", skipped["error_message"])
        for key in (("nano", "64"), ("default", "64")):
            self.assertFalse(by[key].get("error_occurred", False), by[key].get("error_message"))
            self.assertGreater(by[key]["tokens/s"], 0)

    def test_vision_and_speech_counters(self):
        doc = run_json(*FAST, "--batch=2", "--new_tokens=4", "--memory_format=contiguous,channels_last",
                       "--benchmark_filter=(ResNet|CNN|Whisper)/nano/cpu/")
        names = [b["run_name"] for b in doc["benchmarks"]]
        self.assertIn("ResNet/nano/cpu/forward/batch:2/fp32/channels_last/manual_time", names)
        self.assertIn("CNN/nano/cpu/train_step/batch:2/fp32/manual_time", names)
        for b in doc["benchmarks"]:
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            if b["run_name"].startswith(("ResNet", "CNN")):
                self.assertAlmostEqual(b["samples/s"], 2 / (b["real_time"] * 1e-3), delta=0.01 * b["samples/s"])
            if "/encode/" in b["run_name"] or "/transcribe/" in b["run_name"]:
                self.assertAlmostEqual(b["rtf"] * b["audio_s/s"], 1.0, places=3)
            if "/generate/" in b["run_name"]:
                self.assertIn("tpot_ms", b)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class EpochTest(unittest.TestCase):
    ARGS = ["--benchmark_filter=EncDec/nano/cpu/train_epoch/", "--devices=cpu", "--seq=16",
            "--batch=4", "--dataset_samples=16", "--epochs=2", "--shard_mb=1",
            "--peak_flops=1e12", "--peak_bandwidth=1e10"]

    def test_disk_dataset_is_written_once_and_reused(self):
        with tempfile.TemporaryDirectory() as tmp:
            first = run_json(*self.ARGS, f"--data_dir={tmp}")
            [entry] = first["benchmarks"]
            self.assertFalse(entry.get("error_occurred", False), entry.get("error_message"))
            # What an epoch does is in its name: 16 samples (not 128), read from disk,
            # from shards of 1 MB (not 128).
            self.assertEqual(entry["run_name"], "EncDec/nano/cpu/train_epoch/batch:4/seq:16/"
                             "fp32/dataset_samples:16/data:disk/shard_mb:1/iterations:2/"
                             "manual_time")
            self.assertEqual(first["context"]["train_epoch_data"],
                             f"disk: {tmp}, shards of 1 MB, dropped from the page cache "
                             "before each epoch")
            for counter in ("epoch_s", "epoch_1_s", "epoch_2_s", "samples/s", "tokens/s",
                            "peak_mem"):
                self.assertIn(counter, entry)
            self.assertNotIn("gpu_util_%", entry)  # CPU: no NVML counter is invented
            self.assertAlmostEqual(entry["samples/s"] * entry["epoch_s"], 16, delta=0.5)
            [dataset] = os.listdir(tmp)
            shard = os.path.join(tmp, dataset, "shard_0000.bin")
            mtime = os.stat(shard).st_mtime_ns
            run_json(*self.ARGS, f"--data_dir={tmp}")
            self.assertEqual(os.stat(shard).st_mtime_ns, mtime, "the second run rewrote the shard")

            # A corrupt shard is reported with its path; nothing trains on it.
            with open(shard, "r+b") as f:
                f.seek(100)
                byte = f.read(1)
                f.seek(100)
                f.write(bytes([byte[0] ^ 0xFF]))
            [bad] = run_json(*self.ARGS, f"--data_dir={tmp}")["benchmarks"]
            self.assertTrue(bad["error_occurred"])
            self.assertIn(shard, bad["error_message"])
            self.assertIn("--regenerate", bad["error_message"])
            [fixed] = run_json(*self.ARGS, f"--data_dir={tmp}", "--regenerate=true")["benchmarks"]
            self.assertFalse(fixed.get("error_occurred", False), fixed.get("error_message"))

    def test_a_shard_cut_short_or_gone_fails_its_epoch_alone(self):
        # Shards change behind the manifest's back (a full disk, a cleaned
        # cache): the epoch says which and how to rewrite them; the step
        # measured beside it in the same process is kept.
        with tempfile.TemporaryDirectory() as tmp:
            run_json(*self.ARGS, f"--data_dir={tmp}")
            [dataset] = os.listdir(tmp)
            shard = os.path.join(tmp, dataset, "shard_0000.bin")
            damages = ((lambda: os.truncate(shard, os.path.getsize(shard) // 2), "truncated"),
                       (lambda: os.remove(shard), "cannot open shard"))
            for damage, words in damages:
                with self.subTest(words):
                    damage()
                    doc = run_json(*self.ARGS, f"--data_dir={tmp}", "--steps=2", "--warmup_s=0",
                                   "--benchmark_filter=EncDec/nano/cpu/train_(step|epoch)/")
                    entries = {b["run_name"].split("/")[3]: b for b in doc["benchmarks"]}
                    self.assertFalse(entries["train_step"].get("error_occurred", False),
                                     entries["train_step"].get("error_message"))
                    self.assertIn("tokens/s", entries["train_step"])
                    message = entries["train_epoch"]["error_message"]
                    self.assertTrue(entries["train_epoch"]["error_occurred"])
                    self.assertIn(shard, message)
                    self.assertIn(words, message)
                    self.assertIn("--regenerate=true", message)
                    run_json(*self.ARGS, f"--data_dir={tmp}", "--regenerate=true")

    @unittest.skipUnless(tmpfs_at("/dev/shm"), "no tmpfs at /dev/shm")
    def test_shards_that_tmpfs_keeps_in_memory_are_said_to_be_read_from_memory(self):
        # tmpfs ignores the drop from the page cache: what the epochs read is
        # memory, whatever the name (data:disk) and the context promise.
        with open("/proc/mounts") as f:
            if not any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in f):
                self.skipTest("no tmpfs at /dev/shm")
        with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
            [entry] = run_json(*self.ARGS, f"--data_dir={tmp}", "--warmup_epochs=0")["benchmarks"]
            self.assertFalse(entry.get("error_occurred", False), entry.get("error_message"))
            self.assertIn("the epochs read their shards from memory, not from storage: 1 of 1 "
                          "stayed in the page cache", entry.get("label", ""))

    def test_a_process_alone_reads_its_disk_dataset_whatever_its_local_rank(self):
        # LOCAL_RANK names the machine's writer only among ranks: a process
        # alone that a scheduler gave LOCAL_RANK=1 must still write and read
        # the shards its name (data:disk) says, not train from memory.
        with tempfile.TemporaryDirectory() as tmp, \
                unittest.mock.patch.dict(os.environ, {"LOCAL_RANK": "1"}):
            [entry] = run_json(*self.ARGS, f"--data_dir={tmp}")["benchmarks"]
            self.assertFalse(entry.get("error_occurred", False), entry.get("error_message"))
            self.assertIn("/data:disk/", entry["run_name"])
            [dataset] = os.listdir(tmp)
            self.assertIn("shard_0000.bin", os.listdir(os.path.join(tmp, dataset)))

    def test_architecture_flags_name_a_custom_size(self):
        names = run_bench("--benchmark_list_tests", "--benchmark_filter=EncDec/", "--devices=cpu",
                          "--d_model=96", "--nhead=6").stdout.split()
        self.assertIn("EncDec/custom_d96_h6_e3_d3_ff512/cpu/train_step/batch:64/seq:128/fp32/"
                      "manual_time", names)
        self.assertFalse([n for n in names if "/tiny/" in n])
        proc = run_bench("--d_model=100", "--nhead=8", check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--nhead=8 must divide --d_model=100", proc.stderr)

    def test_a_failing_data_parallel_run_keeps_what_was_measured(self):
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "data")
            run_json(*self.ARGS, f"--data_dir={data}")  # the dataset, then a corrupt shard
            [dataset] = os.listdir(data)
            shard = os.path.join(data, dataset, "shard_0000.bin")
            with open(shard, "r+b") as f:
                f.seek(100)
                byte = f.read(1)
                f.seek(100)
                f.write(bytes([byte[0] ^ 0xFF]))
            out = os.path.join(tmp, "out.json")
            proc = subprocess.run(
                [os.path.join(repo, "tools", "launch"), "--nproc_per_node=2", BENCH, *self.ARGS,
                 "--threads=1", "--benchmark_filter=EncDec/nano/cpu/train_(step|epoch)/",
                 f"--data_dir={data}", f"--benchmark_out={out}", "--benchmark_out_format=json"],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            self.assertIn("stopping after writing the results so far", proc.stderr)
            with open(out) as f:
                doc = json.load(f)
            entries = {b["run_name"].split("/")[3]: b for b in doc["benchmarks"]}
            self.assertEqual(set(entries), {"train_step", "train_epoch"})
            self.assertFalse(entries["train_step"].get("error_occurred", False),
                             entries["train_step"].get("error_message"))
            self.assertTrue(entries["train_epoch"]["error_occurred"])
            self.assertIn(shard, entries["train_epoch"]["error_message"])

    def test_two_ranks_with_the_launcher_and_with_torchrun(self):
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        launchers = [[os.path.join(repo, "tools", "launch"), "--nproc_per_node=2"]]
        # torchrun's agent serves the ranks' store, whose protocol is its own
        # LibTorch's: it launches only a bench built against the same version.
        if os.path.exists(torchrun) and same_minor(TORCH_VERSION, torch_wheel_version()):
            launchers.append([torchrun, "--no-python", "--nproc_per_node=2"])
        for launcher in launchers:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "out.json")
                proc = subprocess.run([*launcher, BENCH, *self.ARGS, "--threads=1",
                                       "--benchmark_filter=EncDec/nano/cpu/train_(step|epoch)/",
                                       f"--benchmark_out={out}", "--benchmark_out_format=json"],
                                      capture_output=True, text=True, timeout=600)
                self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
                with open(out) as f:
                    doc = json.load(f)
                entries = {b["run_name"].split("/")[3]: b for b in doc["benchmarks"]}
                self.assertEqual(set(entries), {"train_step", "train_epoch"}, launcher[0])
                for b in entries.values():
                    self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
                # Two ranks of 4 samples: 8 samples a step, the whole 16 an epoch.
                step = entries["train_step"]
                self.assertAlmostEqual(step["samples/s"] * step["real_time"] * 1e-3, 8, delta=0.1)
                # Averaged by c10d::Reducer (LibTorch 2.0 on), and what the
                # communication adds to a step, measured beside it.
                self.assertIn("dp_gradients", doc["context"])
                for b in entries.values():
                    self.assertGreaterEqual(b["grad_buckets"], 1)
                # A median of differences of step times: on a loaded machine it
                # may be larger than a step, or negative; only its presence and
                # finiteness hold whatever the load.
                self.assertIn("comm_exposed_ms", step)
                self.assertTrue(math.isfinite(step["comm_exposed_ms"]))
                self.assertEqual(step["iterations"], 10)
                self.assertEqual(proc.stdout.count("EncDec/nano/cpu/train_step/"), 1,
                                 "only rank 0 reports")
                # The same steps on the same batch hold the same tensors, in an
                # epoch or not: train_step's peak is its measured steps', not
                # that of the steps without averaging timed after them for
                # comm_exposed_ms, which hold a second copy of the gradients
                # (2 to 20% more here, as they overlap). The epoch's dataset
                # share is 3 KB more than train_step's one batch.
                epoch = entries["train_epoch"]
                self.assertAlmostEqual(step["peak_mem"], epoch["peak_mem"],
                                       delta=0.005 * epoch["peak_mem"])


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class TwoMachinesTest(unittest.TestCase):
    """Two "machines" on this one, as a user starts them on two hosts: a
    launcher each, --nnodes=2 and --node_rank, the rendezvous on 127.0.0.1;
    and every way one can fail ends every rank with a message within the
    process-group timeout, never a hang."""

    LAUNCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tools", "launch")
    ARGS = ["--benchmark_filter=Transformer/nano/cpu/train_step/", "--devices=cpu",
            "--threads=1", "--batch=2", "--seq=16", *GIVEN_PEAKS]

    def node(self, rank, port, *args, out=None):
        command = [self.LAUNCH, "--nnodes=2", f"--node_rank={rank}", "--nproc_per_node=1",
                   "--master_addr=127.0.0.1", f"--master_port={port}", BENCH, *self.ARGS,
                   *args]
        if out:
            command += [f"--benchmark_out={out}", "--benchmark_out_format=json"]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    @staticmethod
    def port():
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def test_a_sweep_of_world_sizes_reports_weak_scaling(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "scaling.json")
            env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
            proc = subprocess.run(
                [self.LAUNCH, "--nproc_per_node=1,2", f"--scaling_out={out}", BENCH,
                 "--benchmark_filter=Transformer/nano/cpu/(train_step|forward)/",
                 "--devices=cpu", "--batch=2", "--seq=16", "--steps=3",
                 "--benchmark_min_time=0.05", "--warmup_s=0.05", *GIVEN_PEAKS],
                capture_output=True, text=True, timeout=600, env=env)
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            runs = {}
            for n in (1, 2):
                with open(os.path.join(tmp, f"scaling.ranks{n}.json")) as f:
                    runs[n] = json.load(f)
                self.assertEqual(runs[n]["context"]["world_size"], str(n))
            # Each rank of either run had the same share of the cores.
            self.assertEqual(runs[1]["context"]["intra_op_threads"],
                             runs[2]["context"]["intra_op_threads"])
            with open(out) as f:
                merged = json.load(f)
            self.assertEqual(merged["context"]["world_sizes"], "1,2")

            def step(doc):
                return next(b for b in doc["benchmarks"] if "/train_step/" in b["name"])
            one, two = step(runs[1]), step(runs[2])
            self.assertIn("grad_buckets", two)
            self.assertNotIn("grad_buckets", one)
            # Two ranks' step does twice the work of one: the name says so,
            # where tools/scaling names the world sizes it merges.
            self.assertTrue(two["run_name"].startswith(
                "Transformer/nano/cpu/train_step/batch:2/seq:16/fp32/ranks:2/"), two["run_name"])
            self.assertTrue(one["run_name"].startswith(
                "Transformer/nano/cpu/train_step/batch:2/seq:16/fp32/"), one["run_name"])
            self.assertNotIn("ranks:", one["run_name"])
            forward = next(b for b in runs[2]["benchmarks"] if "/forward/" in b["name"])
            self.assertNotIn("ranks:", forward["name"])  # rank 0's forward, alone
            by_name = {b["name"]: b for b in merged["benchmarks"]}
            self.assertIn(one["name"].replace("/fp32/", "/fp32/ranks:1/"), by_name)
            merged_two = by_name[two["name"]]
            self.assertEqual(merged_two["world_size"], 2)
            self.assertAlmostEqual(merged_two["scaling_efficiency"],
                                   two["tokens/s"] / (2 * one["tokens/s"]), places=9)
            self.assertFalse([b for b in merged["benchmarks"]
                              if "/forward/" in b["name"] and "scaling_efficiency" in b])
            self.assertIn("| `Transformer/nano/cpu/train_step/batch:2/seq:16/fp32` |",
                          proc.stdout)
            self.assertIn(f"({merged_two['scaling_efficiency'] * 100:.0f}%)", proc.stdout)
            if os.path.exists(COMPARE_PY):
                check = subprocess.run([sys.executable, COMPARE_PY, "benchmarks", out, out],
                                       capture_output=True, text=True, timeout=300)
                self.assertEqual(check.returncode, 0, check.stderr)

    def test_the_bucket_cap_sets_the_buckets_and_the_name(self):
        launch = [self.LAUNCH, "--nproc_per_node=2"]
        buckets = {}
        for mb in (25, 1):
            proc = subprocess.run(
                [*launch, BENCH, "--benchmark_filter=EncDec/tiny/cpu/train_step/",
                 "--devices=cpu", "--threads=1", "--steps=3", "--batch=2", "--seq=32",
                 f"--bucket_mb={mb}", "--benchmark_format=json", *GIVEN_PEAKS],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
            [entry] = json.loads(proc.stdout)["benchmarks"]
            self.assertEqual("/bucket_mb:1/" in entry["name"], mb == 1, entry["name"])
            buckets[mb] = entry["grad_buckets"]
        # 14 MB of fp32 gradients: a 1 MB first bucket and the rest in one of
        # 25 MB; more, smaller ones under a 1 MB cap.
        self.assertEqual(buckets[25], 2)
        self.assertGreater(buckets[1], buckets[25])

    def test_ranks_that_share_cores_have_no_mfu(self):
        # mfu is a rank's FLOP/s over one rank's peak. Two ranks of as many
        # threads as this machine has cores share every core: the peak times
        # the ranks would count each core twice, and mfu is left out saying
        # why. A thread a rank on two cores or more: a core each, and an mfu.
        cores = set()
        for cpu in os.sched_getaffinity(0):
            topology = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
            try:
                with open(topology + "physical_package_id") as p, \
                        open(topology + "core_id") as c:
                    cores.add((int(p.read()), int(c.read())))
            except (OSError, ValueError):
                cores.add(("cpu", cpu))
        args = [a for a in self.ARGS if not a.startswith("--threads=")]
        for threads in sorted({len(cores), 1}, reverse=True):
            proc = subprocess.run(
                [self.LAUNCH, "--nproc_per_node=2", BENCH, *args, "--steps=2",
                 f"--threads={threads}", "--benchmark_format=json"],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
            [entry] = json.loads(proc.stdout)["benchmarks"]
            self.assertGreater(entry["FLOP/s"], 0)
            if 2 * threads > len(cores):
                self.assertNotIn("mfu", entry)
                self.assertNotIn("mfu_peak", entry)
                self.assertIn(f"mfu left out: 2 data-parallel ranks on one machine run "
                              f"{2 * threads} threads together on {len(cores)} physical "
                              f"core", entry.get("label", ""))
            else:  # per device: both ranks' FLOP/s over two peaks, which
                # mfu_peak is (it was one, and FLOP/s / mfu_peak twice mfu)
                self.assertEqual(entry["mfu_peak"], 2e12)
                self.assertAlmostEqual(entry["mfu"], entry["FLOP/s"] / 2e12,
                                       delta=1e-9 * entry["mfu"])
                self.assertNotIn("mfu left out", entry.get("label", ""))

    def test_two_nodes_train_together(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            port = self.port()
            second = self.node(1, port, "--steps=3", "--dist_timeout_s=60")
            first = self.node(0, port, "--steps=3", "--dist_timeout_s=60", out=out)
            for proc in (first, second):
                _, err = proc.communicate(timeout=300)
                self.assertEqual(proc.returncode, 0, err[-2000:])
            with open(out) as f:
                doc = json.load(f)
            self.assertEqual(doc["context"]["world_size"], "2")
            [entry] = [b for b in doc["benchmarks"] if b["run_type"] == "iteration"]
            self.assertFalse(entry.get("error_occurred", False), entry.get("error_message"))
            # Both machines' tokens: 2 ranks x 2 x 16 a step.
            step_s = entry["real_time"] * 1e-3
            self.assertAlmostEqual(entry["tokens/s"] * step_s, 64, delta=0.5)
            self.assertIn("comm_exposed_ms", entry)

    def test_a_machine_that_never_comes_stops_the_other(self):
        for rank in (0, 1):  # the rendezvous's host waiting, or a rank connecting
            start = time.monotonic()
            proc = self.node(rank, self.port(), "--steps=3", "--dist_timeout_s=3")
            _, err = proc.communicate(timeout=120)
            self.assertNotEqual(proc.returncode, 0)
            self.assertLess(time.monotonic() - start, 60)
            # bench's own sentence ends the output (LibTorch's TCPStore logs
            # its retries, with backtraces, before it).
            last = [line for line in err.splitlines() if line.strip()][-1]
            self.assertTrue(last.startswith("bench: cannot join the process group of 2 ranks "
                                            "at 127.0.0.1:"), last)
            self.assertIn(f"as rank {rank}", last)
            self.assertNotIn("frame #", last)

    def test_a_rank_that_fails_stops_the_others_which_write_what_they_measured(self):
        # Rank 1 fails at its fifth step while rank 0 waits for it in the
        # collective: rank 1 aborts its group and exits, rank 0's wait ends
        # with an error at once (not after the 300 s timeout), and rank 0
        # writes what it measured.
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            start = time.monotonic()
            proc = subprocess.run(
                [self.LAUNCH, "--nproc_per_node=2", BENCH,
                 "--benchmark_filter=^Selftest/(ok|rank1_fails)/", "--devices=cpu",
                 "--threads=1", "--steps=20", "--warmup_s=0", "--dist_timeout_s=300",
                 f"--benchmark_out={out}", "--benchmark_out_format=json"],
                capture_output=True, text=True, timeout=600,
                env=dict(os.environ, LTB_SELFTEST="1"))
            self.assertLess(time.monotonic() - start, 60, proc.stderr[-3000:])
            self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
            self.assertIn("bench: rank 1: Selftest/rank1_fails/cpu/step/fp32/ranks:2: error: "
                          "Selftest: rank 1 fails at its fifth step", proc.stderr)
            self.assertRegex(proc.stderr, r"launch: rank [01] exited with status 1; "
                                          "stopping the other ranks")
            with open(out) as f:
                doc = json.load(f)
            by_kind = {b["run_name"].split("/")[1]: b for b in doc["benchmarks"]}
            self.assertFalse(by_kind["ok"].get("error_occurred", False), by_kind["ok"])
            self.assertTrue(by_kind["rank1_fails"]["error_occurred"])
            # Rank 0's error is the collective's that rank 1 left: it says
            # where the cause is.
            self.assertIn("where another rank failed first, its reason is on its stderr, "
                          "and tools/launch names that rank",
                          by_kind["rank1_fails"]["error_message"])

    def test_an_epoch_of_no_whole_batch_is_that_benchmarks_error_alone(self):
        # 3 samples over 2 ranks of batch 2: no whole batch on either. Every
        # rank failed it in a collective, which stopped the run before the
        # benchmarks after it; now it is refused before anything is built.
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            proc = subprocess.run(
                [self.LAUNCH, "--nproc_per_node=2", BENCH,
                 "--benchmark_filter=^(Transformer/nano/cpu/train_epoch|"
                 "EncDec/nano/cpu/train_step)/", "--devices=cpu", "--threads=1",
                 "--batch=2", "--seq=16", "--steps=2", "--warmup_s=0", "--dataset_samples=3",
                 *GIVEN_PEAKS, f"--benchmark_out={out}", "--benchmark_out_format=json"],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            with open(out) as f:
                doc = json.load(f)
            by_family = {b["run_name"].split("/")[0]: b for b in doc["benchmarks"]}
            self.assertIn("--dataset_samples=3 gives no whole batch of 2 per rank (2 ranks)",
                          by_family["Transformer"]["error_message"])
            self.assertFalse(by_family["EncDec"].get("error_occurred", False),
                             by_family["EncDec"].get("error_message"))

    def test_what_is_not_data_parallel_runs_on_rank_0_alone(self):
        # Selftest/slow is no data-parallel step (0.2 s of sleep a step, 3 s
        # in all), Selftest/together is (a sum over the ranks a step). Rank 1
        # builds no slow workload: it waits for rank 0 to leave it, polling
        # the store rather than in a collective, so the 2 s process-group
        # timeout never runs out; then both run together. A slow run alone
        # ends with rank 1 waiting for rank 0's last benchmark.
        for kinds, built in (("slow|together", ["slow.rank0", "together.rank0",
                                                "together.rank1"]),
                             ("slow", ["slow.rank0"])):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "out.json")
                marks = os.path.join(tmp, "marks")
                os.mkdir(marks)
                proc = subprocess.run(
                    [self.LAUNCH, "--nproc_per_node=2", BENCH,
                     f"--benchmark_filter=^Selftest/({kinds})/", "--devices=cpu",
                     "--threads=1", "--steps=15", "--warmup_s=0", "--dist_timeout_s=2",
                     f"--benchmark_out={out}", "--benchmark_out_format=json"],
                    capture_output=True, text=True, timeout=600,
                    env=dict(os.environ, LTB_SELFTEST="1", LTB_SELFTEST_MARKS=marks))
                self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
                self.assertEqual(sorted(os.listdir(marks)), built)
                with open(out) as f:
                    doc = json.load(f)
                by_kind = {b["run_name"].split("/")[1]: b for b in doc["benchmarks"]}
                self.assertEqual(sorted(by_kind), sorted(kinds.split("|")))
                for b in by_kind.values():
                    self.assertFalse(b.get("error_occurred", False), b)
                self.assertEqual(by_kind["slow"]["iterations"], 15)
                slow = by_kind["slow"]
                self.assertGreaterEqual(slow["real_time"] * TIME_UNITS[slow["time_unit"]], 0.2)

    def test_a_machine_that_dies_stops_the_other_with_what_it_measured(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            port = self.port()
            # 3000 steps: the forward's take a few seconds on the slowest CPU,
            # the training's (with its collectives) far longer on the fastest.
            args = ("--benchmark_filter=Transformer/nano/cpu/(forward|train_step)/",
                    "--steps=3000", "--dist_timeout_s=5")
            second = self.node(1, port, *args)
            first = self.node(0, port, *args, out=out)
            # Node 1 dies once node 0 has measured the forward (its line is
            # printed) and begun the training.
            deadline = time.monotonic() + 300
            for line in first.stdout:
                if "Transformer/nano/cpu/forward/" in line or time.monotonic() > deadline:
                    break
            time.sleep(1)
            os.killpg(second.pid, signal.SIGKILL)
            second.communicate()
            start = time.monotonic()
            _, err = first.communicate(timeout=120)
            self.assertNotEqual(first.returncode, 0)
            self.assertLess(time.monotonic() - start, 60)
            with open(out) as f:
                doc = json.load(f)
            by_phase = {b["run_name"].split("/")[3]: b for b in doc["benchmarks"]}
            self.assertTrue(by_phase["train_step"]["error_occurred"])
            self.assertIn("tokens/s", by_phase["forward"])


def peak_of(context, key):
    return float(context[key].split()[0])


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class PeaksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Its bench runs are the CPU's alone: where the older CPU simulated is
        # this one, e2e.PeaksTest has measured the same peaks.
        if simulating_this_cpu():
            raise unittest.SkipTest("the simulated older CPU is this CPU (nothing above AVX2): "
                                    "e2e.PeaksTest measures the same")

    def test_the_first_benchmark_holds_nothing_of_the_peaks_measurement(self):
        # The peaks are measured before the first benchmark, over tensors of
        # hundreds of MB that malloc keeps (mmap off, --malloc=tuned): they
        # are returned before its memory check and its peak resident set.
        doc = run_json("--benchmark_filter=Transformer/nano/cpu/forward/", "--devices=cpu",
                       "--batch=1,2", "--seq=16", "--steps=1", "--warmup_s=0")
        first, second = (b for b in doc["benchmarks"] if b["run_type"] == "iteration")
        self.assertIn("measured", doc["context"]["peak_flops_cpu_fp32"])
        self.assertLess(first["peak_rss"], second["peak_rss"] + (128 << 20),
                        (first["peak_rss"], second["peak_rss"]))

    def test_measured_peak_bounds_every_matmul_and_gives_mfu(self):
        # Not 2048x2048: in bf16 without bf16 hardware (AVX2) ATen's fallback
        # takes a minute a step. Without it bf16 has no peak and no mfu
        # (checked below): one small bf16 matmul shows that, rather than the
        # seconds a step of the larger ones.
        matmuls = "Ops/matmul/(256x256|512x512|1024x1024|2048x768x768)/"
        if not native_bf16():
            matmuls = f"{matmuls}cpu/fp32/|Ops/matmul/256x256/cpu/bf16/"
        proc = run_bench("--benchmark_format=json",
                         f"--benchmark_filter={matmuls}|Transformer/nano/cpu/forward/",
                         "--devices=cpu", "--seq=64", "--dtype=fp32,bf16",
                         "--benchmark_min_time=0.1", "--warmup_s=0")
        doc = json.loads(proc.stdout)
        ctx = doc["context"]
        if not native_bf16():
            # Under a simulated older CPU the limit is named as what has none.
            self.assertIn(f"none: {without_arithmetic()} has no native bf16 arithmetic",
                          ctx["peak_flops_cpu_bf16"])
            self.assertTrue(all("mfu" not in b for b in doc["benchmarks"]
                                if "/bf16/" in b["name"]))
        for dtype in ("fp32", "bf16"):
            if f"peak_flops_cpu_{dtype}" not in ctx or "none" in ctx[f"peak_flops_cpu_{dtype}"]:
                self.assertEqual(dtype, "bf16", "every x86-64 CPU has native fp32 (SSE2 at least)")
                continue
            source = ctx[f"peak_flops_cpu_{dtype}"]
            self.assertIn("measured", source)
            self.assertIn("loop", source)
            # The context is written when the run has ended: the peak as the
            # run left it, after each raise a benchmark's fastest step made
            # (a shared machine's load while it was measured), in order.
            final = peak_of(ctx, f"peak_flops_cpu_{dtype}")
            number = r"([0-9.]+(?:e[+-]?[0-9]+)?)"
            raises = re.findall(rf"raised to {number} by (\S+) \(from {number}\)", source)
            start = float(raises[0][2]) if raises else final
            self.assertGreaterEqual(start, peak_of(ctx, f"gemm_flops_cpu_{dtype}"),
                                    "the peak is at least the best GEMM step")
            entries = [b for b in doc["benchmarks"] if f"/{dtype}/" in b["name"]]
            matmuls = [b for b in entries if b["name"].startswith("Ops/matmul/")]
            self.assertEqual(len(matmuls), 4)
            names = [b["name"].removesuffix("/manual_time") for b in entries]
            for to, name, before in raises:
                self.assertIn(name, names, "a raise names a benchmark of the run")
                self.assertGreater(float(to), float(before))
            # Every entry names the peak its mfu divides by: never above 1,
            # never lower than the one before it, the run's last at most
            # the context's.
            used = start
            for b in entries:
                self.assertLessEqual(b["mfu"], 1.0, b["name"])
                self.assertAlmostEqual(b["mfu"], b["FLOP/s"] / b["mfu_peak"],
                                       delta=1e-3 * b["mfu"])
                self.assertGreaterEqual(b["mfu_peak"], used * (1 - 1e-3), b["name"])
                used = b["mfu_peak"]
                raised_here = [float(to) for to, name, _ in raises
                               if name == b["name"].removesuffix("/manual_time")]
                if raised_here:
                    self.assertAlmostEqual(b["mfu_peak"], raised_here[-1],
                                           delta=1e-3 * b["mfu_peak"])
            self.assertAlmostEqual(used, final, delta=1e-3 * final)
            # A matmul's bytes, each operand once, give its arithmetic
            # intensity (2 m k n FLOPs over them); no mbu and no bandwidth
            # peak come of them.
            for b in matmuls:
                dims = [int(d) for d in b["name"].split("/")[2].split("x")]
                m, k, n = dims if len(dims) == 3 else (dims[0], dims[0], dims[1])
                size = 2 if dtype == "bf16" else 4
                self.assertAlmostEqual(b["FLOP/s"] / b["bytes/s"],
                                       2 * m * k * n / ((m * k + k * n + m * n) * size),
                                       delta=1e-6 * b["FLOP/s"] / b["bytes/s"])
                self.assertNotIn("mbu", b)
        self.assertNotIn("peak_bandwidth_cpu", ctx)

    def test_a_step_a_cache_holds_neither_has_mbu_nor_raises_the_peak(self):
        # Ops/embedding and Ops/layer_norm move 12 MiB a step in fp32, which
        # a last-level cache holds and reads back faster than memory: before
        # the cache was asked, they raised the measured bandwidth peak for
        # every benchmark after them (32 GB/s to 150 on a 32 MiB EPYC).
        doc = run_json("--devices=cpu", "--peak_flops=1e12", "--peak_cache=off",
                       "--benchmark_min_time=0.05", "--warmup_s=0",
                       "--benchmark_filter=^Ops/(embedding/[^/]+|layer_norm/[^/]+|"
                       "copy/256MiB)/cpu/fp32/")
        ctx = doc["context"]
        source = ctx["peak_bandwidth_cpu"]
        self.assertIn("measured", source)
        by_op = {b["name"].split("/")[1]: b for b in doc["benchmarks"]}
        self.assertEqual(set(by_op), {"embedding", "layer_norm", "copy"})
        cache = last_level_cache()
        mib = 1 << 20
        for op, step in (("embedding", 2 * 2048 * 768 * 4 + 8 * 2048),
                         ("layer_norm", 2 * 2048 * 768 * 4), ("copy", 2 * 256 * mib)):
            b = by_op[op]
            seconds = b["real_time"] * TIME_UNITS[b["time_unit"]]
            self.assertAlmostEqual(b["bytes/s"] * seconds, step, delta=1e-6 * step)
            label = b.get("label", "")
            if 0 < step <= cache:
                self.assertNotIn("mbu", b, op)
                self.assertRegex(label, r"^mbu left out: a step works over 12\.0 MiB, which "
                                 r"the device's [0-9.]+ [MG]iB cache holds: it reads from "
                                 r"the cache, not from memory$", op)
            elif "mbu" not in b:  # under eight caches, faster than the peak
                self.assertLess(step, 8 * cache, op)
                self.assertIn("which served part of its reads (the peak is not raised for "
                              "it)", label, op)
            else:
                self.assertLessEqual(b["mbu"], 1.0, op)
                self.assertAlmostEqual(b["mbu"], b["bytes/s"] / b["mbu_peak"],
                                       delta=1e-6 * b["mbu"])
            if step < 8 * cache:
                self.assertNotIn(f"by Ops/{op}/", source, "no raise from a cached step")

    def test_given_peaks_are_used_and_recorded(self):
        # GPT2/small: a decode step reads its 495 MB of fp32 weights, past
        # the cache of the CPUs this runs on (and mbu divides them by the
        # peak under eight caches too, when they do not beat it).
        # A bandwidth above any CPU's: a given peak that a step beats is a
        # wrong one, and leaves mbu out.
        args = [a for a in FAST if not a.startswith("--peak_bandwidth")]
        doc = run_json(*args, "--peak_bandwidth=1e12", "--devices=cpu", "--new_tokens=3",
                       "--prompt=2", "--benchmark_filter=Transformer/nano/cpu/forward/|"
                       "GPT2/(nano|small)/cpu/generate")
        ctx = doc["context"]
        self.assertIn("--peak_flops", ctx["peak_flops_cpu_fp32"])
        self.assertIn("--peak_bandwidth", ctx["peak_bandwidth_cpu"])
        by_name = {"/".join(b["run_name"].split("/")[1:4:2]): b for b in doc["benchmarks"]}
        self.assertEqual(set(by_name), {"nano/forward", "nano/generate", "small/generate"})
        forward = by_name["nano/forward"]
        self.assertAlmostEqual(forward["mfu"], forward["FLOP/s"] / 1e12,
                               delta=1e-3 * forward["mfu"])
        self.assertEqual(forward["mfu_peak"], 1e12)
        for size in ("nano", "small"):
            gen = by_name[f"{size}/generate"]
            # Decode's reads: the weights and the cache up to each step's position.
            self.assertGreater(gen["read_GB/s"], gen["weight_GB/s"])
            step = gen["read_GB/s"] * 1e9 * gen["tpot_ms"] / 1e3
            # A decode step reads its weights and part of the cache.
            self.assertGreater(step, gen["weight_bytes"])
            self.assertLess(step, gen["weight_bytes"] + gen["kv_cache_bytes"])
            assert_mbu_or_held_by_the_cache(self, gen, step, 1e12)
            if "mbu" in gen:
                self.assertEqual(gen["mbu_peak"], 1e12)
        if last_level_cache():  # nano's 0.65 MB: what a cache holds
            self.assertNotIn("mbu", by_name["nano/generate"])

    def test_a_left_out_mfu_is_said_in_the_result(self):
        # A given peak far below what the steps reach: mfu is left out, and
        # the result's label says by how much the peak was passed and why the
        # count may exceed the arithmetic: for convolutions, that their FLOPs
        # are a direct convolution's; for a decoder, causal attention's full
        # square.
        args = [a for a in FAST if not a.startswith("--peak_flops")]
        proc = run_bench("--benchmark_format=json", *args, "--devices=cpu", "--peak_flops=1e6",
                         "--benchmark_filter=CNN/nano/cpu/forward/|Transformer/nano/cpu/forward/")
        doc = json.loads(proc.stdout)
        # Said on stderr once a benchmark, not once each of Google
        # Benchmark's rounds of growing iterations.
        said = [line for line in proc.stderr.splitlines()
                if line.startswith("bench: mfu: ") and "above the fp32 FLOP/s peak" in line]
        self.assertEqual(sorted(line.split()[2] for line in said),
                         sorted(b["run_name"].replace("/manual_time", "")
                                for b in doc["benchmarks"]), proc.stderr)
        by_family = {b["run_name"].split("/")[0]: b for b in doc["benchmarks"]}
        self.assertEqual(set(by_family), {"CNN", "Transformer"})
        for family, b in by_family.items():
            self.assertNotIn("mfu", b)
            self.assertNotIn("mfu_peak", b)
            label = b.get("label", "")
            self.assertIn("mfu left out: the rate is ", label)
            times = float(re.search(r"rate is (\S+) times the fp32 FLOP/s peak 1e\+06 "
                                    r"\(--peak_flops\)", label).group(1))
            self.assertAlmostEqual(times, b["FLOP/s"] / 1e6, delta=0.01 * times)
            convolution = "counted as a direct convolution" in label and "Winograd or FFT" in label
            causal = "causal attention over every key" in label and "masked half" in label
            self.assertEqual((convolution, causal), (family == "CNN", family != "CNN"), label)

    def test_bad_peaks_exit_2(self):
        # fp64 is a --model file's dtype, which --peak_flops takes; int8 no dtype's.
        proc = run_bench("--peak_flops=int8=1", check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--peak_flops", proc.stderr)
        self.assertIn("with dtypes fp32, bf16, fp16, fp64", proc.stderr)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class PeakCacheTest(unittest.TestCase):
    """--peak_cache: runs on one machine divide by the best peak any of them
    measured, and the record names every run."""
    COPY = ["--devices=cpu", "--peak_flops=1e12", "--benchmark_min_time=0.01",
            "--warmup_s=0", "--benchmark_filter=^Ops/copy/256MiB/cpu/fp32"]

    def test_runs_share_the_best_measured_bandwidth(self):
        with tempfile.TemporaryDirectory() as tmp:
            record = os.path.join(tmp, "peaks.json")
            with open(record, "w") as f:
                f.write("{not json")  # a record that cannot be read is replaced
            proc = run_bench("--benchmark_format=json", *self.COPY, f"--peak_cache={record}")
            self.assertIn(f"the peak cache {record} is not a record of peaks", proc.stderr)
            first = json.loads(proc.stdout)["context"]
            self.assertTrue(first["peak_cache"].startswith(record), first["peak_cache"])
            self.assertIn("the first run on this machine to measure it",
                          first["peak_bandwidth_cpu"])
            with open(record) as f:
                doc = json.load(f)
            (key, entry), = doc["peaks"].items()  # --peak_flops given: bandwidth alone
            self.assertTrue(key.startswith("bandwidth | cpu: "), key)
            self.assertEqual(entry["runs"], 1)
            self.assertAlmostEqual(entry["bytes_or_flops_per_s"],
                                   peak_of(first, "peak_bandwidth_cpu"),
                                   delta=1e-3 * entry["bytes_or_flops_per_s"])
            # A record three times what this machine read: the next run
            # divides by it (its mbu is smaller, and never above 1), names it
            # and its own measurement, and the record counts the run but keeps
            # its best.
            best = 3 * entry["bytes_or_flops_per_s"]
            entry["bytes_or_flops_per_s"] = best
            entry["measured_at"] = "2020-01-01T00:00:00Z"
            with open(record, "w") as f:
                json.dump(doc, f)
            second = run_json(*self.COPY, f"--peak_cache={record}")
            ctx = second["context"]
            self.assertEqual(peak_of(ctx, "peak_bandwidth_cpu"), float(f"{best:.4g}"))
            self.assertIn(f"the best of 2 runs on this machine, {best:.4g} at "
                          "2020-01-01T00:00:00Z", ctx["peak_bandwidth_cpu"])
            own = re.search(r"this run measured ([0-9.e+]+) ", ctx["peak_bandwidth_cpu"])
            self.assertIsNotNone(own, ctx["peak_bandwidth_cpu"])
            copy, = second["benchmarks"]
            self.assertAlmostEqual(copy["mbu_peak"], best, delta=1e-9 * best)
            self.assertAlmostEqual(copy["mbu"], copy["bytes/s"] / best, delta=1e-9)
            with open(record) as f:
                after = json.load(f)
            self.assertEqual(after["peaks"][key]["runs"], 2)
            self.assertEqual(after["peaks"][key]["bytes_or_flops_per_s"], best)
            self.assertAlmostEqual(after["peaks"][key]["last_run"]["measured"], float(own[1]),
                                   delta=1e-3 * float(own[1]))
            # A record no run of this machine could reach (1e300 divided every
            # mbu down to zero) is replaced by the run's own, with a warning.
            after["peaks"][key]["bytes_or_flops_per_s"] = 1e300
            with open(record, "w") as f:
                json.dump(after, f)
            proc = run_bench("--benchmark_format=json", *self.COPY, f"--peak_cache={record}")
            self.assertIn(f"the peak cache {record} holds 1e+300 for {key}, 10 or more times "
                          "this run's", proc.stderr)
            third = json.loads(proc.stdout)
            self.assertLess(third["benchmarks"][0]["mbu_peak"], 1e300)
            self.assertIn("the first run on this machine to measure it",
                          third["context"]["peak_bandwidth_cpu"])
            with open(record) as f:
                replaced = json.load(f)["peaks"][key]
            self.assertLess(replaced["bytes_or_flops_per_s"], 1e300)
            self.assertEqual(replaced["runs"], 1)
            # off: the run's own measurement, and the record untouched.
            off = run_json(*self.COPY, "--peak_cache=off")["context"]
            self.assertTrue(off["peak_cache"].startswith("off"), off["peak_cache"])
            self.assertLess(peak_of(off, "peak_bandwidth_cpu"), best)
            self.assertNotIn("this machine", off["peak_bandwidth_cpu"])
            with open(record) as f:
                self.assertEqual(json.load(f)["peaks"][key], replaced)

    def test_a_directory_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = run_bench(*self.COPY, f"--peak_cache={tmp}", check=False)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(f"--peak_cache={tmp} is a directory", proc.stderr)
            self.assertIn("or off", proc.stderr)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class ProfileTest(unittest.TestCase):
    def test_profile_writes_a_trace_and_the_top_operators(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = run_bench("--benchmark_format=json", *FAST,
                             "--benchmark_filter=Transformer/nano/cpu/forward/", "--devices=cpu",
                             "--seq=128", f"--profile={tmp}", "--profile_steps=3")
            doc = json.loads(proc.stdout)
            self.assertFalse(doc["benchmarks"][0].get("error_occurred", False))
            stem = os.path.join(tmp, "Transformer_nano_cpu_forward_batch-2_seq-128_fp32")
            if os.path.exists(stem + ".trace.json"):
                with open(stem + ".trace.json") as f:
                    trace = json.load(f)
                self.assertTrue([e for e in trace["traceEvents"] if e.get("name") == "aten::mm"])
            else:  # a LibTorch without Kineto: the console must say so
                self.assertIn("no trace: ", proc.stderr)
                self.assertIn("Kineto", proc.stderr)
            with open(stem + ".ops.txt") as f:
                lines = f.read().splitlines()
            header = next(i for i, line in enumerate(lines) if line.startswith("operator"))
            rows = {line.split()[0]: line.split() for line in lines[header + 1:]
                    if line.startswith("aten::")}
            # Counts, which no load changes (the top operator by time did: a
            # preempted silu took 48% once): 3 steps of 15 matrix products,
            # q, k, v, o and the SwiGLU's three in each of 2 layers, and the head.
            self.assertEqual(int(rows["aten::mm"][1]), 45, lines)
            shares = [float(line.split()[-1].rstrip("%")) for line in lines[header + 1:]
                      if line.split() and line.split()[-1].endswith("%")
                      and not line.startswith("total")]
            self.assertEqual(shares, sorted(shares[:-1], reverse=True) + shares[-1:], lines)
            self.assertAlmostEqual(sum(shares), 100, delta=0.1 * len(shares))


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class SuiteTest(unittest.TestCase):
    def test_default_suite_lists_small_models_and_the_references(self):
        names = run_bench("--benchmark_list_tests", "--devices=cpu").stdout.split()
        self.assertIn("Ops/matmul/2048x2048/cpu/fp32/manual_time", names)
        self.assertIn("Ops/noop/empty/cpu/fp32/manual_time", names)
        self.assertIn("Ops/copy/256MiB/cpu/fp32/manual_time", names)
        for phase in ("forward", "forward_backward", "train_step"):
            # The CPU's own default shapes (README: the default suite).
            self.assertIn(f"Transformer/small/cpu/{phase}/batch:1/seq:64/fp32/manual_time",
                          names)
            self.assertIn(f"GPT2/small/cpu/{phase}/batch:1/seq:64/fp32/manual_time", names)
        self.assertIn("GPT2/small/cpu/generate/batch:1/prompt:32/new:32/fp32/manual_time",
                      names)
        self.assertIn("Llama/1B/cpu/generate/batch:1/prompt:16/new:4/fp32/manual_time", names)
        self.assertFalse([n for n in names if n.startswith("Llama/") and "/generate/" not in n])
        self.assertFalse([n for n in names if n.startswith("Llama/8B/")])  # GPUs only
        for name in ("ResNet/resnet18/cpu/forward/batch:4/fp32",
                     "ResNet/resnet18/cpu/train_step/batch:4/fp32",
                     "CNN/default/cpu/train_step/batch:128/fp32",
                     "Encoder/default/cpu/forward/batch:4/seq:128/fp32",
                     "Encoder/default/cpu/forward_backward/batch:4/seq:128/fp32",
                     "Whisper/tiny/cpu/encode/batch:1/fp32",
                     "Whisper/tiny/cpu/generate/batch:1/prompt:4/new:32/fp32",
                     "Whisper/tiny/cpu/transcribe/batch:1/prompt:4/new:32/fp32"):
            self.assertIn(name + "/manual_time", names)
        self.assertIn("EncDec/tiny/cpu/train_epoch/batch:16/seq:128/fp32/iterations:2/manual_time",
                      names)
        self.assertFalse([n for n in names if "/batch:4/seq:512/" in n], "no GPU shapes")
        self.assertFalse([n for n in names if "Transformer/small/cpu/train_epoch" in n])
        self.assertFalse([n for n in names if "/nano/" in n])

    def test_filter_all_lists_every_size_and_sweeps_expand(self):
        names = run_bench("--benchmark_list_tests", "--benchmark_filter=all",
                          "--devices=cpu", "--batch=1,8", "--dtype=fp32,bf16").stdout.split()
        for size in ("nano", "small", "medium", "large", "xl", "2.7B"):
            self.assertIn(f"Transformer/{size}/cpu/train_step/batch:8/seq:512/bf16/manual_time",
                          names)
        self.assertEqual(len([n for n in names if n.startswith("Transformer/")]),
                         6 * 4 * 2 * 2)
        # GPT2: 5 sizes x (3 sequence phases + generate) x 2 batches x 2 dtypes.
        self.assertEqual(len([n for n in names if n.startswith("GPT2/")]), 5 * 4 * 2 * 2)

    def test_gpu_axes_say_when_they_add_nothing(self):
        # --tf32 and --cuda_graphs are CUDA axes: on the CPU they add no
        # benchmark, and bench says so rather than ignoring them.
        proc = run_bench("--benchmark_list_tests", "--benchmark_filter=Ops/matmul/2048x2048",
                         "--devices=cpu", "--tf32=false,true", "--cuda_graphs=true")
        self.assertEqual(proc.stdout.split(), ["Ops/matmul/2048x2048/cpu/fp32/manual_time"])
        self.assertIn("--tf32=true adds no benchmark here: it applies to CUDA GPUs",
                      proc.stderr)
        self.assertIn("--cuda_graphs=true adds no benchmark here", proc.stderr)
        bad = run_bench("--benchmark_list_tests", "--tf32=maybe", check=False)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("--tf32", bad.stderr)

    def test_served_generation_is_graphed_on_cuda_alone(self):
        # Listing needs no GPU: a CUDA device's names are registered all the same.
        names = run_bench("--benchmark_list_tests", "--cuda_graphs=true", "--scenario=Offline",
                          "--serve_phase=generate",
                          "--benchmark_filter=GPT2/nano/(cpu|cuda)/serve").stdout.split()
        self.assertEqual(sorted(n.split("/iterations")[0] for n in names), [
            "GPT2/nano/cpu/serve/scenario:Offline/max_batch:8/prompt:32/output:100/fp32",
            "GPT2/nano/cuda/serve/scenario:Offline/max_batch:8/prompt:32/output:100/fp32/graph"])
        # On the CPU alone, nothing graphed is served, and bench says the flag adds nothing.
        proc = run_bench("--benchmark_list_tests", "--cuda_graphs=true", "--scenario=Offline",
                         "--benchmark_filter=GPT2/nano/cpu/serve")
        self.assertTrue(proc.stdout.split())
        self.assertFalse([n for n in proc.stdout.split() if "/graph" in n])
        self.assertIn("--cuda_graphs=true adds no benchmark here", proc.stderr)

    def test_nosync_runs_are_marked(self):
        names = run_bench("--benchmark_list_tests", "--benchmark_filter=Transformer/nano",
                          "--devices=cpu", "--sync=false").stdout.split()
        self.assertTrue(names)
        self.assertTrue(all("/nosync" in n for n in names), names)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class InterruptTest(unittest.TestCase):
    """A signal stops the run but keeps what it measured."""

    def start(self, out, *args, second="Selftest/slow/", seq=16, env=None):
        proc = subprocess.Popen(
            [BENCH, f"--benchmark_filter=Transformer/nano/cpu/forward/|{second}",
             "--devices=cpu", f"--seq={seq}", "--batch=2", "--warmup_s=0",
             "--benchmark_min_time=3",
             "--peak_flops=1e12", f"--benchmark_out={out}", "--benchmark_out_format=json",
             *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, LTB_SELFTEST="1", **(env or {})))
        # The console reporter prints each result as it finishes.
        for line in proc.stdout:
            if line.startswith("Transformer/nano/cpu/forward/"):
                return proc
        proc.kill()
        self.fail("no first result: " + proc.stderr.read())

    def test_a_signal_writes_valid_json_with_what_was_measured(self):
        import signal
        import time
        for signo, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "out.json")
                proc = self.start(out)
                time.sleep(1)  # Selftest/slow is in flight: 0.2 s a step for 3 s
                proc.send_signal(signo)
                if signo == signal.SIGINT:
                    # Delivered twice at once, as timeout(1) delivers it (to
                    # bench, then to its process group): still one stop.
                    proc.send_signal(signo)
                _, err = proc.communicate(timeout=120)
                self.assertEqual(proc.returncode, code, err)
                self.assertNotIn("second signal", err)
                with open(out) as f:
                    doc = json.load(f)
                entries = {b["run_name"].split("/")[0]: b for b in doc["benchmarks"]}
                self.assertEqual(set(entries), {"Transformer", "Selftest"})
                self.assertFalse(entries["Transformer"].get("error_occurred", False))
                self.assertTrue(entries["Selftest"]["error_occurred"])
                self.assertRegex(entries["Selftest"]["error_message"],
                                 f"interrupted by {signal.Signals(signo).name}")
                cmp = subprocess.run([sys.executable, COMPARE_PY, "benchmarks", out, out],
                                     capture_output=True, text=True, timeout=300)
                self.assertEqual(cmp.returncode, 0, cmp.stderr)
                self.assertIn("Transformer/nano/cpu/forward", cmp.stdout)

    def test_a_second_signal_exits_at_once(self):
        import signal
        import time
        with tempfile.TemporaryDirectory() as tmp:
            # A step of 10 s of busy waiting, in flight as soon as the first
            # result is printed (nothing to build): the first signal waits
            # for it, the second does not.
            proc = self.start(os.path.join(tmp, "out.json"), second="Selftest/spin/",
                              env={"LTB_SELFTEST_SLOWDOWN": "5000"})
            time.sleep(1)
            proc.send_signal(signal.SIGINT)
            time.sleep(1.3)  # a second signal: at least a second after the first
            start = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 130, err)
            self.assertIn("second signal, exiting now", err)
            self.assertLess(time.monotonic() - start, 1.5)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class PathsTest(unittest.TestCase):
    """Paths that cannot be written stop bench before anything runs."""

    def test_unwritable_paths_exit_2_naming_the_path_and_reason(self):
        with tempfile.TemporaryDirectory() as tmp:
            blocker = os.path.join(tmp, "file")
            open(blocker, "w").close()
            for args, expected in (
                    ([f"--benchmark_out={tmp}/no/such/dir/out.json"],
                     "its directory does not exist"),
                    ([f"--benchmark_out={tmp}"], "it is a directory"),
                    # A directory whose permissions allow root but whose file
                    # system makes no file: only trying to make one tells.
                    (["--benchmark_out=/proc/ltb-e2e-out.json"],
                     "cannot write --benchmark_out=/proc/ltb-e2e-out.json: "),
                    ([f"--profile={blocker}/trace"], f"cannot create --profile={blocker}/trace"),
                    ([f"--data_dir={blocker}/data"], f"cannot create --data_dir={blocker}/data"),
                    (["--data=disk", f"--data_dir={blocker}"], "--data_dir"),
                    (["--scenario=Offline", f"--serve_log_dir={blocker}/logs"],
                     f"cannot create --serve_log_dir={blocker}/logs")):
                proc = run_bench("--benchmark_filter=Transformer/nano/cpu/forward/", *FAST, *args,
                                 check=False)
                self.assertEqual(proc.returncode, 2, (args, proc.stderr))
                self.assertIn(expected, proc.stderr, args)
                self.assertNotIn("Transformer/nano", proc.stdout, "ran before refusing")


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



def export(fmt, family, size, out, *args):
    """tools/export's file of a family's inference benchmark, in `out`."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export"), fmt, family,
                           size, "--out", out, *args], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"export {fmt} {family} {size}: {proc.stderr[-3000:]}")
    return proc.stdout.strip()


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
@unittest.skipUnless(same_minor(TORCH_VERSION, torch_wheel_version()),
                     "files compiled by this Python's PyTorch load in a LibTorch of its version")
class CompiledTest(unittest.TestCase):
    """Eager against compiled: tools/export's files run beside the eager
    benchmarks (--compiled) and as a user's own models (--model)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "exports")
        # AOTInductor compiles C++ here (seconds a model): one package, and
        # TorchScript for a second family.
        cls.aoti = export("aoti", "Transformer", "nano", cls.dir, "--batch=2", "--seq=16")
        cls.ts = export("torchscript", "CNN", "nano", cls.dir, "--batch=2")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_a_model_files_inputs_are_in_the_memory_guards_estimate(self):
        # The estimate was the file's size alone: inputs of 1.1 TiB passed
        # the guard and ran into the allocator. 1e8 x 3 x 32 x 32 fp32 =
        # 1,228,800,000,000 bytes, 1144.41 GiB.
        doc = run_json(f"--model={self.ts}", "--inputs=100000000x3x32x32:fp32", "--devices=cpu",
                       "--warmup_s=0", "--peak_flops=1e12")
        [b] = doc["benchmarks"]
        self.assertTrue(b["error_occurred"])
        # Under the tuned malloc (the default) the activations count twice.
        self.assertIn("does not fit: needs about 2288.82 GiB (weights ", b["error_message"])
        self.assertIn("activations 1144.41 GiB, and as much as the activations again",
                      b["error_message"])

    def test_compiled_files_run_beside_the_eager_benchmarks_they_compile(self):
        doc = run_json("--benchmark_filter=(Transformer|CNN)/nano/cpu/forward/", *FAST,
                       "--seq=16", f"--compiled={self.dir}")
        entries = {b["run_name"].replace("/manual_time", ""): b for b in doc["benchmarks"]}
        eager_t = "Transformer/nano/cpu/forward/batch:2/seq:16/fp32"
        eager_c = "CNN/nano/cpu/forward/batch:2/fp32"
        self.assertEqual(set(entries), {eager_t, eager_t + "/aoti", eager_c,
                                        eager_c + "/torchscript"})
        for name, b in entries.items():
            self.assertFalse(b.get("error_occurred", False), (name, b.get("error_message")))
        for name in (eager_t + "/aoti", eager_c + "/torchscript"):
            compiled, eager = entries[name], entries[name.rsplit("/", 1)[0]]
            # The same model's counters, its own drift from eager and compile time.
            self.assertEqual(compiled["params"], eager["params"])
            self.assertAlmostEqual(compiled["FLOP/s"] * compiled["real_time"],
                                   eager["FLOP/s"] * eager["real_time"],
                                   delta=1e-3 * eager["FLOP/s"] * eager["real_time"])
            self.assertLess(compiled["rel_err"], 1e-4, name)
            self.assertGreater(compiled["compile_s"], 0, name)
            # The weights count, also where the package holds them itself.
            self.assertGreater(compiled["peak_mem"], 0.5 * eager["peak_mem"], name)

    def test_a_compiled_file_of_no_benchmark_made_here_is_said(self):
        # The files are of batch 2: at batch 8 none pairs, and that was silent.
        proc = run_bench("--benchmark_filter=CNN/nano/cpu/forward/", "--batch=8",
                         f"--compiled={self.dir}", "--benchmark_list_tests")
        self.assertIn(f"bench: --compiled: {self.ts} compiles CNN/nano/cpu/forward/batch:2/"
                      "fp32, which these flags make no benchmark of", proc.stderr)
        proc = run_bench("--benchmark_filter=(Transformer|CNN)/nano/cpu/forward/",
                         "--batch=2", "--seq=16", f"--compiled={self.dir}",
                         "--benchmark_list_tests")
        self.assertNotIn("make no benchmark of", proc.stderr)

    def test_user_model_files_run_as_the_model_family(self):
        bad = os.path.join(self.tmp.name, "broken.pt2")
        with open(bad, "w") as f:
            f.write("not a model")
        doc = run_json(f"--model={self.aoti},{self.ts},{bad}", "--benchmark_min_time=0.01",
                       "--warmup_s=0", "--devices=cpu", "--peak_flops=1e12")
        entries = {b["run_name"].replace("/manual_time", ""): b for b in doc["benchmarks"]}
        aoti = "Model/Transformer-nano-cpu-forward-batch2-seq16-fp32-aoti/cpu/forward/batch:2/fp32/aoti"
        ts = "Model/CNN-nano-cpu-forward-batch2-fp32-torchscript/cpu/forward/batch:2/fp32/torchscript"
        self.assertEqual(set(entries), {aoti, ts, "Model/broken/cpu/forward/batch:1/fp32/aoti"})
        # Token ids in: tokens/s; the saved inputs: drift from eager.
        self.assertAlmostEqual(entries[aoti]["tokens/s"] / entries[aoti]["samples/s"], 16)
        self.assertLess(entries[aoti]["rel_err"], 1e-4)
        # TorchScript runs LibTorch's operators, whose FLOPs are counted as the
        # CNN family's (its traced convolutions too): CNN/nano's card, by hand,
        # 2 x (3*16*9*32*32 + 16*32*9*16*16 + 2048*128 + 128*10) an image.
        per_image = 2 * (3 * 16 * 9 * 32 * 32 + 16 * 32 * 9 * 16 * 16 + 2048 * 128 + 128 * 10)
        self.assertAlmostEqual(entries[ts]["FLOP/s"] * entries[ts]["real_time"] * 1e-3,
                               2 * per_image, delta=1e-6 * per_image)
        self.assertIn("mfu", entries[ts])
        # A package's own kernels hide its FLOPs: none, and the label says why.
        self.assertNotIn("FLOP/s", entries[aoti])
        self.assertNotIn("mfu", entries[aoti])
        self.assertIn("FLOP/s and mfu left out: ", entries[aoti].get("label", ""))
        self.assertIn("--flops_per_step", entries[aoti]["label"])
        broken = entries["Model/broken/cpu/forward/batch:1/fp32/aoti"]
        self.assertTrue(broken["error_occurred"])
        self.assertIn(bad + ": not a model file", broken["error_message"])
        # A file's peak_mem is its own: no other file's saved inputs and
        # outputs stay in memory through its benchmark.
        [alone] = [b for b in run_json(f"--model={self.ts}", "--benchmark_min_time=0.01",
                                       "--warmup_s=0", "--devices=cpu",
                                       "--peak_flops=1e12")["benchmarks"]]
        self.assertEqual(entries[ts]["peak_mem"], alone["peak_mem"])

    def test_a_files_dtype_and_tokens_follow_what_it_holds(self):
        """A package of token ids with bf16 weights was named fp32 and its mfu
        divided by the fp32 peak; a flattened uint8 image counted as tokens;
        fp64 inputs were named Double, their mfu left out as unconverted
        arithmetic."""
        folder = os.path.join(self.tmp.name, "kinds")
        os.makedirs(folder, exist_ok=True)
        code = f"""
import torch
class Tokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.e = torch.nn.Embedding(100, 16)
        self.l = torch.nn.Linear(16, 8)
    def forward(self, ids):
        return self.l(self.e(ids))
m = Tokens().to(torch.bfloat16).eval()
ep = torch.export.export(m, (torch.randint(0, 100, (4, 8)),))
torch._inductor.aoti_compile_and_package(ep, package_path={folder!r} + "/tokbf16.pt2")
class Image(torch.nn.Module):  # a flattened 28 x 28 image of bytes
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(784, 10)
    def forward(self, x):
        return self.l(x.float() / 255)
torch.jit.script(Image()).save({folder!r} + "/image.pt")
torch.jit.script(torch.nn.Linear(64, 64).double()).save({folder!r} + "/lin64.pt")
"""
        script = os.path.join(folder, "make.py")  # TorchScript reads its classes' source
        with open(script, "w") as f:
            f.write(code)
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True,
                              timeout=900)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        common = ("--devices=cpu", "--benchmark_min_time=0.01", "--warmup_s=0")
        [tok] = run_json(f"--model={folder}/tokbf16.pt2", "--inputs=4x8:int64[0,100)",
                         "--flops_per_step=2048", "--peak_flops=fp32=1e12,bf16=4e12",
                         *common)["benchmarks"]
        self.assertTrue(tok["run_name"].startswith(
            "Model/tokbf16/cpu/forward/batch:4/bf16/aoti/"), tok["run_name"])
        self.assertEqual(tok["mfu_peak"], 4e12)
        self.assertAlmostEqual(tok["tokens/s"] / tok["samples/s"], 8)
        [image] = run_json(f"--model={folder}/image.pt", "--inputs=4x784:uint8[0,256)",
                           "--peak_flops=1e12", *common)["benchmarks"]
        self.assertFalse(image.get("error_occurred", False), image.get("error_message"))
        self.assertNotIn("tokens/s", image)
        [image] = run_json(f"--model={folder}/image.pt", "--inputs=4x784:int64[0,2)",
                           "--peak_flops=1e12", *common)["benchmarks"]
        self.assertIn("tokens/s", image)  # int64 (B, T): token ids
        [wide] = run_json(f"--model={folder}/lin64.pt", "--inputs=8x64:fp64",
                          "--peak_flops=1e12", *common)["benchmarks"]
        self.assertTrue(wide["run_name"].startswith(
            "Model/lin64/cpu/forward/batch:8/fp64/torchscript/"), wide["run_name"])
        self.assertEqual(wide["mfu_peak"], 1e12)  # one number for every dtype
        [wide] = run_json(f"--model={folder}/lin64.pt", "--inputs=8x64:fp64",
                          "--peak_flops=fp32=1e12", *common)["benchmarks"]
        self.assertNotIn("mfu", wide)
        self.assertIn("the suite measures no fp64 peak", wide["label"])

    def test_one_stem_as_a_package_and_as_torchscript_is_two_benchmarks(self):
        import shutil
        dirs = []
        for i, src in enumerate((self.aoti, self.ts)):
            d = os.path.join(self.tmp.name, f"stem{i}")
            os.makedirs(d, exist_ok=True)
            ext = ".pt2" if src.endswith(".pt2") else ".pt"
            shutil.copy(src, os.path.join(d, "usernet" + ext))
            io = src[:-len(ext)] + ".io.pt"
            if os.path.exists(io):
                shutil.copy(io, os.path.join(d, "usernet.io.pt"))
            dirs.append(os.path.join(d, "usernet" + ext))
        doc = run_json(f"--model={dirs[0]},{dirs[1]}", *FAST)
        names = sorted(b["run_name"].replace("/manual_time", "") for b in doc["benchmarks"])
        self.assertEqual(names, ["Model/usernet/cpu/forward/batch:2/fp32/aoti",
                                 "Model/usernet/cpu/forward/batch:2/fp32/torchscript"])
        for b in doc["benchmarks"]:
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
        # Two files of one backend and stem would share a name: refused.
        other = os.path.join(self.tmp.name, "usernet.pt")
        shutil.copy(self.ts, other)
        proc = run_bench(f"--model={dirs[1]},{other}", check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("two torchscript files are named usernet", proc.stderr)

    def test_without_a_filter_every_benchmark_measures_several_steps(self):
        # Model files replace the default suite, which runs with its own
        # minimum time unless one is given.
        doc = run_json(f"--model={self.ts}", "--warmup_s=0", "--devices=cpu",
                       "--peak_flops=1e12")
        self.assertEqual(doc["context"]["min_time"], "6 s (the default suite's)")
        [entry] = doc["benchmarks"]
        self.assertGreaterEqual(entry["iterations"], 3)
        self.assertIn("step_cv_%", entry)
        self.assertGreaterEqual(entry["real_time"] * entry["iterations"] * 1e-3, 5 * 0.99)
        given = run_json(f"--model={self.ts}", *FAST)
        self.assertTrue(given["context"]["min_time"].startswith("as given"))

    def test_inputs_and_batches_for_a_model(self):
        doc = run_json(f"--model={self.ts}", "--inputs=5x3x32x32:fp32", "--batch=1,4",
                       "--benchmark_min_time=0.01", "--warmup_s=0", "--devices=cpu",
                       "--peak_flops=1e12")
        by_batch = {b["run_name"].split("/")[4]: b for b in doc["benchmarks"]}
        self.assertEqual(set(by_batch), {"batch:1", "batch:4"})
        # Inputs other than the file's are another computation: named.
        self.assertEqual(by_batch["batch:4"]["run_name"],
                         f"Model/{os.path.splitext(os.path.basename(self.ts))[0]}/cpu/"
                         "forward/batch:4/fp32/torchscript/"
                         "inputs:5x3x32x32:fp32/manual_time")
        self.assertEqual(doc["context"]["model_inputs"], "5x3x32x32:fp32")
        # Each batch's FLOPs are its own: CNN/nano's an image, by hand, times the batch.
        per_image = 2 * (3 * 16 * 9 * 32 * 32 + 16 * 32 * 9 * 16 * 16 + 2048 * 128 + 128 * 10)
        for batch, b in by_batch.items():
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            self.assertNotIn("rel_err", b, "no eager outputs for inputs of the user's")
            images = int(batch.split(":")[1])
            self.assertAlmostEqual(b["FLOP/s"] * b["real_time"] * 1e-3, images * per_image,
                                   delta=1e-6 * per_image)
        # The same inputs typed otherwise (spaces, a trailing ';') are one name.
        given_doc = run_json(f"--model={self.ts}", "--inputs= 5x3x32x32:fp32 ;", "--batch=4",
                             "--benchmark_min_time=0.01", "--warmup_s=0", "--devices=cpu",
                             "--flops_per_step=2e6", "--peak_flops=1e12")
        self.assertEqual(given_doc["context"]["model_flops_per_step"], "2e6")
        [given] = given_doc["benchmarks"]
        self.assertEqual(given["run_name"], by_batch["batch:4"]["run_name"])
        self.assertAlmostEqual(given["FLOP/s"] * given["real_time"] * 1e-3, 2e6, delta=2e3)
        # One forward's FLOPs, given to a batch sweep, would be wrong at all but one.
        proc = run_bench(f"--model={self.ts}", "--batch=1,4", "--flops_per_step=2e6",
                         check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--flops_per_step gives the FLOPs of one forward at one batch",
                      proc.stderr)
        # A static AOTInductor package at another batch: an error naming it.
        [entry] = run_json(f"--model={self.aoti}", *FAST, "--batch=3")["benchmarks"]
        self.assertTrue(entry["error_occurred"])
        self.assertIn(self.aoti, entry["error_message"])
        proc = run_bench(f"--model={self.ts}", "--inputs=5x3:float", check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("bad --inputs item '5x3:float'", proc.stderr)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class OlderLibTorchTest(unittest.TestCase):
    @unittest.skipIf(not TORCH_VERSION or tuple(map(int, TORCH_VERSION.split(".")[:2])) >= (2, 8),
                     "this LibTorch runs AOTInductor packages")
    def test_aotinductor_packages_need_libtorch_2_8(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.pt2")
            with open(path, "w") as f:
                f.write("any")
            [entry] = run_json(f"--model={path}", "--inputs=2x4:fp32", *FAST)["benchmarks"]
            self.assertIn("AOTInductor packages need LibTorch 2.8 or newer", entry["error_message"])


NANO = ["--benchmark_min_time=0.01", "--warmup_s=0", "--batch=2", "--seq=16", "--prompt=4",
        "--new_tokens=3", "--epochs=1", "--warmup_epochs=0", "--dataset_samples=4",
        "--devices=cpu"]


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class PrecisionTest(unittest.TestCase):
    """Every family and phase at nano size in three precisions and both CPU
    linear paths: what runs, what it reports, and what it says when it cannot."""

    # Where the older CPU simulated is this one (e2e_older_cpu on a CPU with
    # nothing above AVX2), every benchmark runs as in e2e.PrecisionTest: one
    # family's then shows that the simulation is recorded, and the tests of
    # what ran are e2e.PrecisionTest's.
    RECORDED = "test_a_simulated_older_cpu_is_recorded_and_followed"

    @classmethod
    def setUpClass(cls):
        cls.this_cpu = simulating_this_cpu()
        cls.doc = run_json("--benchmark_filter=" + ("^Transformer/nano/cpu/forward/"
                                                     if cls.this_cpu else "/nano/cpu/"),
                           *NANO, "--dtype=fp32,bf16,fp16",
                           "--cpu_linear=aten,onednn", "--peak_flops=fp32=1e12,bf16=4e12",
                           "--peak_bandwidth=1e10")
        cls.entries = {b["run_name"].replace("/manual_time", ""): b
                       for b in cls.doc["benchmarks"]}

    def setUp(self):
        if self.this_cpu and self._testMethodName != self.RECORDED:
            self.skipTest("the simulated older CPU is this CPU (nothing above AVX2): "
                          "e2e.PrecisionTest runs the same")

    def test_every_counter_is_finite_and_every_failure_says_why(self):
        import math
        # (phases + CPU inference phases with packed linears) x 3 dtypes:
        # Transformer 4 + 1, GPT2 4 + 2, Llama 4 + 2, ResNet 2 + 1, CNN 2 + 1,
        # Encoder 2, Whisper 3 + 3, EncDec 3.
        self.assertEqual(len(self.entries), 3 * (5 + 6 + 6 + 3 + 3 + 2 + 6 + 3))
        bf16_onednn = onednn_runs_bf16()
        for name, b in self.entries.items():
            if b.get("error_occurred"):
                message = b["error_message"]
                # The suite's own sentence, never a bare library message.
                self.assertNotIn("LibTorch error", message, name)
                if "/bf16" in name:
                    # oneDNN's bf16 linear where the CPU (or ONEDNN_MAX_CPU_ISA)
                    # lacks the instructions ATen checks for.
                    self.assertFalse(bf16_onednn, (name, message))
                    self.assertTrue(name.endswith("/onednn"), (name, message))
                    # Missing instructions, or (on a CPU that has them)
                    # ONEDNN_MAX_CPU_ISA holding oneDNN below them.
                    flags = cpu_flags()[1]
                    hardware = ({"avx512bw", "avx512vl", "avx512dq"} <= flags
                                or "avx_ne_convert" in flags)
                    self.assertIn("bf16 linear needs", message, name)
                    self.assertIn("ONEDNN_MAX_CPU_ISA=" if hardware else
                                  "this CPU has no AVX-512 BW/VL/DQ or AVX-NE-CONVERT",
                                  message, name)
                    continue
                # What cannot run: oneDNN's linear in fp16, and any fp16 where
                # this LibTorch has no fp16 matmul on the CPU (1.13).
                self.assertIn("/fp16", name, message)
                self.assertTrue("runs fp32 and bf16, not fp16" in message or
                                "has no fp16 matrix multiply on cpu" in message,
                                (name, message))
                continue
            for key, value in b.items():
                if isinstance(value, float):
                    self.assertTrue(math.isfinite(value), (name, key, value))

    def test_onednn_bf16_runs_exactly_where_aten_allows_it(self):
        bf16 = [b for n, b in self.entries.items() if "/bf16" in n and n.endswith("/onednn")]
        # Transformer 1, GPT2 2, Llama 2, ResNet 1, CNN 1, Whisper 3.
        self.assertEqual(len(bf16), 10)
        refused = [b for b in bf16 if b.get("error_occurred")]
        self.assertEqual(len(refused), 0 if onednn_runs_bf16() else len(bf16))

    def test_a_simulated_older_cpu_is_recorded_and_followed(self):
        ctx = self.doc["context"]
        self.assertEqual(ctx.get("aten_cpu_capability"),
                         os.environ.get("ATEN_CPU_CAPABILITY") or None)
        limits = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "LTB_MAX_CPU_ISA")
        for var in limits:
            self.assertEqual(ctx.get(var.lower()), simulated(var) or None, var)
        # ATEN_CPU_CAPABILITY alone: bench limits oneDNN, MKL and its peaks to match.
        self.assertEqual("cpu_simulation" in ctx,
                         any(simulated(v) != os.environ.get(v, "") for v in limits))
        limit = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
        if limit in ("avx2", "default"):
            # LibTorch dispatches no wider than asked (never wider than the CPU).
            self.assertIn(ctx["cpu_capability"].lower(), ("avx2", "default"))
            if limit == "default":
                self.assertEqual(ctx["cpu_capability"].lower(), "default")

    def test_reduced_precision_inference_reports_its_drift_from_fp32(self):
        for name, b in self.entries.items():
            if b.get("error_occurred"):
                continue
            phase = name.split("/")[3]
            reduced = "/bf16" in name or "/fp16" in name
            inference = phase in ("forward", "encode", "generate", "transcribe")
            tokens = phase in ("generate", "transcribe")
            self.assertEqual("rel_err" in b, reduced and inference and not tokens, name)
            self.assertEqual("token_match_%" in b, reduced and tokens, name)
            if "rel_err" in b:
                self.assertLess(b["rel_err"], 0.2, name)
            if "token_match_%" in b:
                self.assertGreaterEqual(b["token_match_%"], 0, name)
                self.assertLessEqual(b["token_match_%"], 100, name)
            # Language models' next-token distributions, teacher-forced
            # against fp32: every reduced-precision generate, and forward of
            # the decoders and EncDec.
            family = name.split("/")[0]
            scored = reduced and (phase == "generate" or (
                phase == "forward" and family in ("Transformer", "GPT2", "Llama", "EncDec")))
            if scored and "kld_mean" not in b:  # fp16 logits that overflowed
                # Their top tokens mean nothing either (argmax takes a NaN).
                self.assertNotIn("same_top1_%", b, name)
                self.assertRegex(b.get("label", ""), r"kld and same_top1_% left out: the "
                                 r"logits of \d+ of \d+ positions are not finite", name)
                continue
            self.assertEqual("same_top1_%" in b, scored, name)
            if scored:
                self.assertGreaterEqual(b["same_top1_%"], 0, name)
                self.assertLessEqual(b["same_top1_%"], 100, name)
                self.assertGreaterEqual(b["kld_mean"], 0, name)
                self.assertLessEqual(b["kld_mean"], b["kld_max"], name)
                self.assertLessEqual(b["kld_p99"], b["kld_max"], name)
                self.assertLess(b["kld_max"], 1, name)

    def test_onednn_linears_are_a_named_axis_of_cpu_inference_only(self):
        onednn = [n for n in self.entries if n.endswith("/onednn")]
        families = {n.split("/")[0] for n in onednn}
        self.assertEqual(families, {"Transformer", "GPT2", "Llama", "ResNet", "CNN", "Whisper"})
        for n in onednn:
            self.assertIn(n.split("/")[3], ("forward", "encode", "generate", "transcribe"), n)
            self.assertIn(n[:-len("/onednn")], self.entries, "the aten twin ran too")

    def test_fp16_has_mfu_only_where_the_cpu_computes_it(self):
        ctx = self.doc["context"]
        native_fp16 = "avx512_fp16" in cpu_flags()[0]
        forward = self.entries["Transformer/nano/cpu/forward/batch:2/seq:16/fp16"]
        if forward.get("error_occurred"):
            self.skipTest(forward["error_message"])
        # --peak_flops gave no fp16 peak: measured, or none without native fp16.
        self.assertEqual("mfu" in forward, native_fp16, ctx.get("peak_flops_cpu_fp16"))
        if not native_fp16:
            self.assertIn("no native fp16 arithmetic", ctx["peak_flops_cpu_fp16"])
            # The result itself says why it has no mfu.
            self.assertIn(f"mfu left out: {without_arithmetic()} has no native fp16 arithmetic",
                          forward.get("label", ""))

    def test_step_spread_and_resident_memory(self):
        for name, b in self.entries.items():
            if b.get("error_occurred"):
                continue
            for key in ("step_p50_ms", "step_p90_ms", "step_p99_ms", "peak_rss"):
                self.assertIn(key, b, name)
            # A spread needs two steps; one (an epoch here) has none to report.
            self.assertEqual("step_cv_%" in b, b["iterations"] > 1, name)
            self.assertLessEqual(b["step_p50_ms"], b["step_p90_ms"], name)
            self.assertLessEqual(b["step_p90_ms"], b["step_p99_ms"], name)
            self.assertGreater(b["peak_rss"], 10 << 20, name)

    def test_swept_epochs_keep_their_mfu(self):
        epoch = self.entries["EncDec/nano/cpu/train_epoch/batch:2/seq:16/fp32/"
                             "dataset_samples:4/iterations:1"]
        self.assertIn("mfu", epoch)


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class StepsTest(unittest.TestCase):
    def test_steps_measures_exactly_that_many_for_every_benchmark(self):
        doc = run_json("--benchmark_filter=Transformer/nano/cpu/(forward|train_step)/|"
                       "Ops/noop/|CNN/nano/cpu/forward/", *FAST, "--steps=7")
        self.assertEqual(len(doc["benchmarks"]), 4)
        for b in doc["benchmarks"]:
            self.assertEqual(b["iterations"], 7, b["name"])
            self.assertIn("/iterations:7/", b["name"])


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(BENCH, "LTB_BENCH is not set")
class ServeTest(unittest.TestCase):
    """The serve phase: a nano model under LoadGen in two scenarios, LoadGen's
    logs kept beside the JSON, a bound no server meets, Server's peak search,
    refusals, an interrupt."""

    SERVE = ["--devices=cpu", "--warmup_s=0", "--seq=16", "--serve_min_s=0.2",
             "--serve_min_queries=16", "--max_batch=4", "--target_qps=100", *GIVEN_PEAKS]
    NAME = "GPT2/nano/cpu/serve/scenario:{}/max_batch:4/seq:16/fp32"

    def named(self, scenario, samples=22):
        """NAME of a scenario: Offline's one query holds (and is named by)
        the minimum count or 1.1 x the rate x the minimum duration, whichever
        is more: SERVE's 1.1 x 100 QPS x 0.2 s, unless given."""
        return self.NAME.format(f"Offline/samples:{samples}" if scenario == "Offline"
                                else scenario)

    def test_a_scenario_that_serves_nothing_the_filter_selects_says_so(self):
        said = "--scenario adds no benchmark that the filter selects"
        # Whisper serves its encoder alone: served generation adds nothing.
        proc = run_bench("--benchmark_filter=^Whisper/nano/", "--scenario=Offline",
                         "--serve_phase=generate", "--benchmark_list_tests")
        self.assertIn(said, proc.stderr)
        self.assertNotIn("/serve/", proc.stdout)
        for args in (["--benchmark_filter=^Whisper/nano/"],
                     ["--benchmark_filter=^GPT2/nano/", "--serve_phase=generate"]):
            proc = run_bench(*args, "--scenario=Offline", "--benchmark_list_tests")
            self.assertNotIn(said, proc.stderr, args)
            self.assertIn("/serve/scenario:Offline/", proc.stdout, args)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.files = []
        for i in range(2):
            path = os.path.join(cls.tmp.name, f"run{i}.json")
            run_bench("--benchmark_filter=GPT2/nano/cpu/serve/", *cls.SERVE,
                      "--scenario=SingleStream,Offline", f"--benchmark_out={path}",
                      "--benchmark_out_format=json")
            cls.files.append(path)
        with open(cls.files[0]) as f:
            cls.doc = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def entries(self, doc=None):
        return {b["run_name"]: b for b in (doc or self.doc)["benchmarks"]}

    def test_each_scenario_is_one_loadgen_test_with_its_counters(self):
        entries = self.entries()
        self.assertEqual(set(entries), {
            self.named(s) + "/iterations:1/manual_time"
            for s in ("SingleStream", "Offline")})
        for name, b in entries.items():
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            self.assertEqual(b["iterations"], 1, name)
            self.assertGreater(b["samples/s"], 0, name)
            # A sequence of 16 tokens a sample.
            self.assertAlmostEqual(b["tokens/s"] / b["samples/s"], 16, places=6)
            self.assertLessEqual(b["p50_ms"], b["p90_ms"])
            self.assertLessEqual(b["p90_ms"], b["p99_ms"])
            self.assertLessEqual(b["p99_ms"], b["p99.9_ms"])
            self.assertGreater(b["latency_mean_ms"], 0)
            self.assertIn(b["valid"], (0, 1))
            self.assertRegex(b["label"], r"^scenario:\w+ (VALID|INVALID)")
            self.assertEqual(b["max_batch"], 4)
            self.assertNotIn("goodput", b, "goodput is Server's")
        single = entries[self.named("SingleStream") + "/iterations:1/manual_time"]
        self.assertGreaterEqual(single["queries"], 16)
        # SingleStream issues one sample at a time: every batch holds one.
        self.assertEqual(single["batches"], single["queries"])

    def test_loadgens_logs_are_kept_beside_the_json(self):
        logs = os.path.join(self.tmp.name, "run0.loadgen")
        for scenario in ("SingleStream", "Offline"):
            folder = os.path.join(logs, self.named(scenario)
                                  .replace("/", "_").replace(":", "-"))
            with open(os.path.join(folder, "mlperf_log_detail.txt")) as f:
                detail = f.read()
            self.assertIn(f'"effective_scenario", "value": "{scenario}"', detail)
            if scenario == "Offline":  # the samples its name carries
                self.assertIn('"effective_samples_per_query", "value": 22,', detail)
            self.assertIn('"result_validity"', detail)
            self.assertTrue(os.path.isfile(os.path.join(folder, "mlperf_log_summary.txt")))

    def test_compare_py_accepts_two_runs(self):
        proc = subprocess.run([sys.executable, COMPARE_PY, "benchmarks", *self.files],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(self.named("Offline"), proc.stdout)

    def test_a_bound_no_server_meets_is_invalid_not_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc = run_json("--benchmark_filter=GPT2/nano/cpu/serve/", *self.SERVE,
                           "--scenario=Server", "--latency_bound_ms=0.001",
                           f"--serve_log_dir={tmp}")
            [b] = doc["benchmarks"]
            self.assertEqual(b["run_name"],
                             "GPT2/nano/cpu/serve/scenario:Server/qps:100/max_batch:4/"
                             "seq:16/latency_bound_ms:0.001/fp32/iterations:1/manual_time")
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            self.assertEqual(b["valid"], 0)
            self.assertRegex(b["label"], r"^scenario:Server INVALID: \S")
            self.assertAlmostEqual(b["bound_ms"], 0.001)
            # Not one sample within a microsecond: no goodput.
            self.assertEqual(b["goodput"], 0)
            self.assertGreater(b["qps_completed"], 0)
            self.assertEqual(len(os.listdir(tmp)), 1)

    def test_multistream_reports_its_queries_and_its_samples_latencies(self):
        # MLPerf's MultiStream figure is a query's p99 (until its last sample
        # completes): LoadGen's per-query value, beside its per-sample one.
        with tempfile.TemporaryDirectory() as tmp:
            doc = run_json("--benchmark_filter=GPT2/nano/cpu/serve/", *self.SERVE,
                           "--scenario=MultiStream", f"--serve_log_dir={tmp}")
            [b] = doc["benchmarks"]
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            [folder] = os.listdir(tmp)
            detail = {}
            with open(os.path.join(tmp, folder, "mlperf_log_detail.txt")) as f:
                for line in f:
                    if ":::MLLOG " in line:
                        e = json.loads(line.split(":::MLLOG ", 1)[1])
                        detail[e.get("key")] = e.get("value")
            for p in ("50", "90", "99"):
                self.assertAlmostEqual(
                    b[f"query_p{p}_ms"],
                    detail[f"result_{p}.00_percentile_per_query_latency_ns"] * 1e-6, places=9)
                self.assertAlmostEqual(
                    b[f"p{p}_ms"], detail[f"result_{p}.00_percentile_latency_ns"] * 1e-6,
                    places=9)
            self.assertAlmostEqual(b["query_latency_mean_ms"],
                                   detail["result_mean_query_latency_ns"] * 1e-6, places=9)
            # A query's samples complete before the next query is issued.
            self.assertAlmostEqual(
                b["samples/s"], detail["effective_samples_per_query"]
                / (detail["result_mean_query_latency_ns"] * 1e-9), delta=1e-6 * b["samples/s"])
            self.assertEqual(b["queries"], detail["result_query_count"])
            # Queries generated at a query's measured interval, not LoadGen's
            # 8 ms, which runs out before the test's end on a faster model.
            expected = detail["requested_multi_stream_expected_latency_ns"]
            self.assertGreater(expected, 0)
            self.assertNotEqual(expected, 8e6)

    def test_find_peak_searches_servers_peak_from_the_target(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc = run_json("--benchmark_filter=GPT2/nano/cpu/serve/", *self.SERVE,
                           "--scenario=Server", "--find_peak=true", f"--serve_log_dir={tmp}")
            [b] = doc["benchmarks"]
            self.assertEqual(b["run_name"],
                             "GPT2/nano/cpu/serve/scenario:Server/find_peak_from:100/"
                             "max_batch:4/seq:16/fp32/iterations:1/manual_time")
            self.assertFalse(b.get("error_occurred", False), b.get("error_message"))
            # The search starts at --target_qps, which a nano model holds
            # within LoadGen's 100 ms, and only goes up from there.
            self.assertGreaterEqual(b["peak_qps"], 100)
            self.assertRegex(b["label"], r"^scenario:Server peak [0-9.]+ QPS within the "
                                         r"bound; at the peak (VALID|INVALID)")
            self.assertAlmostEqual(b["real_time"] * TIME_UNITS[b["time_unit"]] * b["peak_qps"],
                                   1, places=6)
            self.assertAlmostEqual(b["bound_ms"], 100)
            # The batcher served every test of the search; the counters are the peak's.
            self.assertNotIn("batches", b)
            self.assertTrue(b["label"].endswith(
                "; batches left out: --find_peak's search runs several LoadGen tests, and the "
                "counters are the peak's alone"), b["label"])
            [folder] = os.listdir(tmp)
            with open(os.path.join(tmp, folder, "mlperf_log_detail.txt")) as f:
                detail = f.read()
            self.assertIn("FindPeakPerformance: Found peak performance field: "
                          f"{b['peak_qps']:.6f}", detail)

    def test_a_search_with_no_peak_is_an_error_and_repetitions_keep_their_logs(self):
        with tempfile.TemporaryDirectory() as tmp:
            # A bound no rate meets: its time, the starting test's, read as a
            # rate above any peak found; now the benchmark's error, naming
            # that test's figures (an error has no counters).
            doc = run_json("--benchmark_filter=GPT2/nano/cpu/serve/", *self.SERVE,
                           "--scenario=Server", "--find_peak=true",
                           "--latency_bound_ms=0.000001", f"--serve_log_dir={tmp}/peak")
            [b] = doc["benchmarks"]
            self.assertTrue(b["error_occurred"])
            self.assertRegex(b["error_message"],
                             r"^no peak: the starting rate 100 QPS misses the bound: .+ \(that "
                             r"test: samples/s [0-9.e+]+, p99_ms [0-9.e+]+\); search from a "
                             r"lower --target_qps$")
            # Each repetition's LoadGen logs in a folder of its own.
            doc = run_json("--benchmark_filter=GPT2/nano/cpu/serve/", *self.SERVE,
                           "--scenario=Offline", "--benchmark_repetitions=2",
                           f"--serve_log_dir={tmp}/reps")
            self.assertEqual(len([e for e in doc["benchmarks"]
                                  if e["run_type"] == "iteration"]), 2)
            [first, second] = sorted(os.listdir(os.path.join(tmp, "reps")))
            self.assertEqual(second, first + "_repetition1")
            for folder in (first, second):
                self.assertTrue(os.path.exists(os.path.join(tmp, "reps", folder,
                                                            "mlperf_log_detail.txt")))

    def test_refusals_name_the_valid_choices(self):
        for args, expected in (
                (["--scenario=Burst"], "valid: SingleStream, MultiStream, Server, Offline"),
                (["--scenario=Server", "--latency_bound_ms=0"], "must be a number of"),
                (["--scenario=Server", "--latency_bound_ms=-3"], "must be a number of"),
                (["--scenario=Server", "--latency_bound_ms=inf"], "must be a number of"),
                # 0 was LoadGen's 100 ms without a word.
                (["--scenario=Server", "--serve_phase=generate", "--ttft_bound_ms=0"],
                 "--ttft_bound_ms=0: the bound must be a number of milliseconds > 0"),
                (["--scenario=Server", "--serve_phase=generate", "--tpot_bound_ms=0"],
                 "--tpot_bound_ms=0: the bound must be a number of milliseconds > 0"),
                # Under a nanosecond, LoadGen's unit: a bound of 0, none at all.
                (["--scenario=Server", "--serve_phase=generate", "--ttft_bound_ms=1e-07"],
                 "--ttft_bound_ms=1e-07: the bound must be a number of milliseconds > 0, at "
                 "least 1e-06 (a nanosecond, LoadGen's unit)"),
                (["--scenario=Server", "--latency_bound_ms=5e-07"],
                 "--latency_bound_ms=5e-07: the bound must be"),
                (["--scenario=Server", "--serve_phase=train_step"], "valid: forward, encode"),
                (["--scenario=Offline", "--find_peak=true"],
                 "Server scenario only; valid: --scenario=Server"),
                (["--scenario=Offline", "--target_qps=fast"], "valid: numbers > 0"),
                (["--scenario=Server", "--target_qps=12.3456789,12.3456781"],
                 "--target_qps=12.3456789: a benchmark's name holds it to six significant "
                 "digits (12.3457)"),
                (["--scenario=Server", "--serve_min_s=nan"],
                 "--serve_min_s=nan: LoadGen's minimum duration must be a number of seconds"),
                (["--scenario=Server", "--serve_min_s=inf"], "--serve_min_s=inf: LoadGen's"),
                # Past LoadGen's whole milliseconds: it ran no duration at all.
                (["--scenario=Offline", "--serve_min_s=1e300"],
                 "--serve_min_s=1e+300: LoadGen's minimum duration must be a number of "
                 "seconds from 0 to 1e+06"),
                (["--scenario=Offline", "--target_qps=1,1e9"],
                 "Offline at --target_qps=1e+09 for --serve_min_s=1: its one query would "
                 "hold 1.1e+09 samples"),
                (["--scenario=MultiStream", "--samples_per_query=-3"],
                 "--samples_per_query=-3: MultiStream's samples a query must be a whole "
                 "number >= 1"),
                # Refused without --scenario too, as every flag's bad value is
                # (they were accepted, and pybench refused them).
                (["--samples_per_query=-3"], "--samples_per_query=-3: MultiStream's"),
                (["--batch_timeout_us=-1"], "--batch_timeout_us must be a whole number >= 0"),
                (["--serve_min_s=-1"], "--serve_min_s=-1: LoadGen's minimum duration"),
                # Given empty: refused, not served as forward.
                (["--scenario=Offline", "--prompt_len="],
                 "--prompt_len=: valid: a length N or a range MIN:MAX")):
            proc = run_bench("--benchmark_filter=GPT2/nano/cpu/serve/", *args, check=False)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertIn(expected, proc.stderr, args)
            self.assertEqual(proc.stdout.count("/serve/"), 0, "nothing ran")

    def test_an_interrupt_keeps_the_logs_and_what_was_measured(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            logs = os.path.join(tmp, "logs")
            # Offline expects 1 QPS: 66 samples, over at once; Server's test
            # then runs a minute at 1 QPS.
            proc = subprocess.Popen(
                [BENCH, "--benchmark_filter=GPT2/nano/cpu/serve/", *self.SERVE,
                 "--scenario=Offline,Server", "--target_qps=1", "--serve_min_s=60",
                 f"--serve_log_dir={logs}", f"--benchmark_out={out}",
                 "--benchmark_out_format=json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for line in proc.stdout:  # the console prints each result as it ends
                if line.startswith(self.named("Offline", 66)):
                    break
            else:
                proc.kill()
                self.fail("no first result: " + proc.stderr.read())
            time.sleep(1)  # Server's test is in flight
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            _, err = proc.communicate(timeout=120)
            # Not the rest of --serve_min_s: bench stops when the batch
            # running ends (well under a second; half a minute on any machine).
            self.assertLess(time.monotonic() - sent, 30)
            self.assertEqual(proc.returncode, 130, err)
            with open(out) as f:
                entries = self.entries(json.load(f))
            offline = entries[self.named("Offline", 66) + "/iterations:1/manual_time"]
            self.assertFalse(offline.get("error_occurred", False))
            self.assertGreater(offline["samples/s"], 0)
            [server] = [b for n, b in entries.items() if "scenario:Server" in n]
            self.assertTrue(server["error_occurred"])
            self.assertIn("interrupted by SIGINT", server["error_message"])
            self.assertEqual(len(os.listdir(logs)), 2)
            for folder in os.listdir(logs):
                self.assertTrue(os.path.isfile(
                    os.path.join(logs, folder, "mlperf_log_detail.txt")), folder)
