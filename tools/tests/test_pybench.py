"""tools/pybench runs the work bench runs, and the tools line the two up.

Both sides build the same models (parameters, FLOPs, tokens, samples and audio
seconds a step, the same counters) and use the same
threads and malloc settings, checked against a built bench where the tests find one (LTB_BENCH,
as ctest sets it), else against the C++ analytic counts mirrored in
ltb_models and the FLOPs PyTorch's counter sees the Python model do. What
noise on a loaded two-core machine cannot break is asserted: counts, names,
contexts, and a step slowed four times over showing as slower.
"""
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

from tests import browser
from tests.helpers import COMPARE_PY, REPO, TOOLS, ToolTest, built_bench, doc, repeated
from tests.test_report_html import page_data, points_by_section

from ltb.results.format import format_seconds
from ltb.results.names import base_name
from ltb.results.entries import iterations
from ltb.results import runtimes as ltb_runtimes

# Tiny shapes: every phase of every family's nano model in a few seconds
# (Whisper's 30 s window is the most of it; an epoch is four steps).
FILTER = ("^(Transformer|GPT2|Llama|ResNet|CNN|Encoder|Whisper|EncDec)/nano/cpu/"
          "(forward|forward_backward|train_step|train_epoch|generate|encode|transcribe)/")
SHAPES = ["--batch=2", "--seq=16", "--prompt=4", "--new_tokens=3", "--steps=2",
          "--warmup_steps=1", "--warmup_s=0", "--peak_flops=1e13", "--peak_bandwidth=1e12",
          "--dataset_samples=8"]
WHISPER_PROMPT = 4  # its start-of-transcript tokens, whatever --prompt says
RATES = ("FLOP/s", "tokens/s", "samples/s", "audio_s/s")
GENERATION = ("ttft_ms", "tpot_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "pp_tok/s",
              "tg_tok/s", "kv_cache_bytes", "weight_GB/s", "read_GB/s")
HELD = "cache holds: it reads from the cache, not from memory"  # why a step has no mbu


def pybench_outputs(*args):
    """(exit status, stdout, stderr) of pybench ARGS run in this process:
    flags that are refused, or --benchmark_list_tests, before anything runs
    (no threads or malloc settings touched), without a Python start-up each."""
    import contextlib
    import io
    from ltb.pysuite import bench as pybench
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = pybench.pybench_main(list(args))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def pybench_in_process(*args):
    """(exit status, stderr) of pybench_outputs."""
    code, _, err = pybench_outputs(*args)
    return code, err


def save_safetensors(path, tensors):
    """A safetensors file of fp32 tensors by name, written by hand."""
    header, data = {}, b""
    for key, t in tensors.items():
        raw = t.contiguous().float().numpy().tobytes()
        header[key] = {"dtype": "F32", "shape": list(t.shape),
                       "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def runnable_bench():
    path = built_bench()
    return path if os.access(path, os.X_OK) else None


def bench_json(bench, tmp, *args):
    """The result file of bench run with args, as a user would."""
    out = os.path.join(tmp, "bench.json")
    proc = subprocess.run([bench, *args, f"--benchmark_out={out}", "--benchmark_out_format=json"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"bench exited {proc.returncode}:\n{proc.stderr}")
    return out


def per_step(entry, counter):
    """A rate counter times the step time: the count a step."""
    return entry[counter] * entry["real_time"] * 1e-3  # time_unit ms


def analytic(name):
    """{rate counter: its count a step} of a nano benchmark at SHAPES, from
    the C++ analytic formulas mirrored in ltb_models; vision's FLOPs are
    PyTorch's counter's (checked against bench's own where it is found)."""
    from ltb.pysuite import families as ltb_models
    family, size, _, phase = name.split("/")[:4]
    batch, seq, new, samples = 2, 16, 3, 8
    if family in ("ResNet", "CNN"):
        return {"samples/s": batch}
    if family == "Whisper":
        encode = ltb_models.whisper_encode_flops(size, batch)
        generate = ltb_models.whisper_generate_flops(size, batch, WHISPER_PROMPT, new)
        return {"encode": {"FLOP/s": encode, "samples/s": batch, "audio_s/s": 30.0 * batch},
                "generate": {"FLOP/s": generate, "tokens/s": batch * new},
                "transcribe": {"FLOP/s": encode + generate, "tokens/s": batch * new,
                               "samples/s": batch, "audio_s/s": 30.0 * batch}}[phase]
    if family == "Encoder":
        fwd = ltb_models.encoder_forward_flops(size, batch, seq)
        return {"FLOP/s": fwd * (1 if phase == "forward" else 3), "tokens/s": batch * seq}
    if family == "EncDec":
        fwd = ltb_models.encdec_forward_flops(size, batch, seq, seq - 1)
        steps = samples // batch if phase == "train_epoch" else 1
        return {"FLOP/s": fwd * (1 if phase == "forward" else 3) * steps,
                "tokens/s": batch * (2 * seq - 1) * steps, "samples/s": batch * steps}
    if phase == "generate":
        return {"FLOP/s": ltb_models.generate_flops(family, size, batch, 4, new),
                "tokens/s": batch * new}
    fwd = ltb_models.forward_flops(family, size, batch, seq)
    if phase == "train_epoch":
        return {"FLOP/s": 3 * fwd * samples // batch, "tokens/s": samples * seq,
                "samples/s": samples}
    return {"FLOP/s": fwd * (1 if phase == "forward" else 3), "tokens/s": batch * seq}


def by_name(path):
    """Measured entries of a result file by name without the runtime."""
    with open(path) as f:
        doc = json.load(f)
    doc.setdefault("context", {})
    return {ltb_runtimes.split_runtime(base_name(e))[0]: e
            for e in iterations(doc)}


class PybenchTest(ToolTest):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls._shared = tempfile.TemporaryDirectory()
        cls.py_json = os.path.join(cls._shared.name, "py.json")
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "pybench"),
                               f"--benchmark_filter={FILTER}", *SHAPES,
                               f"--benchmark_out={cls.py_json}"],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        with open(cls.py_json) as f:
            cls.py = json.load(f)
        cls._one = None
        cls._cpp = None

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def cpp_json(self):
        """bench's result file over the same filter and shapes as py_json,
        run once for the class where a built bench is found; else None."""
        cls = type(self)
        if cls._cpp is None:
            bench = runnable_bench()
            cls._cpp = bench_json(bench, cls._shared.name, f"--benchmark_filter={FILTER}",
                                  *SHAPES) if bench else ""
        return cls._cpp or None

    def one_gpt2(self):
        """The result file of one small GPT2 forward that several tests read,
        run once: on one thread (its context's threads), at --seq=17 (a shape
        the other files do not have) and with a FLOP/s peak of 1 (which its
        rate passes)."""
        cls = type(self)
        if cls._one is None:
            out = os.path.join(cls._shared.name, "one.json")
            proc = self.pybench("--benchmark_filter=^GPT2/nano/cpu/forward/", "--batch=2",
                                "--seq=17", "--steps=2", "--warmup_s=0", "--threads=1",
                                "--peak_flops=1", f"--benchmark_out={out}")
            self.assertExit(proc, 0)
            cls._one = out
        return cls._one

    def pybench(self, *args, timeout=600):
        return self.run_tool("pybench", *args, timeout=timeout)

    def test_names_are_benchs_with_the_runtime(self):
        names = [e["name"] for e in self.py["benchmarks"]]
        # Transformer 4 phases, GPT2 and Llama 4, ResNet and CNN 2, Encoder 2,
        # Whisper 3, EncDec 3.
        self.assertEqual(len(names), 24)
        for name in ("GPT2/nano/cpu/generate/batch:2/prompt:4/new:3/fp32",
                     "Llama/nano/cpu/train_step/batch:2/seq:16/fp32",
                     "Encoder/nano/cpu/forward_backward/batch:2/seq:16/fp32",
                     "Whisper/nano/cpu/encode/batch:2/fp32",
                     "Whisper/nano/cpu/transcribe/batch:2/prompt:4/new:3/fp32",
                     # An epoch's samples, not the default 128, are in its name.
                     "Transformer/nano/cpu/train_epoch/batch:2/seq:16/fp32/dataset_samples:8",
                     "EncDec/nano/cpu/train_epoch/batch:2/seq:16/fp32/dataset_samples:8"):
            self.assertIn(name + "/py_eager/iterations:2/manual_time", names)
        context = self.py["context"]
        for key in ("intra_op_threads", "inter_op_threads", "grad_mode", "warmup",
                    "torch_version", "libtorch_version", "blas", "seed"):
            self.assertIn(key, context)
        self.assertEqual(context["runtime"], "python")
        self.assertEqual(context["grad_mode"], "inference_mode")
        self.assertEqual(context["warmup"], ">= 1 steps and >= 0 s")
        self.assertEqual(context["malloc"], "glibc malloc, tuned: M_MMAP_MAX=0, "
                                            "M_TRIM_THRESHOLD=1GiB, M_TOP_PAD=64MiB")

    def test_same_parameters_and_flops_as_the_cpp_models(self):
        """Against bench's own JSON where a built bench is found; else the
        C++ size tables' card counts (test_ltb_models checks them against
        the C++ source) and the FLOPs PyTorch's counter sees."""
        py = by_name(self.py_json)
        if self.cpp_json():
            out = self.cpp_json()
            cpp = by_name(out)
            self.assertEqual(sorted(cpp), sorted(py))
            for name, e in cpp.items():
                self.assertEqual(py[name]["params"], e["params"], name)
                # The same counters, but peak_mem (no CPU allocator statistics in Python).
                self.assertEqual(set(py[name]) - {"name", "run_name", "label"},
                                 set(e) - {"name", "run_name", "peak_mem", "label"}, name)
                if HELD in e.get("label", ""):  # the same step, the same cache, said alike
                    self.assertEqual(py[name].get("label"), e["label"], name)
                if "kv_cache_bytes" in e:
                    self.assertEqual(py[name]["kv_cache_bytes"], e["kv_cache_bytes"], name)
                for counter in RATES:
                    self.assertEqual(counter in py[name], counter in e, f"{name} {counter}")
                    if counter not in e:
                        continue
                    self.assertAlmostEqual(per_step(py[name], counter) / per_step(e, counter),
                                           1.0, places=9, msg=f"{name} {counter}")
            with open(out) as f:
                context = json.load(f)["context"]
            self.assertEqual(self.py["context"]["intra_op_threads"], context["intra_op_threads"])
            self.assertEqual(self.py["context"]["inter_op_threads"], context["inter_op_threads"])
            self.assertEqual(self.py["context"]["warmup"], context["warmup"])
            self.assertEqual(self.py["context"]["malloc"], context["malloc"])
            return
        from ltb.pysuite import families as ltb_models
        for name, e in py.items():
            fields = name.split("/")
            family, size = fields[0], fields[1]
            self.assertEqual(e["params"], ltb_models.size_entry(family, size).card_params)
            want = analytic(name)
            for counter in RATES:
                if counter == "FLOP/s" and family in ("ResNet", "CNN"):
                    continue  # PyTorch's counter's: checked against bench's
                self.assertEqual(counter in e, counter in want, f"{name} {counter}")
                if counter in want:
                    self.assertAlmostEqual(per_step(e, counter) / want[counter], 1.0,
                                           places=9, msg=f"{name} {counter}")

    def test_every_phase_reports_the_counters_benchs_facts_name(self):
        """Each case's counters and utilisations as bench --list_families
        names them (families.json, which test_ltb_models holds to the built
        bench), in pybench's results and, where a bench is built, in bench's:
        a counter a phase gains or loses on one side fails here."""
        from ltb.pysuite import facts
        sides = {"pybench": by_name(self.py_json)}
        if self.cpp_json():
            sides["bench"] = by_name(self.cpp_json())
        for side, entries in sides.items():
            self.assertTrue(entries)
            for name, e in entries.items():
                family, size, _, phase = name.split("/")[:4]
                names, utilisation = facts.counters(family, size, phase)
                self.assertIn("step_p50_ms", names, name)
                self.assertTrue({"tokens/s", "samples/s"} & set(names), name)
                for counter in names + utilisation:  # the peaks given are far above
                    if counter == "mbu" and HELD in e.get("label", ""):
                        continue  # a nano model's weights, which a CPU's cache holds
                    self.assertIn(counter, e, f"{side}: {name}")

    def test_the_phases_report_benchs_counters(self):
        """Generation's, Whisper's audio and the epochs' counters, named as
        bench names them, with values that follow from one another."""
        py = by_name(self.py_json)
        for name, e in py.items():
            phase = name.split("/")[3]
            for counter in GENERATION:
                self.assertEqual(counter in e, phase == "generate", f"{name} {counter}")
            if "audio_s/s" in e:  # wall time per second of audio
                self.assertAlmostEqual(e["rtf"] * e["audio_s/s"], 1.0, places=9, msg=name)
            epochs = [k for k in e if k.startswith("epoch_")]
            self.assertEqual(sorted(epochs), ["epoch_1_s", "epoch_2_s", "epoch_s"]
                             if phase == "train_epoch" else [], name)
        whisper = py["Whisper/nano/cpu/generate/batch:2/prompt:4/new:3/fp32"]
        # Its self-attention cache (prompt + new positions) and the
        # cross-attention keys and values (1500 positions) of its 2 decoder
        # layers, (B, heads, positions, head size) fp32 each.
        self.assertEqual(whisper["kv_cache_bytes"], 2 * 2 * 2 * 64 * (7 + 1500) * 4)
        # Its 2 decode steps read the decoder's weights, the self-attention
        # keys and values up to their positions (5 and 6) and the
        # cross-attention's whole, on both sides.
        from ltb.pysuite import families as ltb_models
        weights = 2 * ltb_models.decode_weight_elements("Whisper", "nano") * 4
        reads = weights + 2 * 2 * 2 * 64 * 4 * (5 + 6) + 2 * 2 * 2 * 2 * 64 * 1500 * 4
        sides = [py] + ([by_name(self.cpp_json())] if self.cpp_json() else [])
        for entries in sides:
            e = entries["Whisper/nano/cpu/generate/batch:2/prompt:4/new:3/fp32"]
            self.assertAlmostEqual(e["read_GB/s"] / e["weight_GB/s"], reads / weights,
                                   places=9)
        gpt2 = py["GPT2/nano/cpu/generate/batch:2/prompt:4/new:3/fp32"]
        self.assertGreater(gpt2["read_GB/s"], gpt2["weight_GB/s"])  # and its cache
        # A nano model's decode step reads less than a CPU's last-level cache
        # holds: no mbu, and the label says so, on both sides alike.
        from ltb.pysuite.device import cache_bytes
        if cache_bytes("cpu") > 0:
            sides = [py] + ([by_name(self.cpp_json())] if self.cpp_json() else [])
            for entries in sides:
                for name, e in entries.items():
                    if name.split("/")[3] == "generate":
                        self.assertNotIn("mbu", e, name)
                        self.assertIn("mbu left out: a step works over ", e["label"], name)
                        self.assertIn(HELD, e["label"], name)

    def test_an_epoch_trains_on_every_whole_batch(self):
        """The loop itself, counted: with 7 samples in batches of 2, an epoch
        takes 3 steps of (2, seq + 1) tokens, the tokens and samples a step
        pybench reports; bench's data for the same seed."""
        from ltb.pysuite import flags, sweep, workloads
        args = flags.parse_flags(["--benchmark_filter=^Transformer/nano/cpu/train_epoch/",
                                  "--batch=2", "--seq=16", "--dataset_samples=7"])
        [spec] = sweep.specs(args)
        workload = workloads.Workload(spec, args)
        seen = []
        workload._train = lambda batch: seen.append(tuple(batch.shape))
        workload.step()
        self.assertEqual(seen, [(2, 17)] * 3)
        self.assertEqual(workload.tokens_per_step, 3 * 2 * 16)
        self.assertEqual(workload.samples_per_step, 6)
        self.assertEqual(len(workload.epochs), 1)
        # lib/workloads/shards.cc GenerateShard: one shard, generator seeded seed * 1000003.
        import torch
        want = torch.randint(1000, (7, 17), generator=torch.Generator().manual_seed(0))
        self.assertTrue(torch.equal(workload.loader.memory, want[:6]))

    def test_the_flops_counted_are_the_work_the_python_model_does(self):
        """PyTorch's FLOP counter over the Python model's forward and cached
        generation gives the analytic count pybench reports."""
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        from ltb.pysuite import families as ltb_models
        model = ltb_models.build("Encoder", "nano").eval()
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            model(torch.randn(16, 2, 64))
        self.assertEqual(counter.get_total_flops(),
                         ltb_models.encoder_forward_flops("nano", 2, 16))
        model = ltb_models.build("EncDec", "nano").eval()
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            model(*ltb_models.forward_inputs("EncDec", "nano", 2, 16))
        self.assertEqual(counter.get_total_flops(),
                         ltb_models.encdec_forward_flops("nano", 2, 16, 15))
        model = ltb_models.build("Whisper", "nano").eval()
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            xa = model.encode(torch.randn(1, 80, 3000))
        self.assertEqual(counter.get_total_flops(), ltb_models.whisper_encode_flops("nano", 1))
        prompt = torch.randint(0, 1000, (1, 4))
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            generated = model.generate(xa, prompt, 3)
        self.assertEqual(counter.get_total_flops(),
                         ltb_models.whisper_generate_flops("nano", 1, 4, 3))
        with torch.inference_mode():  # the cache computes what recomputing does
            seq = prompt
            for _ in range(3):
                seq = torch.cat([seq, model.decode(seq, xa)[:, -1].argmax(-1, keepdim=True)], 1)
        self.assertTrue(torch.equal(seq[:, 4:], generated))
        for family in ("Transformer", "GPT2", "Llama"):
            model = ltb_models.build(family, "nano", **ltb_models.benchmark_overrides(family, 16))
            tokens = torch.randint(0, 1000, (2, 16))
            with FlopCounterMode(display=False) as counter, torch.inference_mode():
                model.eval()(tokens)
            self.assertEqual(counter.get_total_flops(),
                             ltb_models.forward_flops(family, "nano", 2, 16), family)
            if family == "Transformer":
                continue
            with FlopCounterMode(display=False) as counter, torch.inference_mode():
                cache = model.make_cache(2, 7)
                token = model.forward_cached(tokens[:, :4], 0, cache).argmax(-1, keepdim=True)
                generated = [token]
                for i in range(1, 3):
                    token = model.forward_cached(token, 4 + i - 1, cache).argmax(-1, keepdim=True)
                    generated.append(token)
            self.assertEqual(counter.get_total_flops(),
                             ltb_models.generate_flops(family, "nano", 2, 4, 3), family)
            # The cache computes what recomputing the whole sequence does.
            with torch.inference_mode():
                seq = tokens[:, :4]
                for _ in range(3):
                    seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
            self.assertTrue(torch.equal(seq[:, 4:], torch.cat(generated, 1)), family)

    def test_same_threads_as_bench(self):
        code, _, stderr = pybench_outputs(f"--benchmark_filter={FILTER}",
                                          "--benchmark_list_tests")
        self.assertEqual(code, 0, stderr)
        with open(self.one_gpt2()) as f:  # --threads=1
            context = json.load(f)["context"]
        self.assertEqual(context["intra_op_threads"], "1")
        self.assertEqual(context["blas_threads"], "1")
        self.assertEqual(context["inter_op_threads"], "1")

    def test_a_slowed_step_shows_as_slower(self):
        """A step slowed four times over (busy-waiting three times its own
        time) is measured slower, with an interval that excludes 1."""
        runs = {}
        for slowdown in ("1", "4"):
            out = os.path.join(self.tmp, f"slow{slowdown}.json")
            # One thread: a busy neighbour (a build) cannot stall a thread pool.
            proc = self.pybench("--benchmark_filter=^GPT2/nano/cpu/forward/", "--batch=1",
                                "--seq=64", "--threads=1", "--benchmark_min_time=0.05",
                                "--warmup_s=0.02",
                                "--benchmark_repetitions=3", "--peak_flops=1e13",
                                f"--slowdown={slowdown}", f"--benchmark_out={out}")
            self.assertExit(proc, 0)
            with open(out) as f:
                runs[slowdown] = [e["real_time"] for e in json.load(f)["benchmarks"]
                                  if e["run_type"] == "iteration"]
        ratio, (low, high) = ltb_runtimes.ratio_interval(runs["4"], runs["1"])
        self.assertGreater(ratio, 2.0, runs)
        self.assertGreater(low, 1.0, runs)

    def test_each_compiled_benchmark_compiles_in_a_fresh_cache(self):
        """torch.compile with --compile_cache=fresh compiles in an empty cache
        of its own, gone after the run: Inductor's shared cache gains no
        file, and the context says so. Each benchmark compiles its own
        graphs: the second of a model class (train_step after
        forward_backward, the same graphs) does not run the first's, so its
        compile_s is a compilation, far longer than its step. Its result is a
        py_compile entry with the eager one's work. Inductor runs in its lite
        mode (TORCHINDUCTOR_LITE_MODE=1: every op a fallback, no C++ kernel
        compiled): Dynamo, AOTAutograd and Inductor's caches as in the
        default mode (its FX graph and wrapper files land in the shared cache
        without --compile_cache=fresh), in a fraction of the time."""
        shared = os.path.join(self.tmp, "inductor")
        out = os.path.join(self.tmp, "compiled.json")
        proc = self.run_tool("pybench",
                             "--benchmark_filter=^Transformer/nano/cpu/"
                             "(forward_backward|train_step)/",
                             "--batch=2", "--seq=16", "--steps=2", "--warmup_s=0",
                             "--threads=1", "--peak_flops=1e13", "--runtime=eager,compile",
                             "--compile_cache=fresh", f"--benchmark_out={out}",
                             env={"TORCHINDUCTOR_CACHE_DIR": shared,
                                  "TORCHINDUCTOR_LITE_MODE": "1"}, timeout=600)
        self.assertExit(proc, 0)
        files = [n for _, _, names in os.walk(shared) for n in names] \
            if os.path.isdir(shared) else []
        self.assertEqual(files, [])
        with open(out) as f:
            result = json.load(f)
        self.assertTrue(result["context"]["compile_cache"].startswith("fresh: an empty"))
        entries = {ltb_runtimes.split_runtime(base_name(e)):
                   e for e in iterations(result)}
        for phase in ("forward_backward", "train_step"):
            base = f"Transformer/nano/cpu/{phase}/batch:2/seq:16/fp32"
            eager, compiled = entries[(base, "py_eager")], entries[(base, "py_compile")]
            self.assertGreater(compiled["compile_s"], 100 * compiled["real_time"] * 1e-3,
                               phase)
            self.assertAlmostEqual(per_step(compiled, "FLOP/s") / per_step(eager, "FLOP/s"),
                                   1.0, places=9)
        code, stderr = pybench_in_process("--compile_cache=warm")
        self.assertEqual(code, 2, stderr)
        self.assertIn("shared", stderr)
        self.assertIn("fresh", stderr)

    def test_a_changed_shape_is_another_benchmark(self):
        names = {}
        for seq in ("16", "17"):
            code, listed, stderr = pybench_outputs("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                                   f"--seq={seq}", "--benchmark_list_tests")
            self.assertEqual(code, 0, stderr)
            names[seq] = listed.split()
        self.assertEqual(names["16"], ["GPT2/nano/cpu/forward/batch:1/seq:16/fp32/py_eager/"
                                       "manual_time"])
        self.assertNotEqual(names["16"], names["17"])

    @unittest.skipUnless(os.path.exists(COMPARE_PY), "compare.py (libbenchmark-tools) is missing")
    def test_compare_refuses_another_shape_and_pairs_the_same(self):
        other = self.one_gpt2()  # --seq=17
        cpp = self.write("cpp.json", doc(
            repeated("GPT2/nano/cpu/forward/batch:2/seq:16/fp32/iterations:2", [1.0, 1.1]),
            intra_op_threads=self.py["context"]["intra_op_threads"]))
        proc = self.run_tool("compare", cpp, other)
        self.assertExit(proc, 2)
        self.assertIn("no measured benchmark in common", proc.stderr)
        proc = self.run_tool("compare", cpp, self.py_json, "--no-color")
        self.assertExit(proc, 0)
        self.assertIn("paired by name without the runtime label", proc.stderr)
        self.assertIn("GPT2/nano/cpu/forward/batch:2/seq:16/fp32/iterations:2/manual_time",
                      proc.stdout)

    def test_a_rate_past_a_given_peak_leaves_mfu_out_and_says_why(self):
        [entry] = [e for e in by_name(self.one_gpt2()).values()]  # --peak_flops=1
        self.assertNotIn("mfu", entry)
        self.assertRegex(entry["label"], r"^mfu left out: the rate is [\d.e+]+ times the fp32 "
                                         r"FLOP/s peak 1 \(given \(--peak_flops\)\)$")

    def test_bad_flags_exit_2(self):
        for args, message in ((["--cuda_graphs=true"], "bench's only"),
                              (["--bogus=1"], "unknown flag --bogus"),
                              (["--dtype=fp8"], "valid: fp32, bf16, fp16"),
                              (["--benchmark_filter=Ops/"], "selects no benchmark"),
                              (["--data=disk"], "valid: memory"),
                              (["--data_dir=/tmp"], "bench's only"),
                              (["--runtime=jit"], "valid: eager, compile")):
            code, stderr = pybench_in_process(*args)
            self.assertEqual(code, 2, (args, stderr))
            self.assertIn(message, stderr)
        # And through the command, as a user runs it.
        proc = self.pybench("--bogus=1")
        self.assertExit(proc, 2)
        self.assertIn("unknown flag --bogus", proc.stderr)


class InterruptTest(ToolTest):
    """A signal stops pybench as it stops bench: what was measured is in
    --benchmark_out, the benchmark in flight is an error saying why, and the
    exit code names the signal."""

    def test_a_signal_keeps_what_was_measured(self):
        import signal
        import time
        for signo, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            with self.subTest(signal.Signals(signo).name):
                out = os.path.join(self.tmp, f"{signo}.json")
                # The second benchmark measures for 3 s: the signal lands in it.
                proc = subprocess.Popen(
                    [sys.executable, os.path.join(TOOLS, "pybench"),
                     "--benchmark_filter=^(Transformer|GPT2)/nano/cpu/forward/", "--batch=2",
                     "--seq=16", "--warmup_s=0", "--benchmark_min_time=3", "--peak_flops=1e12",
                     f"--benchmark_out={out}"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                first = proc.stdout.readline()
                self.assertTrue(first.startswith("Transformer/nano/cpu/forward/"), first)
                time.sleep(1)
                proc.send_signal(signo)
                _, err = proc.communicate(timeout=120)
                self.assertEqual(proc.returncode, code, err)
                self.assertNotIn("Traceback", err)
                with open(out) as f:
                    entries = {e["name"].split("/")[0]: e for e in json.load(f)["benchmarks"]}
                self.assertEqual(set(entries), {"Transformer", "GPT2"})
                self.assertFalse(entries["Transformer"].get("error_occurred", False))
                self.assertIn("tokens/s", entries["Transformer"])
                self.assertTrue(entries["GPT2"]["error_occurred"])
                self.assertIn(f"interrupted by {signal.Signals(signo).name}",
                              entries["GPT2"]["error_message"])

    def test_a_signal_in_a_served_test_ends_it_as_benchs_does(self):
        """LoadGen runs the test on its threads: the signal stops the wait
        for it, never a LoadGen callback (which ended the process from
        within LoadGen, exit 134); the test is left to finish unrun."""
        import signal
        import time
        out = os.path.join(self.tmp, "served.json")
        proc = subprocess.Popen(
            [sys.executable, os.path.join(TOOLS, "pybench"),
             "--benchmark_filter=^CNN/nano/cpu/serve/", "--scenario=Server",
             "--target_qps=50,60", "--serve_min_s=3", "--serve_min_queries=16",
             "--warmup_s=0", "--peak_flops=1e12", "--peak_bandwidth=1e12",
             f"--serve_log_dir={os.path.join(self.tmp, 'logs')}", f"--benchmark_out={out}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stdout.readline()
        self.assertIn("/serve/scenario:Server/qps:50/", first)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130, err)
        self.assertNotIn("Traceback", err)
        self.assertNotIn("terminate", err)
        with open(out) as f:
            entries = {e["name"].split("/")[5]: e for e in json.load(f)["benchmarks"]}
        self.assertEqual(set(entries), {"qps:50", "qps:60"})
        self.assertFalse(entries["qps:50"].get("error_occurred", False))
        self.assertIn("samples/s", entries["qps:50"])
        self.assertIn("interrupted by SIGINT", entries["qps:60"]["error_message"])

    def test_a_signal_whose_raise_a_finaliser_swallowed_still_stops_the_run(self):
        """The handler runs in whatever Python code is running, a finaliser
        included, where Python prints the exception and goes on: the signal
        is still raised where pybench next looks (after each timed sample),
        and nothing is printed."""
        import contextlib
        import io
        import signal
        from ltb import base

        class Finalised:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)

        handlers = base.raise_on_signals()
        try:
            printed = io.StringIO()
            with contextlib.redirect_stderr(printed):
                Finalised()
            self.assertEqual(printed.getvalue(), "")
            with self.assertRaises(base.Signalled) as raised:
                base.raise_if_signalled()
            self.assertEqual(raised.exception.signum, signal.SIGINT)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            base.raise_on_signals.__globals__["_ARRIVED"].clear()


class UntakenSettingsTest(ToolTest):
    """A flag value no selected benchmark takes is said, in bench's words,
    with the families that take it: Whisper's generation fixes its prompt and
    depth, generation takes no --seq, a family that does not quantise no
    --quant."""

    ARGS = ["--benchmark_list_tests", "--benchmark_filter=^(GPT2|Whisper)/nano/cpu/generate/",
            "--prompt=7", "--depth=0,100", "--seq=32"]
    SAID = ["--seq=32 adds no benchmark that the filter selects (GPT2, Whisper): it applies "
            "to EncDec, Encoder, GPT2, Llama, Transformer",
            "--prompt does not set the generation of Whisper (4): its family fixes the prompt",
            "--depth does not set the generation of Whisper (0): its family generates from "
            "position 0 alone"]

    def said(self, stderr, tool):
        return [line[len(tool) + 2:] for line in stderr.splitlines()
                if line.startswith(f"{tool}: ")
                and ("adds no" in line or "does not set" in line)]

    def test_lists_filters_and_refusals_are_benchs(self):
        """Repeats are one benchmark, a dtype the filter names is registered,
        a flag given empty is refused, a --scenario that serves nothing is
        said, as bench does each (pybench listed repeats twice, selected no
        bf16 through a filter, and ran --new_tokens= as the default)."""
        def names(out):
            return sorted(re.sub(r"/py_\w+", "", n).split("/iterations")[0]
                          .replace("/manual_time", "") for n in out.split())
        listed = (
            (["--benchmark_filter=^GPT2/nano/cpu/forward/", "--quant=int4,int4",
              "--quant_group=64,64,32"], 2),
            (["--benchmark_filter=^GPT2/nano/", "--dtype=bf16,bf16,fp32", "--batch=2,2",
              "--seq=16,16", "--prompt=4, 4"], 8),
            (["--benchmark_filter=^GPT2/nano/.*/bf16"], 4),
            (["--benchmark_filter=^GPT2/nano/", "--dtype=fp32, bf16"], 8))
        bench = runnable_bench()
        for args, count in listed:
            code, out, err = pybench_outputs(*args, "--benchmark_list_tests")
            self.assertEqual(code, 0, (args, err))
            self.assertEqual(len(names(out)), count, (args, out))
            self.assertEqual(len(set(names(out))), count, (args, out))
            if bench:
                proc = subprocess.run([bench, *args, "--benchmark_list_tests"],
                                      capture_output=True, text=True, timeout=120)
                self.assertEqual(names(proc.stdout), names(out), args)
        for args, message in ((["--new_tokens="], "--new_tokens needs at least one value"),
                              (["--batch="], "--batch needs at least one value"),
                              (["--dtype="], "--dtype needs at least one value"),
                              (["--scenario=Offline", "--prompt_len="],
                               "--prompt_len=: valid: a length N or a range MIN:MAX")):
            code, err = pybench_in_process("--benchmark_filter=^GPT2/nano/", *args,
                                           "--benchmark_list_tests")
            self.assertEqual(code, 2, (args, err))
            self.assertIn(message, err)
        said = ("--scenario adds no benchmark that the filter selects: a family serves one "
                "of its phases")
        code, _, err = pybench_outputs("--benchmark_filter=^GPT2/nano/cpu/train",
                                       "--scenario=Offline", "--benchmark_list_tests")
        self.assertEqual(code, 0, err)
        self.assertIn("pybench: " + said, err)
        # A checkpoint that is not there: refused before anything runs.
        code, err = pybench_in_process("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                       "--weights=/nonexistent/model.safetensors")
        self.assertEqual(code, 2, err)
        self.assertIn("--weights=/nonexistent/model.safetensors: no such file or folder; "
                      "valid: a .safetensors file", err)

    def test_steps_fp16s_loss_scaler_skipped_are_said_as_bench_says_them(self):
        # Llama/nano's weights x 1000 overflow fp16: every step's gradients
        # are not finite, and GradScaler skips the optimizer in each.
        import torch

        from ltb.pysuite import families as ltb_models
        torch.manual_seed(0)
        tensors = {k: v * 1000
                   for k, v in ltb_models.build("Llama", "nano").state_dict().items()
                   if not k.endswith("inv_freq")}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "big.safetensors")
            save_safetensors(path, tensors)
            args = ["--benchmark_filter=^Llama/nano/cpu/train_step/", "--dtype=fp16",
                    "--seq=16", "--batch=1", f"--weights={path}", "--steps=3",
                    "--warmup_s=0"]
            out = os.path.join(tmp, "py.json")
            proc = self.run_tool("pybench", *args, f"--benchmark_out={out}")
            self.assertExit(proc, 0)
            with open(out) as f:
                [py] = json.load(f)["benchmarks"]
            said = ("3 of the measured steps skipped the optimizer: fp16's loss scaler found "
                    "gradients that are not finite (and lowered its scale), so those steps "
                    "changed no weight")
            self.assertIn(said, py.get("label", ""))
            bench = runnable_bench()
            if bench:
                proc = subprocess.run([bench, *args, "--benchmark_format=json"],
                                      capture_output=True, text=True, timeout=300)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                [cpp] = json.loads(proc.stdout)["benchmarks"]
                self.assertIn(said, cpp.get("label", ""))

    def test_said_as_bench_says_it(self):
        proc = self.run_tool("pybench", *self.ARGS)
        self.assertExit(proc, 0)
        self.assertEqual(self.said(proc.stderr, "pybench"), self.SAID)
        self.assertEqual(len(proc.stdout.split()), 3)  # GPT2 at two depths, Whisper
        quant = self.run_tool("pybench", "--benchmark_list_tests", "--quant=int8",
                              "--benchmark_filter=^Whisper/nano/cpu/encode/")
        self.assertExit(quant, 0)
        self.assertEqual(self.said(quant.stderr, "pybench"), [
            "--quant=int8 adds no benchmark that the filter selects (Whisper): it applies to "
            "GPT2, Llama, Transformer"])
        bench = runnable_bench()
        if bench:
            proc = subprocess.run([bench, *self.ARGS], capture_output=True, text=True,
                                  timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(self.said(proc.stderr, "bench"), self.SAID)

    def test_servings_settings_name_the_scenario_that_reads_them(self):
        args = ["--benchmark_list_tests", "--benchmark_filter=^GPT2/nano/cpu/serve/scenario:Off",
                "--scenario=Offline,Server", "--target_qps=20,40", "--latency_bound_ms=37.5",
                "--samples_per_query=4", "--batch_timeout_us=500"]
        said = ["--samples_per_query=4 adds no benchmark that the filter selects (GPT2): it "
                "sets MultiStream's queries",
                "--latency_bound_ms=37.5 adds no benchmark that the filter selects (GPT2): it "
                "bounds Server's p99",
                "--target_qps=40 adds no benchmark that the filter selects (GPT2): a rate "
                "after the first is Server's alone"]
        # Served generation's token bounds, which Offline does not read
        # (they went unsaid).
        tokens = ["--benchmark_list_tests", "--benchmark_filter=^GPT2/nano/cpu/serve/",
                  "--scenario=Offline", "--prompt_len=8", "--output_len=4",
                  "--ttft_bound_ms=5", "--tpot_bound_ms=2"]
        bounds = [f"--{flag} adds no benchmark that the filter selects (GPT2): it bounds the "
                  "token latencies of served generation's Server"
                  for flag in ("ttft_bound_ms=5", "tpot_bound_ms=2")]
        bench = runnable_bench()
        for flags, expected in ((args, said), (tokens, bounds)):
            proc = self.run_tool("pybench", *flags)
            self.assertExit(proc, 0)
            self.assertEqual(self.said(proc.stderr, "pybench"), expected)
            if bench:
                proc = subprocess.run([bench, *flags], capture_output=True, text=True,
                                      timeout=300)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(self.said(proc.stderr, "bench"), expected)


class OneNewTokenTest(ToolTest):
    """--new_tokens=1: the token is the prefill's and no decode step runs;
    what decode steps would have timed or read is absent, and the label
    says why, in bench's words."""

    ARGS = ["--benchmark_filter=^(GPT2|Whisper)/nano/cpu/generate/", "--batch=2",
            "--prompt=5", "--new_tokens=1", "--steps=1", "--warmup_steps=1", "--warmup_s=0",
            "--peak_flops=1e13", "--peak_bandwidth=1e12"]
    WHY = ("tpot_ms, tg_tok/s, weight_GB/s, read_GB/s and mbu left out: --new_tokens=1 "
           "takes its one token from the prefill, and no decode step runs")

    def test_no_decode_counters_and_the_label_says_why_on_both_sides(self):
        from ltb.pysuite import families as ltb_models
        out = os.path.join(self.tmp, "py.json")
        proc = self.run_tool("pybench", *self.ARGS, f"--benchmark_out={out}")
        self.assertExit(proc, 0)
        sides = [by_name(out)]
        bench = runnable_bench()
        if bench:
            sides.append(by_name(bench_json(bench, self.tmp, *self.ARGS)))
        for entries in sides:
            self.assertEqual(set(entries), {"GPT2/nano/cpu/generate/batch:2/prompt:5/new:1/fp32",
                                            "Whisper/nano/cpu/generate/batch:2/prompt:4/new:1/fp32"})
            for name, e in entries.items():
                family = name.split("/")[0]
                prompt = 4 if family == "Whisper" else 5
                flops = (ltb_models.whisper_generate_flops("nano", 2, prompt, 1)
                         if family == "Whisper"
                         else ltb_models.generate_flops(family, "nano", 2, prompt, 1))
                self.assertAlmostEqual(per_step(e, "FLOP/s") / flops, 1.0, places=9, msg=name)
                self.assertAlmostEqual(per_step(e, "tokens/s"), 2, places=6, msg=name)
                self.assertAlmostEqual(e["pp_tok/s"] * e["ttft_ms"] / 1e3, 2 * prompt,
                                       places=6, msg=name)
                for counter in GENERATION + ("tpot_growth_%", "mbu"):
                    if counter not in ("ttft_ms", "pp_tok/s", "kv_cache_bytes"):
                        self.assertNotIn(counter, e, name)
                self.assertIn(self.WHY, e.get("label", ""), name)


DEPTH_FILTER = "--benchmark_filter=^(Llama|GPT2)/nano/cpu/generate/"
DEPTH_SHAPES = ["--batch=1", "--prompt=8", "--new_tokens=8", "--depth=0,600", "--steps=1",
                "--warmup_steps=1", "--warmup_s=0", "--threads=1", "--peak_flops=1e13",
                "--peak_bandwidth=1e12"]
FIXTURE = os.path.join(REPO, "test", "models", "fixtures", "llama-nano")
PRINTED = re.compile(r"^(\S+) (prompt|tokens)\[(\d+)\]: ([\d ]*)$")


def printed(stderr):
    """{(name, 'prompt' or 'tokens', row): [ids]} of --print_tokens's lines."""
    out = {}
    for line in stderr.splitlines():
        m = PRINTED.match(line)
        if m:
            out[(m[1], m[2], int(m[3]))] = [int(x) for x in m[4].split()]
    return out


def mirror_generation(family, size, prompt, new_tokens, weights=None, depth_tokens=None):
    """Greedy tokens of the Python mirror from `prompt` (a list of ids), with
    the checkpoint at `weights` (else the seed-0 random model), after
    `depth_tokens` already in the cache."""
    import torch

    from ltb.pysuite import families as ltb_models
    from ltb.pysuite import weights as ltb_weights
    torch.manual_seed(0)
    model = ltb_models.build(family, size).eval()
    if weights:
        o = ltb_models.size_entry(family, size).options
        ltb_weights.load_family_weights(model, family, size, weights, torch.float32,
                                        tied=getattr(o, "tied", False))
    depth = 0 if depth_tokens is None else depth_tokens.shape[1]
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        cache = model.make_cache(1, depth + len(prompt) + new_tokens)
        for at in range(0, depth, 512):
            model.forward_cached(depth_tokens[:, at:at + 512], at, cache)
        tokens = [model.forward_cached(ids, depth, cache).argmax(-1, keepdim=True)]
        for i in range(1, new_tokens):
            tokens.append(model.forward_cached(tokens[-1], depth + len(prompt) + i - 1,
                                               cache).argmax(-1, keepdim=True))
    return torch.cat(tokens, 1)[0].tolist()


class DepthAndWeightsTest(ToolTest):
    """--depth, --weights and --print_tokens as bench has them: the same
    names, counts and counters; the mirror's cached generation at a depth
    is the whole sequence's; a checkpoint loads by name with bench's
    errors."""

    def pybench(self, *args, timeout=300):
        return self.run_tool("pybench", *args, timeout=timeout)

    def test_depth_names_counts_and_counters_are_benchs(self):
        from ltb.pysuite import families as ltb_models
        out = os.path.join(self.tmp, "py.json")
        proc = self.pybench(DEPTH_FILTER, *DEPTH_SHAPES, f"--benchmark_out={out}")
        self.assertExit(proc, 0)
        py = by_name(out)
        want = {f"{f}/nano/cpu/generate/batch:1/prompt:8/new:8{d}/fp32"
                for f in ("GPT2", "Llama") for d in ("", "/depth:600")}
        self.assertEqual(set(py), want)
        for name, e in py.items():
            family = name.split("/")[0]
            depth = 600 if "/depth:" in name else 0
            o = ltb_models.size_entry(family, "nano").options
            kv = o.num_kv_heads * o.head_dim if family == "Llama" else o.d_model
            per_position = 2 * o.num_layers * kv * 4  # keys and values, fp32
            self.assertEqual(e["kv_cache_bytes"], per_position * (depth + 8 + 8), name)
            self.assertAlmostEqual(
                per_step(e, "FLOP/s")
                / ltb_models.generate_flops(family, "nano", 1, 8, 8, depth), 1.0, places=9)
            weights = ltb_models.decode_weight_elements(family, "nano") * 4
            cache = sum(per_position * (depth + 8 + i) for i in range(1, 8))
            self.assertAlmostEqual(e["read_GB/s"] / e["weight_GB/s"],
                                   (7 * weights + cache) / (7 * weights), places=9, msg=name)
        bench = runnable_bench()
        if not bench:
            return
        cpp = by_name(bench_json(bench, self.tmp, DEPTH_FILTER, *DEPTH_SHAPES))
        self.assertEqual(sorted(cpp), sorted(py))
        for name, e in cpp.items():
            self.assertEqual(py[name]["kv_cache_bytes"], e["kv_cache_bytes"], name)
            self.assertAlmostEqual(per_step(py[name], "FLOP/s") / per_step(e, "FLOP/s"), 1.0,
                                   places=9, msg=name)
            self.assertAlmostEqual(py[name]["read_GB/s"] / py[name]["weight_GB/s"],
                                   e["read_GB/s"] / e["weight_GB/s"], places=9, msg=name)

    def test_the_cache_at_a_depth_computes_the_whole_sequence(self):
        """A prompt after 600 cached positions (two chunks, the causal mask
        aligned to the cache's end), then decode steps: the logits of the
        whole sequence recomputed; Llama's one-token decode groups its
        query heads in place."""
        import torch

        from ltb.pysuite import families as ltb_models
        for family in ("GPT2", "Llama"):
            torch.manual_seed(0)
            model = ltb_models.build(family, "nano").eval()
            seq = torch.randint(0, 1000, (2, 611))
            with torch.inference_mode():
                whole = model(seq)  # (B, T, V)
                cache = model.make_cache(2, 611)
                for at in (0, 512):
                    model.forward_cached(seq[:, at:min(at + 512, 600)], at, cache)
                got = [model.forward_cached(seq[:, 600:608], 600, cache)]
                for at in range(608, 611):
                    got.append(model.forward_cached(seq[:, at:at + 1], at, cache))
            want = whole[:, 607:611]
            got = torch.stack(got, 1)
            scale = want.abs().max().item()
            self.assertLess((got - want).abs().max().item(), 1e-4 * scale, family)

    def test_refusals_and_bad_flags_are_benchs(self):
        out = os.path.join(self.tmp, "refused.json")
        proc = self.pybench("--benchmark_filter=^GPT2/nano/cpu/generate/", "--prompt=8",
                            "--new_tokens=8", "--depth=1010", "--steps=1", "--warmup_s=0",
                            "--peak_flops=1e13", f"--benchmark_out={out}")
        self.assertExit(proc, 1)
        with open(out) as f:
            [e] = json.load(f)["benchmarks"]
        self.assertEqual(e["name"], "GPT2/nano/cpu/generate/batch:1/prompt:8/new:8/depth:1010/"
                                    "fp32/py_eager/iterations:1/manual_time")
        self.assertEqual(e["error_message"],
                         "depth 1010 + prompt 8 + new tokens 8 = 1026 positions, but GPT2 has "
                         "1024: lower --depth, --prompt or --new_tokens")
        # A seq past a learned position table's rows: bench's plan refuses it
        # (decoder_family.cc PlanDecoder) before the model is built.
        proc = self.pybench("--benchmark_filter=^GPT2/nano/cpu/forward/", "--seq=1100",
                            "--steps=1", "--warmup_s=0", "--peak_flops=1e13",
                            f"--benchmark_out={out}")
        self.assertExit(proc, 1)
        with open(out) as f:
            [e] = json.load(f)["benchmarks"]
        self.assertEqual(e["error_message"], "seq 1100 exceeds GPT2's 1024 positions")
        for args, message in ((["--depth=-1"], "is not a whole number"),
                              (["--depth="], "--depth needs at least one value"),
                              (["--print_tokens=maybe"], "valid: true, false"),
                              (["--weights="], "--weights= is empty: give a path"),
                              (["--serve_log_dir="], "--serve_log_dir= is empty"),
                              (["--peaks_from="], "--peaks_from= is empty")):
            code, stderr = pybench_in_process(*args)
            self.assertEqual(code, 2, (args, stderr))
            self.assertIn(message, stderr)

    def test_printed_tokens_with_weights_are_the_mirrors_as_benchs(self):
        """--weights=llama-nano --print_tokens=true: each side prints its
        prompt and the tokens the checkpoint's model generates from it (the
        mirror, run here from that printed prompt, is checked against
        transformers by test_llama_fixtures); with the same prompt, the same
        tokens as bench."""
        args = ["--benchmark_filter=^Llama/nano/cpu/generate/", "--batch=1", "--prompt=8",
                "--new_tokens=8", "--steps=1", "--warmup_s=0", "--threads=1",
                "--peak_flops=1e13", "--peak_bandwidth=1e12", f"--weights={FIXTURE}",
                "--print_tokens=true"]
        proc = self.pybench(*args)
        self.assertExit(proc, 0)
        py = printed(proc.stderr)
        name = "Llama/nano/cpu/generate/batch:1/prompt:8/new:8/fp32/weights:llama-nano/py_eager"
        self.assertEqual(sorted(py), [(name, "prompt", 0), (name, "tokens", 0)])
        self.assertEqual(len(py[(name, "tokens", 0)]), 8)
        self.assertEqual(py[(name, "tokens", 0)],
                         mirror_generation("Llama", "nano", py[(name, "prompt", 0)], 8,
                                           FIXTURE))
        bench = runnable_bench()
        if not bench:
            return
        proc = subprocess.run([bench, *args], capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        cpp = printed(proc.stderr)
        cpp_name = name[:-len("/py_eager")]
        self.assertEqual(sorted(cpp), [(cpp_name, "prompt", 0), (cpp_name, "tokens", 0)])
        prompt = cpp[(cpp_name, "prompt", 0)]
        self.assertEqual(cpp[(cpp_name, "tokens", 0)],
                         mirror_generation("Llama", "nano", prompt, 8, FIXTURE))
        if prompt == py[(name, "prompt", 0)]:
            self.assertEqual(cpp[(cpp_name, "tokens", 0)], py[(name, "tokens", 0)])

    def test_random_weights_of_many_chunks_and_the_prompt_after_them_are_benchs(self):
        """GPT2/small's random weights (its embedding and MLP matrices drawn
        in several chunks, each from a generator of its own, on two threads)
        and the prompt drawn after them from the default generator: pybench
        prints bench's prompt and the same greedy tokens."""
        bench = runnable_bench()
        if not bench:
            return
        args = ["--benchmark_filter=^GPT2/small/cpu/generate/", "--batch=1", "--prompt=8",
                "--new_tokens=4", "--steps=1", "--warmup_s=0", "--threads=2",
                "--peak_flops=1e13", "--peak_bandwidth=1e12", "--print_tokens=true"]
        proc = self.pybench(*args)
        self.assertExit(proc, 0)
        py = {(name[:-len("/py_eager")], *rest): ids
              for (name, *rest), ids in printed(proc.stderr).items()}
        cpp = subprocess.run([bench, *args], capture_output=True, text=True, timeout=300)
        self.assertEqual(cpp.returncode, 0, cpp.stderr)
        name = "GPT2/small/cpu/generate/batch:1/prompt:8/new:4/fp32"
        self.assertEqual(sorted(py), [(name, "prompt", 0), (name, "tokens", 0)])
        self.assertEqual(printed(cpp.stderr), py)

    def test_a_checkpoint_of_other_names_is_one_sentence_and_the_rest_run(self):
        """Llama's checkpoint for a Transformer: the file and the missing
        tensor named, while Llama's benchmark runs; a family without a
        loader says which families load one; bench's words where found."""
        import hashlib
        args = ["--benchmark_filter=^(Transformer|Llama|CNN)/nano/cpu/forward/", "--batch=1",
                "--seq=8", "--steps=1", "--warmup_s=0", "--threads=1", "--peak_flops=1e13",
                f"--weights={FIXTURE}"]
        out = os.path.join(self.tmp, "py.json")
        proc = self.pybench(*args, f"--benchmark_out={out}")
        self.assertExit(proc, 1)
        with open(out) as f:
            doc = json.load(f)
        errors = {ltb_runtimes.split_runtime(base_name(e))[0]:
                  e.get("error_message") for e in doc["benchmarks"]}
        file = os.path.join(FIXTURE, "model.safetensors")
        self.assertEqual(errors, {
            "Transformer/nano/cpu/forward/batch:1/seq:8/fp32/weights:llama-nano":
                f"error: {file} has no tensor 'token_embeddings.weight', which "
                "Transformer/nano needs with shape [1000, 64]",
            "Llama/nano/cpu/forward/batch:1/seq:8/fp32/weights:llama-nano": None,
            "CNN/nano/cpu/forward/batch:1/fp32/weights:llama-nano":
                "CNN does not load --weights; the families that do: Transformer, GPT2, Llama"})
        with open(file, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(doc["context"]["weights"], FIXTURE)
        self.assertEqual(doc["context"]["weights_sha256"], digest)
        bench = runnable_bench()
        if bench:
            cpp_out = os.path.join(self.tmp, "cpp.json")
            subprocess.run([bench, *args, f"--benchmark_out={cpp_out}",
                            "--benchmark_out_format=json"], capture_output=True, timeout=300)
            with open(cpp_out) as f:
                cpp = json.load(f)
            self.assertEqual({base_name(e): e.get("error_message")
                              for e in cpp["benchmarks"]}, errors)
            self.assertEqual(cpp["context"]["weights_sha256"], digest)

    def test_checkpoints_load_by_name_as_benchs_loader(self):
        """GPT2 from Hugging Face's layout (under "transformer.", Conv1D
        weights transposed, the old attention masks); a renamed or extra
        tensor in bench's words; a folder's digest and the short name."""
        import hashlib

        import torch

        from ltb.pysuite import families as ltb_models
        from ltb.pysuite import weights as ltb_weights

        torch.manual_seed(1)
        source = ltb_models.build("GPT2", "nano").eval()
        conv1d = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")  # stored (in, out)
        hf = {"transformer." + k: (v.t() if k.endswith(conv1d) else v)
              for k, v in source.state_dict().items()}
        hf["transformer.h.0.attn.bias"] = torch.ones(1, 1, 8, 8)
        folder = os.path.join(self.tmp, "gpt2-hf")
        os.makedirs(folder)
        save_safetensors(os.path.join(folder, "model.safetensors"), hf)
        torch.manual_seed(2)
        model = ltb_models.build("GPT2", "nano").eval()
        ltb_weights.load_family_weights(model, "GPT2", "nano", folder, torch.float32)
        tokens = torch.randint(0, 1000, (2, 7))
        with torch.inference_mode():
            self.assertTrue(torch.equal(model(tokens), source(tokens)))

        llama = ltb_models.build("Llama", "nano").state_dict()
        del llama["model.rotary_emb.inv_freq"]
        renamed = dict(llama)
        renamed["model.final_norm.weight"] = renamed.pop("model.norm.weight")
        path = os.path.join(self.tmp, "renamed.safetensors")
        save_safetensors(path, renamed)
        with self.assertRaises(ltb_weights.BadWeights) as caught:
            ltb_weights.load_family_weights(ltb_models.build("Llama", "nano"), "Llama", "nano",
                                            path, torch.float32, tied=True)
        self.assertEqual(str(caught.exception), f"{path} has no tensor 'model.norm.weight', "
                         "which Llama/nano needs with shape [64]")
        extra = dict(llama, **{"model.layers.2.mlp.up_proj.weight": torch.zeros(256, 64)})
        save_safetensors(path, extra)
        with self.assertRaises(ltb_weights.BadWeights) as caught:
            ltb_weights.load_family_weights(ltb_models.build("Llama", "nano"), "Llama", "nano",
                                            path, torch.float32, tied=True)
        self.assertEqual(str(caught.exception), f"{path} holds tensor 'model.layers.2.mlp."
                         "up_proj.weight' of shape [256, 64], which Llama/nano has no "
                         "parameter or buffer for")

        self.assertEqual(ltb_weights.weights_name("/m/Llama-3.2-1B/model.safetensors"),
                         "Llama-3.2-1B")
        self.assertEqual(ltb_weights.weights_name("/m/L/model.safetensors.index.json"), "L")
        self.assertEqual(ltb_weights.weights_name("/m/Llama-3.1-8B/"), "Llama-3.1-8B")
        self.assertEqual(ltb_weights.weights_name("tiny.safetensors"), "tiny")
        save_safetensors(os.path.join(folder, "model-2.safetensors"), {"x": torch.zeros(1)})
        hexes = []
        for name in ("model-2.safetensors", "model.safetensors"):
            with open(os.path.join(folder, name), "rb") as f:
                hexes.append(f"{name}={hashlib.sha256(f.read()).hexdigest()}")
        self.assertEqual(ltb_weights.checkpoint_sha256(folder), ", ".join(hexes))


NAME = "GPT2/small/cpu/forward/batch:1/seq:64/fp32"


class RuntimesTableTest(ToolTest):
    """ltb_runtimes' ratios, intervals and verdicts, on fixture files."""

    def report(self, *args):
        """tools/report's main in this process (SciPy, which the intervals
        load, loaded once)."""
        from ltb.report.cli import main
        return self.run_main("report", main, *args)

    def files(self, cpp_ms, py_ms, cpp_context=None, py_context=None):
        same = {"intra_op_threads": "2", "inter_op_threads": "1",
                "warmup": ">= 1 steps and >= 0.5 s"}
        cpp = doc(repeated(NAME, cpp_ms), **dict(same, **(cpp_context or {})))
        py = doc(repeated(NAME + "/py_eager", py_ms), repeated(NAME + "/py_compile", py_ms),
                 **dict(same, runtime="python", grad_mode="inference_mode")
                 | (py_context or {}))
        return [self.write("cpp.json", cpp), self.write("py.json", py)], [cpp, py]

    def table(self, docs):
        return {r["runtime"]: r for r in ltb_runtimes.rows(docs, ["cpp", "py"])}

    def test_faster_noise_and_reference(self):
        _, docs = self.files([80.0, 81.0, 79.0, 80.5], [100.0, 101.0, 99.0, 100.5])
        table = self.table(docs)
        self.assertEqual(list(table), ["cpp_eager", "py_eager", "py_compile"])
        self.assertAlmostEqual(table["cpp_eager"]["ratio"], 0.8, places=2)
        self.assertEqual(table["cpp_eager"]["verdict"], "1.25x faster")
        self.assertEqual(table["py_compile"]["verdict"], "noise")
        self.assertEqual(table["py_eager"]["verdict"], "reference")
        _, docs = self.files([99.0, 103.0, 97.0], [100.0, 101.0, 99.0])
        self.assertEqual(self.table(docs)["cpp_eager"]["verdict"], "noise")
        _, docs = self.files([80.0], [100.0])
        self.assertEqual(self.table(docs)["cpp_eager"]["verdict"],
                         "one repetition: no interval")

    def test_a_settings_difference_is_named_instead_of_a_speed(self):
        _, docs = self.files([50.0, 51.0, 49.0], [100.0, 101.0, 99.0],
                             cpp_context={"intra_op_threads": "4"})
        self.assertEqual(self.table(docs)["cpp_eager"]["verdict"],
                         "settings differ: threads 4 vs 2")
        _, docs = self.files([50.0, 51.0, 49.0], [100.0, 101.0, 99.0],
                             py_context={"grad_mode": "grad"})
        self.assertIn("grad mode inference_mode vs grad",
                      self.table(docs)["cpp_eager"]["verdict"])
        _, docs = self.files([50.0, 51.0, 49.0], [100.0, 101.0, 99.0],
                             cpp_context={"warmup": ">= 1 steps and >= 0 s"})
        self.assertIn("warm-up 1 steps/0 s vs 1 steps/0.5 s",
                      self.table(docs)["cpp_eager"]["verdict"])
        _, docs = self.files([50.0, 51.0, 49.0], [100.0, 101.0, 99.0],
                             cpp_context={"malloc": "glibc malloc, tuned: M_MMAP_MAX=0"},
                             py_context={"malloc": "glibc malloc, default settings"})
        self.assertEqual(self.table(docs)["cpp_eager"]["verdict"],
                         "settings differ: malloc tuned vs system")

    def rounds(self, cpp_rounds, py_rounds, py_contexts=None):
        """One file per round: cpp1.json, ... and py1.json, ..."""
        same = {"intra_op_threads": "2", "inter_op_threads": "1",
                "warmup": ">= 1 steps and >= 0.5 s"}
        py_contexts = py_contexts or [{}] * len(py_rounds)
        docs = [doc(repeated(NAME, ms), **same) for ms in cpp_rounds]
        docs += [doc(repeated(NAME + "/py_eager", ms),
                     **dict(same, runtime="python", grad_mode="inference_mode") | extra)
                 for ms, extra in zip(py_rounds, py_contexts)]
        labels = [f"cpp{i + 1}" for i in range(len(cpp_rounds))]
        labels += [f"py{i + 1}" for i in range(len(py_rounds))]
        paths = [self.write(f"{label}.json", d) for label, d in zip(labels, docs)]
        return paths, docs, labels

    def test_rounds_are_pooled_by_their_means(self):
        # Each process is steady inside but the processes differ: one round
        # alone says C++ is faster, the two rounds' means say it is noise.
        cpp = [[80.0, 80.5, 79.5], [90.0, 90.5, 89.5]]
        py = [[100.0, 100.5, 99.5], [85.0, 85.5, 84.5]]
        paths, docs, labels = self.rounds(cpp, py)
        one = {r["runtime"]: r for r in ltb_runtimes.rows([docs[0], docs[2]],
                                                          ["cpp1", "py1"])}
        self.assertEqual(one["cpp_eager"]["verdict"], "1.25x faster")
        self.assertEqual(one["cpp_eager"]["basis"], "repetitions")
        table = {r["runtime"]: r for r in ltb_runtimes.rows(docs, labels)}
        row = table["cpp_eager"]
        self.assertEqual((row["reps"], row["rounds"], row["basis"]), (6, 2, "rounds"))
        self.assertEqual(row["file"], "cpp1, cpp2")
        self.assertEqual(table["py_eager"]["file"], "py1, py2")
        self.assertAlmostEqual(row["time"], 0.085, places=9)
        # The ratio of the rounds' geometric means, the centre of their interval.
        self.assertAlmostEqual(row["ratio"], math.sqrt(80.0 * 90.0 / (100.0 * 85.0)),
                               places=9)
        # The interval is the one of the rounds' means, each one observation.
        _, expected = ltb_runtimes.ratio_interval([0.080, 0.090], [0.100, 0.085])
        for got, want in zip(row["interval"], expected):
            self.assertAlmostEqual(got, want, places=9)
        self.assertLess(row["interval"][0], 1)
        self.assertGreater(row["interval"][1], 1)
        self.assertEqual(row["verdict"], "noise")
        # One round on a side: the repetitions of every round, pooled.
        paths1, docs1, labels1 = self.rounds(cpp, py[:1])
        row = {r["runtime"]: r for r in ltb_runtimes.rows(docs1, labels1)}["cpp_eager"]
        self.assertEqual((row["reps"], row["rounds"], row["basis"]), (6, 2, "repetitions"))
        _, expected = ltb_runtimes.ratio_interval(
            [t / 1e3 for r in cpp for t in r], [t / 1e3 for t in py[0]])
        for got, want in zip(row["interval"], expected):
            self.assertAlmostEqual(got, want, places=9)
        proc = self.report(*paths)
        self.assertExit(proc, 0)
        self.assertIn("| `GPT2/small/cpu/forward/batch:1/seq:64/fp32` | C++ eager (LibTorch) "
                      "| cpp1, cpp2 | 85 ms | 6 in 2 rounds |", proc.stdout)

    def test_the_ratio_lies_in_its_interval_when_the_times_are_skewed(self):
        # One slow repetition in ten: the mean is 10.9 times the reference's,
        # but the interval of the logarithms is about [0.56, 4.5].
        times, reference = [1.0] * 9 + [100.0], [1.0, 1.01, 0.99] * 3 + [1.0]
        ratio, (low, high) = ltb_runtimes.ratio_interval(times, reference)
        self.assertAlmostEqual(ratio, 100.0 ** 0.1 / math.prod(reference) ** 0.1, places=12)
        self.assertLess(low, ratio)
        self.assertLess(ratio, high)
        self.assertEqual(ltb_runtimes.verdict(ratio, (low, high), []), "noise")

    def test_rounds_of_the_reference_with_other_settings_are_named(self):
        _, docs, labels = self.rounds([[80.0, 81.0], [80.0, 81.0]],
                                      [[100.0, 101.0], [50.0, 51.0]],
                                      [{}, {"intra_op_threads": "4"}])
        table = {r["runtime"]: r for r in ltb_runtimes.rows(docs, labels)}
        self.assertEqual(table["py_eager"]["verdict"],
                         "settings differ: Python eager's rounds: threads 4 vs 2")
        self.assertEqual(table["cpp_eager"]["verdict"],
                         "settings differ: Python eager's rounds: threads 4 vs 2")
        # Files of another machine are not rounds of this one.
        _, docs, labels = self.rounds([[80.0, 81.0], [80.0, 81.0]],
                                      [[100.0, 101.0], [100.0, 101.0]])
        for d, host in zip(docs, ["a", "b", "a", "a"]):
            d["context"].update(host_name=host, cpu_model="Xeon")
        table = {r["runtime"]: r for r in ltb_runtimes.rows(docs, labels)}
        self.assertEqual(table["cpp_eager"]["verdict"],
                         "settings differ: machine b (Xeon) vs a (Xeon)")
        self.assertEqual(table["py_eager"]["verdict"], "reference")

    def test_the_docs_pooled_rounds_are_the_stored_files(self):
        """docs/cpp-and-python.md's pooled rounds, recomputed from the
        result files it says they come from (docs/results/rounds/NAME-cppK
        and NAME-pyK): each runtime's time, Python eager's and the ratio
        with its interval, as tools/report writes them."""
        rounds = os.path.join(REPO, "docs", "results", "rounds")
        with open(os.path.join(REPO, "docs", "cpp-and-python.md"), encoding="utf-8") as f:
            text = f.read()
        groups = {}
        for name in sorted(os.listdir(rounds)):
            match = re.fullmatch(r"(.+)-(cpp|py)(\d+)\.json", name)
            self.assertIsNotNone(match, name)
            groups.setdefault(match[1], []).append(name)
        self.assertGreaterEqual(len(groups), 6)
        checked = 0
        for group, names in groups.items():
            self.assertIn(f"`docs/results/rounds/{group}-*`", text)
            docs = []
            for name in names:
                with open(os.path.join(rounds, name)) as f:
                    docs.append(json.load(f))
            table = ltb_runtimes.rows(docs, [n[:-5] for n in names])
            reference = {r["benchmark"]: r["time"] for r in table
                         if r["runtime"] == ltb_runtimes.REFERENCE}
            for r in table:
                if r["runtime"] == ltb_runtimes.REFERENCE:
                    continue
                self.assertEqual((r["rounds"], r["basis"]), (3, "rounds"), (group, r))
                written = "{} against {}: {}".format(
                    format_seconds(r["time"]),
                    format_seconds(reference[r["benchmark"]]),
                    ltb_runtimes.format_ratio(r))
                self.assertIn(written, text, (group, r["benchmark"], r["runtime"]))
                checked += 1
        self.assertEqual(checked, 11)

    def test_the_docs_suite_table_is_the_stored_files(self):
        """The default-suite table of docs/cpp-and-python.md, recomputed from
        docs/results/cpp-python-suite-{cpp,py}.json: every cell, but those
        marked as measured again in rounds."""
        results = os.path.join(REPO, "docs", "results")
        docs = []
        for side in ("cpp", "py"):
            with open(os.path.join(results, f"cpp-python-suite-{side}.json")) as f:
                docs.append(json.load(f))
        with open(os.path.join(REPO, "docs", "cpp-and-python.md"), encoding="utf-8") as f:
            text = f.read()
        checked = remeasured = 0
        for r in ltb_runtimes.rows(docs, ["cpp", "py"]):
            if r["runtime"] == ltb_runtimes.REFERENCE:
                continue
            family, size, _, phase, *shape = r["benchmark"].split("/")
            label = f"| {family}/{size} {phase}/{'/'.join(shape[:-1])}"  # no dtype
            row = re.search(re.escape(label) + r"( [†‡])? \|.*", text)
            self.assertIsNotNone(row, label)
            # †: every runtime measured again; ‡: C++ and Python eager.
            if row[1] == " †" or (row[1] == " ‡" and r["runtime"] == ltb_runtimes.CPP_EAGER):
                remeasured += 1
                continue
            self.assertIn(f"{format_seconds(r['time'])}: "
                          f"{ltb_runtimes.format_ratio(r)}", row[0], label)
            checked += 1
        self.assertEqual((checked, remeasured), (47, 5))

    def test_report_has_the_table_and_the_html_section(self):
        paths, _ = self.files([80.0, 81.0, 79.0], [100.0, 101.0, 99.0])
        proc = self.report(*paths)
        self.assertExit(proc, 0)
        self.assertIn("C++ and Python", proc.stdout)
        self.assertIn("| `GPT2/small/cpu/forward/batch:1/seq:64/fp32` | C++ eager (LibTorch) |",
                      proc.stdout)
        proc = self.report("--format", "html", *paths)
        self.assertExit(proc, 0)
        self.assertIn('<section id="runtimes"><h2>C++ and Python</h2>', proc.stdout)
        self.assertIn("1.25x faster", proc.stdout)
        # One bar per runtime beside Python eager: C++ eager and torch.compile.
        data = page_data(proc.stdout)
        self.assertEqual(points_by_section(data).get("runtimes"), 2)
        why = browser.unavailable()
        if why:
            self.skipTest(f"headless Chromium: {why}")
        page = self.write("report.html", proc.stdout)
        seen = browser.open_page(page)
        self.assertEqual(seen["console_errors"], [])
        self.assertEqual(seen["drawn"]["sections"].get("runtimes"), 2)


if __name__ == "__main__":
    unittest.main()


class AggregatesTest(unittest.TestCase):
    def test_a_cv_of_a_counter_whose_mean_is_zero_is_left_out_as_bench_does(self):
        from ltb.pysuite import counters
        entries = [{"name": "x", "family_index": 0, "per_family_instance_index": 0,
                    "run_name": "x", "real_time": t, "cpu_time": t, "token_match_%": 0.0,
                    "tg_tok/s": r} for t, r in ((1.0, 10.0), (3.0, 30.0))]
        rows = {a["aggregate_name"]: a for a in counters.aggregates(entries)}
        self.assertEqual(rows["mean"]["token_match_%"], 0.0)
        self.assertEqual(rows["stddev"]["token_match_%"], 0.0)
        self.assertNotIn("token_match_%", rows["cv"])
        self.assertAlmostEqual(rows["cv"]["tg_tok/s"], (200 ** 0.5) / 20)
        self.assertAlmostEqual(rows["cv"]["real_time"], (2 ** 0.5) / 2)
        json.dumps(rows, allow_nan=False)  # every value a number


class BandwidthUtilisationTest(unittest.TestCase):
    """mbu is memory's, as bench's (lib/peaks): a decode step's reads against
    the device's cache, through counters.entry."""

    def entry(self, step_bytes, rate):
        from types import SimpleNamespace
        from ltb.pysuite import counters
        tpot_ms = step_bytes / rate * 1e3
        spec = SimpleNamespace(full_name=lambda: "GPT2/x/cpu/generate", device="cpu",
                               dtype="fp32", quant=SimpleNamespace(kind="none"),
                               phase="generate", new_tokens=8)
        workload = SimpleNamespace(
            flops_per_step=0, params=1, tokens_per_step=1, samples_per_step=0,
            audio_per_step=0, cpu_seconds=1.0, skipped=lambda: 0,
            counters=lambda: {"weight_GB/s": rate / 1e9, "read_GB/s": rate / 1e9,
                              "tpot_ms": tpot_ms})
        peaks = {("cpu", "bandwidth"): (3e10, "measured")}
        return counters.entry(spec, 1, 0, 1, 1.0, [1.0], workload, peaks, False)

    def test_the_cache_decides_whether_a_step_reads_memory(self):
        from ltb.pysuite import counters
        from ltb.pysuite.device import cache_bytes
        cache = cache_bytes("cpu")
        if cache <= 0:
            self.skipTest("no cache size is known here")
        self.assertEqual(counters.CACHES_FROM_MEMORY, 8)
        # Held by the cache: no mbu, however slow.
        e = self.entry(cache / 2, 1e9)
        self.assertNotIn("mbu", e)
        self.assertEqual(e["label"], f"mbu left out: a step works over "
                         f"{counters.format_bytes(cache / 2)}, which the device's "
                         f"{counters.format_bytes(cache)} {HELD}")
        # Its bytes to the nearest byte, as bench names them: 754,432 bytes
        # are 736.75 KiB, which a rate times a time can land a hair under.
        if cache > 754432:
            for step in (754432 - 1e-7, 754432 + 1e-7):
                self.assertIn("works over 736.8 KiB,", self.entry(step, 1e9)["label"])
        # Past the cache, under eight of it, slower than the peak: an mbu.
        e = self.entry(2 * cache, 1.5e10)
        self.assertAlmostEqual(e["mbu"], 0.5)
        self.assertNotIn("label", e)
        # Faster than the peak there: the cache served part of it.
        e = self.entry(2 * cache, 4.5e10)
        self.assertNotIn("mbu", e)
        self.assertIn("mbu left out: the fastest step's rate is 1.5 times the bandwidth "
                      "peak (bytes/s) 3e+10 (measured)", e["label"])
        self.assertIn("under 8 times the device's", e["label"])
        # From eight caches on, a rate past the peak is the peak's fault.
        e = self.entry(9 * cache, 4.5e10)
        self.assertNotIn("mbu", e)
        self.assertTrue(e["label"].startswith("mbu left out: the rate is 1.5 times the "
                                              "bandwidth peak 3e+10"), e["label"])
        self.assertAlmostEqual(self.entry(9 * cache, 1.5e10)["mbu"], 0.5)

    def test_bytes_read_alike_on_both_sides(self):
        from ltb.pysuite import counters
        # lib/base/format.cc's FormatBytes
        self.assertEqual(counters.format_bytes(512), "512 B")
        self.assertEqual(counters.format_bytes(668672), "653.0 KiB")
        self.assertEqual(counters.format_bytes(32 << 20), "32.0 MiB")
        self.assertEqual(counters.format_bytes(3 << 30), "3.00 GiB")


class KindsTest(unittest.TestCase):
    """The registry the workloads dispatch through: every family has a
    kind, and its kind has a step for each of the family's phases."""

    def test_every_family_has_a_kind_with_a_step_for_each_phase(self):
        import types
        from ltb.pysuite import family, kinds
        self.assertEqual(sorted(kinds.KINDS), sorted(family.FAMILIES))
        names = ("infer_step", "forward_backward", "train_step", "train_epoch", "generate")
        workload = types.SimpleNamespace(**{n: n for n in names})
        for name, f in family.FAMILIES.items():
            steps = kinds.of(name).steps(workload)
            self.assertEqual([p for p in f["phases"] if p not in steps], [], name)
        self.assertEqual(kinds.of("Whisper").steps(workload)["transcribe"], "infer_step")
        # The phases bench serves are served (lib: Family::serves, serve_phases),
        # generation by the decoders alone (Whisper's has no slots).
        self.assertEqual({n: f["serve_phases"] for n, f in family.FAMILIES.items()},
                         {"Transformer": ("forward",), "GPT2": ("forward", "generate"),
                          "Llama": ("forward", "generate"), "ResNet": ("forward",),
                          "CNN": ("forward",), "Encoder": ("forward",),
                          "Whisper": ("encode",), "EncDec": ("forward",)})
        with self.assertRaisesRegex(KeyError, "no kind for family 'Gpt3'; the families: "
                                    "ResNet, CNN, Transformer"):
            kinds.of("Gpt3")


class DatasheetPeaksTest(unittest.TestCase):
    """On a known GPU pybench divides by bench's datasheet peaks, read from
    bench's facts (one table, lib/device/datasheets.cc), so that both sides'
    mfu and mbu divide by the same figures."""

    def args(self, **given):
        import types
        return types.SimpleNamespace(**dict(dict(peak_flops=None, peak_bandwidth=None,
                                                 peaks_from=None, device_list=["cuda"],
                                                 dtypes=["fp32", "bf16", "fp16"]), **given))

    def peaks_on(self, gpu_name, capability=(9, 0), **given):
        from unittest import mock
        from ltb.pysuite import peaks
        with mock.patch("torch.cuda.get_device_name", return_value=gpu_name), \
                mock.patch("torch.cuda.get_device_capability", return_value=capability):
            return peaks.peak_flops(self.args(**given))

    def test_names_match_as_benchs_lookup_does(self):
        from ltb.pysuite.peaks import datasheet
        # The cases of test/peaks/peaks_test.cc's LookupDatasheet test.
        cases = {"NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5", "NVIDIA H100 PCIe":
                 "NVIDIA H100 PCIe", "NVIDIA H100 NVL": "NVIDIA H100 NVL",
                 "NVIDIA H200": "NVIDIA H200 SXM", "NVIDIA H200 NVL": "NVIDIA H200 NVL",
                 "NVIDIA GH200 480GB": None, "NVIDIA A100-SXM4-80GB": "NVIDIA A100 80GB SXM",
                 "NVIDIA A100-PCIE-40GB": "NVIDIA A100 40GB", "NVIDIA L4": "NVIDIA L4",
                 "Tesla T4": "NVIDIA T4", "NVIDIA GeForce RTX 4090": "NVIDIA GeForce RTX 4090",
                 "NVIDIA RTX A4000": None, "NVIDIA GeForce RTX 3090": None,
                 "NVIDIA H200 141GB HBM3e": "NVIDIA H200 SXM",
                 "NVIDIA A100-SXM-80GB": "NVIDIA A100 80GB SXM",
                 "NVIDIA A100 80GB PCIe": "NVIDIA A100 80GB PCIe",
                 "NVIDIA H100 80GB HBM3 MIG 1g.10gb": None,
                 "NVIDIA A100-SXM4-40GB MIG 3g.20gb": None,
                 "NVIDIA GeForce RTX 4090 Laptop GPU": None,
                 "NVIDIA GeForce RTX 4090 D": None}
        self.assertEqual({n: (datasheet(n) or {}).get("model") for n in cases}, cases)

    def test_the_context_names_the_peaks_bench_named_on_the_same_gpu(self):
        # bench's own context on an H200 (docs/results/h200-2026-11-28).
        from ltb.pysuite import context
        with open(os.path.join(REPO, "docs", "results", "h200-2026-11-28",
                               "precision.json")) as f:
            bench_ctx = json.load(f)["context"]
        peaks = self.peaks_on("NVIDIA H200")
        self.assertEqual(peaks[("cuda", "bf16")][0], 989.4e12)
        self.assertEqual(peaks[("cuda", "bandwidth")][0], 4.8e12)
        written = context.peak_entries(peaks)
        for key in ("peak_flops_cuda_fp32", "peak_flops_cuda_bf16", "peak_flops_cuda_fp16",
                    "peak_bandwidth_cuda"):
            self.assertEqual(written[key], bench_ctx[key])

    def test_given_peaks_win_and_a_missing_rate_is_not_invented(self):
        peaks = self.peaks_on("NVIDIA H100 80GB HBM3", peak_bandwidth=1e12,
                              peak_flops="bf16=2e14")
        self.assertEqual(peaks[("cuda", "bandwidth")], (1e12, "given (--peak_bandwidth)"))
        self.assertEqual(peaks[("cuda", "bf16")], (2e14, "given (--peak_flops)"))
        self.assertEqual(peaks[("cuda", "fp32")][0], 67e12)  # the datasheet's, not given
        # A T4 (compute capability 7.5) has no bf16 arithmetic: LibTorch
        # emulates it in fp32, and bench's reason leaves its mfu out.
        t4 = self.peaks_on("Tesla T4", capability=(7, 5), peak_flops="fp32=1e13")
        self.assertEqual(t4[("cuda", "fp16")][0], 65e12)
        self.assertEqual(t4[("cuda", "bf16")], (
            0.0, "none: this GPU (compute capability 7.5) has no bf16 arithmetic (LibTorch "
                 "emulates it in fp32), which came with compute capability 8.0 (Ampere), so no "
                 "mfu is reported for it"))
        # On an Ampere or newer GPU without a datasheet rate, a dtype the
        # given peaks leave out is measured, as bench measures it.
        from ltb.pysuite import peaks as pysuite_peaks
        with unittest.mock.patch.object(pysuite_peaks, "measure_matmul",
                                        lambda device, dtype: 5e13):
            measured = self.peaks_on("NVIDIA RTX A4000", capability=(8, 6),
                                     peak_flops="fp32=1e13")[("cuda", "bf16")]
        self.assertEqual(measured[0], 5e13)
        self.assertTrue(measured[1].startswith("measured: "), measured)
        # Another GPU: nothing from the table.
        other = self.peaks_on("NVIDIA RTX A4000", peak_flops="1e12")
        self.assertNotIn(("cuda", "bandwidth"), other)


class CpuTimeTest(unittest.TestCase):
    """cpu_time is Google Benchmark's: the CPU time of the thread that runs
    the steps (its ThreadTimer without MeasureProcessCPUTime, which bench
    does not set), not the whole process's, which would count every
    intra-op thread's as well and read twice as high at two threads."""

    def test_cpu_time_is_the_calling_threads(self):
        import threading
        import time
        from types import SimpleNamespace
        from ltb.pysuite import runner

        spin = 0.05  # CPU seconds another thread burns each step

        def burn():
            start = time.thread_time()
            while time.thread_time() - start < spin:
                pass

        def step():  # the calling thread waits, blocked, while another works
            t = threading.Thread(target=burn)
            t.start()
            t.join()

        from ltb.pysuite.device import Clock
        workload = SimpleNamespace(spec=SimpleNamespace(device="cpu", steps=2),
                                   reset_stats=lambda: None, step=step, clock=Clock("cpu"))
        args = SimpleNamespace(min_time=0.0)
        _, done, _, _, _ = runner.repetition(workload, args, 2)
        self.assertEqual(done, 2)
        # The process spent at least 2 * spin; the calling thread, blocked in
        # join, next to nothing.
        self.assertLess(workload.cpu_seconds, spin / 2)


class ContextTest(unittest.TestCase):
    """pybench's context records what bench's records, in bench's words
    (lib/suite/suite.cc SettingsContext, lib/report/context.cc), in the
    flags' corners: the minimum time given, train_epoch's warm-up and data,
    LoadGen's minimum test, the libraries' versions, the environment's
    limits on the CPU."""

    def context_of(self, *argv, env=None):
        from unittest import mock
        from ltb.pysuite import context, flags
        args = flags.parse_flags(list(argv))
        args.malloc_text = flags.MALLOC[args.malloc]
        with mock.patch.dict(os.environ, env or {}):
            return context.context(args, 1, {})

    def test_the_settings_as_the_flags_set_them(self):
        c = self.context_of("--benchmark_filter=GPT2/")
        self.assertEqual(c["min_time"], "Google Benchmark's 0.5 s (no --benchmark_min_time)")
        self.assertEqual(c["warmup_epochs"],
                         "1 (train_epoch: whole epochs before the measured ones)")
        self.assertEqual(c["train_epoch_data"],
                         "memory: the dataset generated in RAM once, before the epochs")
        self.assertNotIn("serve_min", c)
        self.assertEqual(self.context_of()["min_time"], "6 s (the default suite's)")
        c = self.context_of("--benchmark_filter=GPT2/", "--benchmark_min_time=0.01",
                            "--warmup_epochs=0", "--scenario=Server", "--serve_min_s=2.5",
                            "--serve_min_queries=64")
        self.assertEqual(c["min_time"], "as given: --benchmark_min_time=0.01")
        self.assertEqual(c["warmup_epochs"],
                         "0 (train_epoch: whole epochs before the measured ones)")
        self.assertEqual(c["serve_min"], "2.5 s and 64 queries a LoadGen test at least")

    def test_the_libraries_versions_and_the_cpu_limits_of_the_environment(self):
        import torch
        config = torch.__config__.show()
        c = self.context_of("--benchmark_filter=GPT2/", env={
            "ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2", "NVIDIA_TF32_OVERRIDE": "0"})
        self.assertEqual(c["nvidia_tf32_override"], "0")
        self.assertEqual(c["aten_cpu_capability"], "avx2")
        self.assertEqual(c["dnnl_max_cpu_isa"], "AVX2")
        self.assertEqual(c["mkl_enable_instructions"], "AVX2")
        # As bench: PyTorch's and NVIDIA's variables, which change what runs on a GPU.
        c = self.context_of("--benchmark_filter=GPT2/", env={
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_LAUNCH_BLOCKING": "1",
            "TORCH_CUDNN_SDPA_DEPRIORITIZED": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
            "NCCL_P2P_DISABLE": "1", "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",
            "TORCHELASTIC_RESTART_COUNT": "0"})
        self.assertEqual((c["pytorch_cuda_alloc_conf"], c["cuda_launch_blocking"],
                          c["torch_cudnn_sdpa_deprioritized"], c["cublas_workspace_config"],
                          c["nccl_p2p_disable"]),
                         ("expandable_segments:True", "1", "1", ":4096:8", "1"))
        self.assertEqual(c["torchinductor_cache_dir"], "/tmp/x")  # as bench
        self.assertNotIn("torchelastic_restart_count", c)
        # As bench: where OpenMP's threads run, huge pages asked for, oneDNN's
        # primitive cache, a preloaded allocator.
        c = self.context_of("--benchmark_filter=GPT2/", env={
            "OMP_PROC_BIND": "close", "OMP_PLACES": "cores", "THP_MEM_ALLOC_ENABLE": "1",
            "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "4096",
            "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
            "MKL_CBWR": "AVX2", "TORCHINDUCTOR_FREEZING": "1"})
        self.assertEqual((c["omp_proc_bind"], c["omp_places"], c["thp_mem_alloc_enable"],
                          c["onednn_primitive_cache_capacity"], c["ld_preload"]),
                         ("close", "cores", "1", "4096",
                          "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"))
        # MKL's GEMMs on an older code path, Inductor's freezing (a compiled
        # run's code): recorded, as bench records them.
        self.assertEqual((c["mkl_cbwr"], c["torchinductor_freezing"]), ("AVX2", "1"))
        self.assertIn("cpu_affinity", c)
        self.assertIn("cpu_quota", c)
        # Found here by plain text search in the build summary.
        at = config.find("MKL-DNN v")
        if at >= 0:
            version = config[at + len("MKL-DNN v"):].split(" ")[0]
            self.assertTrue(c["onednn_version"].startswith(version + " (git "),
                            c["onednn_version"])
        at = config.find("Math Kernel Library Version ")
        if "BLAS_INFO=mkl" in config and at >= 0:
            rest = config[at + len("Math Kernel Library Version "):]
            self.assertEqual(c["blas_version"], "MKL " + rest.split(" for ")[0])
        from ltb.pysuite import context
        self.assertEqual(context.onednn_version_in("  - oneDNN v3.7.1\n"), "3.7.1")
        self.assertEqual(context.mkl_version_in("  - OpenMP 201511\n"), "")


class HostTest(unittest.TestCase):
    """pybench reads the host as bench does (lib/base/threads.cc,
    lib/base/cpu_host.cc), over fake /proc and /sys trees, and says it in
    bench's words: the default threads under a cgroup's CPU quota and an
    affinity mask, huge pages, frequency scaling, SMT, NUMA, a hypervisor."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="ltb_host_")
        self.addCleanup(shutil.rmtree, self.root)

    def write(self, path, text):
        os.makedirs(os.path.dirname(self.root + path), exist_ok=True)
        with open(self.root + path, "w") as f:
            f.write(text)

    def topology(self, cpus, per_core):
        """cpu N and N + cores are one core's, as Linux numbers them."""
        for cpu in range(cpus):
            topo = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
            self.write(topo + "physical_package_id", "0\n")
            self.write(topo + "core_id", f"{cpu % (cpus // per_core)}\n")

    def test_the_default_threads_follow_the_affinity_and_the_cpu_quota(self):
        from ltb.pysuite import host
        self.topology(4, 2)
        self.write("/proc/self/cgroup", "0::/kube/pod/app\n")
        self.assertEqual(host.cpu_quota(self.root), (-1, ""))
        self.assertEqual(host.cpu_quota_text(host.cpu_quota(self.root)),
                         "none (no cgroup CPU quota)")
        self.assertEqual(host.default_threads_on(self.root, [0, 1, 2, 3]), 2)
        self.assertEqual(host.default_threads_on(self.root, [0, 2]), 1)  # one core's
        self.assertEqual(host.default_threads_on(self.root, [0]), 1)     # taskset -c 0
        self.write("/sys/fs/cgroup/kube/cpu.max", "150000 100000\n")
        self.write("/sys/fs/cgroup/kube/pod/cpu.max", "max 100000\n")
        self.write("/sys/fs/cgroup/kube/pod/app/cpu.max", "300000 100000\n")
        self.assertEqual(host.cpu_quota_text(host.cpu_quota(self.root)),
                         "1.5 CPUs (cgroup v2 cpu.max 150000 100000)")
        self.assertEqual(host.default_threads_on(self.root, [0, 1, 2, 3]), 2)
        self.write("/sys/fs/cgroup/kube/cpu.max", "50000 100000\n")
        self.assertEqual(host.default_threads_on(self.root, [0, 1, 2, 3]), 1)
        # A container's own cgroup, the root of its namespace.
        self.write("/proc/self/cgroup", "0::/\n")
        self.write("/sys/fs/cgroup/cpu.max", "100000 100000\n")
        self.assertEqual(host.cpu_quota_text(host.cpu_quota(self.root)),
                         "1 CPU (cgroup v2 cpu.max 100000 100000)")
        self.assertEqual(host.default_threads_on(self.root, [0, 1, 2, 3]), 1)
        # cgroup v1, cpu mounted with cpuacct.
        self.write("/proc/self/cgroup", "4:memory:/docker/x\n3:cpu,cpuacct:/docker/x\n")
        self.write("/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "100000\n")
        self.write("/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n")
        self.assertEqual(host.cpu_quota_text(host.cpu_quota(self.root)),
                         "1 CPU (cgroup v1 cpu.cfs_quota_us 100000 per cpu.cfs_period_us "
                         "100000)")
        self.assertEqual(host.default_threads_on(self.root, [0, 1, 2, 3]), 1)
        self.write("/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "-1\n")
        self.assertEqual(host.default_threads_on(self.root, [0, 1, 2, 3]), 2)
        # OMP_NUM_THREADS comes first.
        with unittest.mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "3"}):
            self.assertEqual(host.physical_cores(self.root, [0]), 3)
        self.assertEqual(host.cpu_list_text([3, 1, 0, 8]), "0-1,3,8")
        self.assertEqual(host.affinity_text([0], 2), "0 (1 of 2 logical CPUs)")

    def test_the_machine_around_the_cores_in_benchs_words(self):
        from ltb.pysuite import cpu_host
        self.assertEqual(cpu_host.transparent_hugepages(self.root), "")
        self.assertEqual(cpu_host.threads_per_core(self.root), "")
        self.assertEqual(cpu_host.numa_nodes(self.root, [0]), "")
        self.assertEqual(cpu_host.virtual_machine(self.root), "")
        self.assertTrue(cpu_host.cpu_frequency_scaling(self.root, [0]).startswith(
            "absent (no cpufreq"))
        self.write("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
        self.write("/sys/kernel/mm/transparent_hugepage/defrag",
                   "always defer defer+madvise [madvise] never\n")
        self.assertEqual(cpu_host.transparent_hugepages(self.root), "madvise (defrag: madvise)")
        for cpu in range(4):
            d = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/"
            self.write(d + "scaling_governor", "performance\n" if cpu < 2 else "powersave\n")
            self.write(d + "scaling_driver", "intel_pstate\n")
            self.write(d + "energy_performance_preference", "performance\n")
        self.write("/sys/devices/system/cpu/intel_pstate/no_turbo", "0\n")
        self.assertEqual(cpu_host.cpu_frequency_scaling(self.root, [0, 1, 2, 3]),
                         "performance on 0-1, powersave on 2-3 (driver intel_pstate, energy "
                         "preference performance, turbo on)")
        self.topology(4, 2)
        self.write("/sys/devices/system/cpu/smt/control", "on\n")
        self.assertEqual(cpu_host.threads_per_core(self.root), "2 threads per core (SMT on)")
        self.write("/sys/devices/system/cpu/smt/control", "notsupported\n")
        self.assertEqual(cpu_host.threads_per_core(self.root), "2 threads per core (no SMT)")
        self.write("/sys/devices/system/cpu/smt/control", "on\n")
        self.write("/sys/devices/system/node/node0/cpulist", "0-3,8-11\n")
        self.write("/sys/devices/system/node/node1/cpulist", "4-7,12-15\n")
        self.assertEqual(cpu_host.numa_nodes(self.root, [0, 1]),
                         "2 (this process's CPUs on node 0)")
        self.assertEqual(cpu_host.numa_nodes(self.root, [3, 4]),
                         "2 (this process's CPUs on nodes 0-1)")
        self.write("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu avx2 hypervisor\n")
        self.write("/sys/class/dmi/id/sys_vendor", "QEMU\n")
        self.write("/sys/class/dmi/id/product_name", "Standard PC (Q35 + ICH9, 2009)\n")
        self.assertEqual(cpu_host.virtual_machine(self.root),
                         "yes (hypervisor flag; QEMU Standard PC (Q35 + ICH9, 2009))")
        self.write("/proc/cpuinfo", "flags\t\t: fpu avx2 not_hypervisor\n")
        self.assertEqual(cpu_host.virtual_machine(self.root), "no (no hypervisor flag)")

    def test_the_same_entries_as_bench_on_this_machine(self):
        from ltb.pysuite import cpu_host
        c = cpu_host.entries(sorted(os.sched_getaffinity(0)), os.cpu_count())
        for key in ("cpu_affinity", "cpu_quota", "kernel", "cpu_frequency_scaling"):
            self.assertIn(key, c)
        if not os.access(built_bench(), os.X_OK):
            self.skipTest("no built bench to compare with")
        out = subprocess.run([built_bench(), "--benchmark_filter=^Ops/noop",
                              "--benchmark_min_time=0.01", "--benchmark_format=json"],
                             capture_output=True, text=True, timeout=300, check=True)
        bench = json.loads(out.stdout)["context"]
        self.assertEqual({k: bench.get(k) for k in c}, c)
        # What /bf16 means by phase (autocast in training), said alike.
        from ltb.pysuite.context import PRECISION
        self.assertEqual(bench["precision"], PRECISION)


class MallocTest(unittest.TestCase):
    """As bench (lib/measure/memory.cc): where another library serves malloc
    (jemalloc preloaded), glibc's settings do nothing, and the context says
    which library serves it instead of describing settings that do not apply."""

    def test_the_library_that_serves_malloc_is_named(self):
        from ltb.pysuite import host
        self.assertIn("libc.so", host.malloc_library())
        tuned = "glibc malloc, tuned: M_MMAP_MAX=0"
        self.assertEqual(host.malloc_description(tuned, "/lib/x86_64-linux-gnu/libc.so.6"),
                         tuned)
        self.assertEqual(host.malloc_description(tuned, ""), tuned)
        self.assertEqual(
            host.malloc_description(tuned, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2's malloc (preloaded or linked before "
            "glibc's), so --malloc's glibc settings do not apply")


class CpuSimulationTest(unittest.TestCase):
    """ATEN_CPU_CAPABILITY=avx2 alone limits ATen; pybench, as bench, limits
    oneDNN and MKL to the same level where they are unset (MKL's GEMMs on an
    Intel CPU otherwise run AVX-512, twice an AVX2 CPU's rate, while bench
    beside it runs AVX2's)."""

    def test_the_older_cpus_limits_follow_aten_where_unset(self):
        from ltb.pysuite.flags import BadFlag
        from ltb.pysuite.peaks import match_cpu_simulation
        env = {"ATEN_CPU_CAPABILITY": "avx2"}
        note = match_cpu_simulation(env)
        self.assertEqual(env, {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                               "MKL_ENABLE_INSTRUCTIONS": "AVX2", "LTB_MAX_CPU_ISA": "avx2"})
        self.assertEqual(note, "ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2 and "
                               "LTB_MAX_CPU_ISA=avx2, set to match ATEN_CPU_CAPABILITY=avx2 (an "
                               "older CPU for oneDNN, MKL and the peaks too)")
        env = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
        self.assertTrue(match_cpu_simulation(env).startswith(
            "MKL_ENABLE_INSTRUCTIONS=SSE4_2 and LTB_MAX_CPU_ISA=default, set to match"))
        self.assertEqual(env["ONEDNN_MAX_CPU_ISA"], "AVX512_CORE")  # what was set stays
        for level in ("avx512", ""):
            env = {"ATEN_CPU_CAPABILITY": level}
            self.assertEqual(match_cpu_simulation(env), "")
            self.assertEqual(env, {"ATEN_CPU_CAPABILITY": level})
        # ATen reads the value as written, and ignores AVX2 or DEFAULT: refused,
        # nothing set (oneDNN, MKL and the peaks would follow what ATen did not).
        if platform.machine() in ("x86_64", "AMD64"):
            for level in ("AVX2", "DEFAULT", "AVX512"):
                env = {"ATEN_CPU_CAPABILITY": level}
                with self.assertRaisesRegex(BadFlag, f"ATEN_CPU_CAPABILITY={level} is not a "
                                                     "value ATen reads"):
                    match_cpu_simulation(env)
                self.assertEqual(env, {"ATEN_CPU_CAPABILITY": level})
        env = {}
        self.assertEqual(match_cpu_simulation(env), "")
        self.assertEqual(env, {})

    def test_a_run_records_what_it_set(self):
        env = {k: v for k, v in os.environ.items() if k not in (
            "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
            "LTB_MAX_CPU_ISA")}
        env["ATEN_CPU_CAPABILITY"] = "avx2"
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "pybench"),
                               "--benchmark_filter=^GPT2/nano/cpu/forward/", *SHAPES,
                               "--benchmark_format=json"],
                              capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        c = json.loads(proc.stdout)["context"]
        self.assertEqual((c["onednn_max_cpu_isa"], c["mkl_enable_instructions"],
                          c["ltb_max_cpu_isa"]), ("AVX2", "AVX2", "avx2"))
        self.assertTrue(c["cpu_simulation"].startswith(
            "ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2"), c["cpu_simulation"])


class SyncFlagTest(unittest.TestCase):
    """bench's --sync=false times unsynchronised steps under /nosync names;
    pybench always synchronises, so it refuses the flag rather than time
    synchronised steps under a context that says sync false."""

    def test_sync_false_is_refused_and_true_runs_as_before(self):
        for value in ("false", "0", "no"):
            code, stderr = pybench_in_process("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                              f"--sync={value}", "--benchmark_list_tests")
            self.assertEqual(code, 2, stderr)
            self.assertIn(f"--sync={value} is bench's only", stderr)
            self.assertIn("valid: true", stderr)
        code, stdout, stderr = pybench_outputs("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                               "--sync=true", "--benchmark_list_tests")
        self.assertEqual(code, 0, stderr)
        self.assertNotIn("nosync", stdout)
        code, stderr = pybench_in_process("--sync=maybe", "--benchmark_list_tests")
        self.assertEqual(code, 2, stderr)
        self.assertIn("--sync=maybe: valid: true, false", stderr)


class NativeArithmeticTest(unittest.TestCase):
    """A half dtype the CPU has no arithmetic for has no peak and no mfu,
    with bench's reason (lib/peaks/peaks.cc), rather than an mfu against
    LibTorch's own fp32-converting matmul."""

    def test_which_dtypes_have_a_cpu_peak(self):
        from ltb.pysuite import peaks
        if platform.machine().lower() not in ("x86_64", "amd64"):
            self.skipTest("bench's peak loops are x86's")
        zen4 = {"avx2", "avx512f", "avx512_bf16"}
        sapphire = {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"}
        with unittest.mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("LTB_MAX_CPU_ISA", None)
            os.environ.pop("ATEN_CPU_CAPABILITY", None)
            self.assertTrue(peaks.native_cpu_arithmetic("fp32", {"avx2"}))
            self.assertFalse(peaks.native_cpu_arithmetic("bf16", {"avx2", "fma"}))
            self.assertTrue(peaks.native_cpu_arithmetic("bf16", zen4))
            self.assertFalse(peaks.native_cpu_arithmetic("fp16", zen4))
            self.assertTrue(peaks.native_cpu_arithmetic("fp16", sapphire))
            # An older CPU simulated: bench's loops for bf16 and fp16 are off.
            for var, value in (("LTB_MAX_CPU_ISA", "avx512"), ("ATEN_CPU_CAPABILITY", "avx2")):
                with unittest.mock.patch.dict(os.environ, {var: value}):
                    self.assertFalse(peaks.native_cpu_arithmetic("bf16", sapphire), var)
                    self.assertTrue(peaks.native_cpu_arithmetic("fp32", sapphire), var)
            # ATEN_CPU_CAPABILITY=avx512 limits ATen alone, as in bench.
            with unittest.mock.patch.dict(os.environ, {"ATEN_CPU_CAPABILITY": "avx512"}):
                self.assertTrue(peaks.native_cpu_arithmetic("bf16", sapphire))

    def test_no_peak_leaves_mfu_out_with_the_reason(self):
        from ltb.pysuite import peaks
        with unittest.mock.patch.object(peaks, "native_cpu_arithmetic",
                                        lambda dtype, flags=None: dtype == "fp32"):
            out = os.path.join(self.tmp.name, "py.json")
            code, stderr = pybench_in_process(
                "--benchmark_filter=^GPT2/nano/cpu/forward/", "--batch=1", "--seq=8",
                "--dtype=fp16", "--benchmark_min_time=0.01", "--warmup_s=0",
                f"--benchmark_out={out}")
        self.assertEqual(code, 0, stderr)
        with open(out) as f:
            doc = json.load(f)
        [entry] = doc["benchmarks"]
        reason = ("this CPU has no native fp16 arithmetic (LibTorch converts it to fp32), "
                  "so no mfu is reported for it")
        self.assertNotIn("mfu", entry)
        self.assertEqual(entry["label"], "mfu left out: " + reason)
        self.assertEqual(doc["context"]["peak_flops_cpu_fp16"], "none: " + reason)
        # Read back as bench's peaks (--peaks_from): none, with its reason.
        args = unittest.mock.Mock(peak_bandwidth=None, peak_flops=None, peaks_from=out,
                                  device_list=["cpu"], dtypes=["fp16"])
        self.assertEqual(peaks.peak_flops(args)[("cpu", "fp16")], (0.0, "none: " + reason))

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)


class Tf32OverrideTest(unittest.TestCase):
    """TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes PyTorch's fp32 matmuls on
    CUDA TF32 whatever allow_tf32 is set to: a CUDA run is refused, as
    bench refuses it, rather than timed as fp32; a CPU run is unaffected."""

    def test_a_cuda_run_is_refused_under_the_override(self):
        with unittest.mock.patch.dict(os.environ, {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}):
            code, stderr = pybench_in_process("--devices=cuda",
                                              "--benchmark_filter=^GPT2/nano/cuda/forward/",
                                              "--batch=1", "--seq=8")
            self.assertEqual(code, 2, stderr)
            self.assertIn("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes every fp32 matmul", stderr)
            code, stderr = pybench_in_process("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                              "--batch=1", "--seq=8",
                                              "--benchmark_min_time=0.01", "--warmup_s=0")
            self.assertEqual(code, 0, stderr)

    def test_settings_that_would_run_other_than_the_context_says_are_refused(self):
        # As bench refuses them (lib/base/threads.cc, lib/device/cpu_isa.cc):
        # OpenMP's limits under the threads asked, an ATEN_CPU_CAPABILITY
        # ATen ignores, and torch.compile turned off under a /py_compile run.
        for extra, args, said in (
                ({"OMP_THREAD_LIMIT": "1"}, ["--threads=2"],
                 "OMP_THREAD_LIMIT=1 holds OpenMP to 1 thread, fewer than the 2 intra-op "
                 "threads this run would report"),
                ({"OMP_DYNAMIC": "TRUE"}, [],
                 "OMP_DYNAMIC=true lets OpenMP run fewer threads than asked"),
                ({"ATEN_CPU_CAPABILITY": "AVX2"}, [],
                 "ATEN_CPU_CAPABILITY=AVX2 is not a value ATen reads"),
                ({"TORCHDYNAMO_DISABLE": "1"}, ["--runtime=compile"],
                 "TORCHDYNAMO_DISABLE=1 turns torch.compile off, so a /py_compile run "
                 "would be eager")):
            with unittest.mock.patch.dict(os.environ, extra):
                code, stderr = pybench_in_process("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                                  "--batch=1", "--seq=8", *args)
            self.assertEqual(code, 2, (extra, stderr))
            self.assertIn(said, stderr)
        with unittest.mock.patch.dict(os.environ, {"OMP_THREAD_LIMIT": "1"}):
            code, stderr = pybench_in_process("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                              "--batch=1", "--seq=8", "--threads=1",
                                              "--benchmark_min_time=0.01", "--warmup_s=0")
        self.assertEqual(code, 0, stderr)

    def test_a_cpu_fp32_run_is_refused_where_onednn_may_narrow_fp32(self):
        for name in ("ONEDNN_DEFAULT_FPMATH_MODE", "DNNL_DEFAULT_FPMATH_MODE"):
            with unittest.mock.patch.dict(os.environ, {name: "BF16"}):
                code, stderr = pybench_in_process("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                                  "--batch=1", "--seq=8")
                self.assertEqual(code, 2, stderr)
                self.assertIn(f"{name}=BF16 lets oneDNN compute fp32 in a narrower type",
                              stderr)
        with unittest.mock.patch.dict(os.environ, {"ONEDNN_DEFAULT_FPMATH_MODE": "STRICT"}):
            code, stderr = pybench_in_process("--benchmark_filter=^GPT2/nano/cpu/forward/",
                                              "--batch=1", "--seq=8",
                                              "--benchmark_min_time=0.01", "--warmup_s=0")
            self.assertEqual(code, 0, stderr)


class AggregatesOnlyTest(ToolTest):
    """--benchmark_report_aggregates_only and --benchmark_display_aggregates_only
    do what Google Benchmark's do in bench: the first leaves the
    repetitions out of the file and the display, the second out of the
    display alone; without them (or with one repetition) every entry is
    there."""

    ARGS = ("--benchmark_filter=^GPT2/nano/cpu/forward/", "--batch=1", "--seq=8", "--steps=1",
            "--warmup_steps=0", "--warmup_s=0", "--threads=1", "--peak_flops=1e13")

    def run_types(self, *flags):
        out = os.path.join(self.tmp, "py.json")
        proc = self.run_tool("pybench", *self.ARGS, f"--benchmark_out={out}",
                             "--benchmark_format=json", *flags)
        self.assertExit(proc, 0)
        with open(out) as f:
            written = [e["run_type"] for e in json.load(f)["benchmarks"]]
        shown = [e["run_type"] for e in json.loads(proc.stdout)["benchmarks"]]
        return written, shown

    def test_aggregates_only_flags_are_google_benchmarks(self):
        every = ["iteration"] * 2 + ["aggregate"] * 4
        self.assertEqual(self.run_types("--benchmark_repetitions=2"), (every, every))
        self.assertEqual(self.run_types("--benchmark_repetitions=2",
                                        "--benchmark_report_aggregates_only=true"),
                         (["aggregate"] * 4, ["aggregate"] * 4))
        self.assertEqual(self.run_types("--benchmark_repetitions=2",
                                        "--benchmark_display_aggregates_only=true"),
                         (every, ["aggregate"] * 4))
        # One repetition has no aggregates: its entry is reported.
        self.assertEqual(self.run_types("--benchmark_report_aggregates_only=true"),
                         (["iteration"], ["iteration"]))


class Fp32IsFp32Test(ToolTest):
    """bench runs fp32 as fp32 on a GPU (lib/device/cuda_backend.cc turns
    off the TF32 that LibTorch lets cuDNN use by default), and its context
    says so; PyTorch's default lets cuDNN run fp32 convolutions as TF32, so
    pybench turns it off as well, and says so under bench's key."""

    def test_tf32_is_off_and_the_context_says_so_as_benchs(self):
        proc = self.run_tool("pybench", "--benchmark_filter=^CNN/nano/cpu/forward/",
                             "--batch=1", "--steps=1", "--warmup_steps=0", "--warmup_s=0",
                             "--threads=1", "--peak_flops=1e13", "--benchmark_format=json")
        self.assertExit(proc, 0)
        self.assertEqual(json.loads(proc.stdout)["context"]["cuda_tf32"],
                         "matmul off, convolution off")  # bench's words, bench's setting
        import torch
        from ltb.pysuite import host
        before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        try:
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
            self.assertEqual(host.tf32_text(), "matmul on, convolution on")
            host.configure_fp32()
            self.assertFalse(torch.backends.cudnn.allow_tf32)
            self.assertFalse(torch.backends.cuda.matmul.allow_tf32)
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


class FakeEvent:
    """torch.cuda.Event's timing on a GPU whose clock is `now` (seconds):
    record() stamps the device's time, as an event on an idle stream does."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.at = None

    def record(self, stream=None):
        self.at = self.gpu.now

    def synchronize(self):
        self.gpu.event_syncs += 1

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3  # ms


class GpuTimingTest(unittest.TestCase):
    """On a GPU bench times steps with CUDA events (lib/device/cuda_runtime.cc
    CudaEventTimeline), never stalling the host inside a generation, and
    sub-millisecond steps several to a sample (lib/measure/timed_loop.cc);
    pybench the same, here on a GPU of fakes: torch.cuda.synchronize, which
    pybench used to call after every step and decode step, fails."""

    def setUp(self):
        from types import SimpleNamespace
        from unittest import mock
        import torch
        self.gpu = SimpleNamespace(now=0.0, event_syncs=0)
        patches = [mock.patch.object(torch.cuda, "Event", lambda **_: FakeEvent(self.gpu)),
                   mock.patch.object(torch.cuda, "current_stream", lambda *_: None),
                   mock.patch.object(torch.cuda, "reset_peak_memory_stats", lambda *_: None),
                   mock.patch.object(torch.cuda, "synchronize",
                                     mock.Mock(side_effect=AssertionError("a host stall")))]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)

    def workload(self, step_s, phase="forward"):
        from types import SimpleNamespace
        from ltb.pysuite.device import Clock

        def step():
            self.gpu.now += step_s
        return SimpleNamespace(spec=SimpleNamespace(device="cuda", phase=phase, runtime="eager",
                                                    steps=None),
                               reset_stats=lambda: None, step=step, clock=Clock("cuda"))

    def test_launches_a_sample_are_benchs(self):
        from ltb.pysuite import runner
        for step, launches in ((100e-6, 10), (300e-6, 4), (1e-3, 1), (50e-3, 1), (1e-9, 1000),
                               (0, 1)):
            self.assertEqual(runner.launches_per_sample(step, True), launches, step)
        self.assertEqual(runner.launches_per_sample(100e-6, False), 1)
        for launches, iterations, even in ((10, 30, 10), (10, 25, 9), (10, 4, 4), (10, 1, 1),
                                           (1, 1000, 1)):
            self.assertEqual(runner.even_launches(launches, iterations), even)

    def test_short_steps_are_timed_by_events_several_to_a_sample(self):
        from types import SimpleNamespace
        from ltb.pysuite import runner
        w = self.workload(100e-6)
        runner.warm_up(w, SimpleNamespace(warmup_steps=3, warmup_seconds=0.0))
        self.assertEqual(w.launches, 10)  # ceil(1 ms / 0.1 ms)
        # Google Benchmark's growth from 1 iteration: 1, 10, 100, then 147,
        # run as 15 samples of 10 (150 steps) to reach 10.5 ms.
        asked, done, seconds, samples, _ = runner.repetition(
            w, SimpleNamespace(min_time=0.0105), 1)
        self.assertEqual((asked, done, len(samples), w.launches_used), (147, 150, 15, 10))
        self.assertAlmostEqual(seconds, 150 * 100e-6)
        for s in samples:
            self.assertAlmostEqual(s, 100e-6)
        # A step of 1 ms or more: one a sample.
        w = self.workload(2e-3)
        runner.warm_up(w, SimpleNamespace(warmup_steps=2, warmup_seconds=0.0))
        self.assertEqual(w.launches, 1)

    def test_generation_marks_its_steps_without_stalling_the_host(self):
        from types import SimpleNamespace
        import torch
        from ltb.pysuite import generation
        from ltb.pysuite.device import Clock
        gpu, times = self.gpu, iter([5e-3, 1e-3, 2e-3, 3e-3])

        def run(*_):
            gpu.now += next(times)
            return torch.zeros(1, 4)
        w = SimpleNamespace(spec=SimpleNamespace(device="cuda", new_tokens=4, depth=0, prompt=8,
                                                 batch=1),
                            grad_mode="inference_mode", prefill=run, decode=run,
                            timeline=Clock("cuda"), weight_bytes=1.0, cache=[],
                            cache_per_position=None)
        w.prefill_s = w.decode_s = w.early_s = w.late_s = 0.0
        w.decode_steps, w.steps = [], 0
        generation.step(w)
        self.assertEqual(gpu.event_syncs, 1)  # once, at the end
        self.assertAlmostEqual(w.prefill_s, 5e-3)
        self.assertEqual([round(t, 9) for t in w.decode_steps], [1e-3, 2e-3, 3e-3])


class OpenMpBindingTest(unittest.TestCase):
    """Where OpenMP binds its threads, its runtime pins the main thread to
    its first place when PyTorch loads: pybench still counts every CPU the
    process may run on, and takes as many threads, as bench does."""

    def test_binding_narrows_neither_the_cpus_nor_the_threads(self):
        base = {k: v for k, v in os.environ.items()
                if k not in ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES",
                             "GOMP_CPU_AFFINITY")}

        def context(**env):
            proc = subprocess.run(
                [sys.executable, os.path.join(TOOLS, "pybench"), "--benchmark_format=json",
                 "--benchmark_filter=^CNN/nano/cpu/forward/", "--batch=2",
                 "--benchmark_min_time=0.01", "--warmup_s=0", "--peak_flops=1e12",
                 "--peak_bandwidth=1e10"],
                capture_output=True, text=True, timeout=600, env=dict(base, **env))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            ctx = json.loads(proc.stdout)["context"]
            return ctx["cpu_affinity"], ctx["intra_op_threads"]

        plain = context()
        self.assertIn(f"({len(os.sched_getaffinity(0))} of ", plain[0])
        self.assertEqual(context(OMP_PROC_BIND="close"), plain)
