"""pybench's --quant is bench's: the same names, the same refusals in the
same words, the same bytes a decode step reads, and layers that compute
what bench's kernels compute (the same ATen operators on the same
quantised values).

Against a built bench where the tests find one (LTB_BENCH, as ctest sets
it); else against bench's words and byte counts as lib/workloads/quant.cc
writes them.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import unittest

from tests.helpers import TOOLS, ToolTest, built_bench

from ltb.pysuite.cpu_cache import last_level_cache

try:
    import torch
except ImportError:  # the tools' tests also run without torch
    torch = None

# One pybench process and one bench run: GPT2's and Llama's nano generation
# unquantised and in each quantisation (int4 in groups of 32 and 64), and
# what is refused: quantised training, int8dyn in bf16.
QUANT_FILTER = ("--benchmark_filter=^(GPT2|Llama)/nano/cpu/(generate/.*/fp32/|"
                "generate/.*/bf16/int8dyn/|train_step/.*/fp32/int)")
QUANT_FLAGS = ["--quant=none,int8,int4,int8dyn", "--quant_group=32,64", "--dtype=fp32,bf16",
               "--batch=1", "--seq=8", "--prompt=4", "--new_tokens=3",
               "--steps=2", "--warmup_s=0", "--warmup_steps=1",
               "--peak_flops=1e13", "--peak_bandwidth=1e12"]
# Counters bench reports that pybench does not: accuracy against the
# unquantised model (bench's alone), and its CPU allocator's peak.
BENCH_ONLY = {"kld_mean", "kld_p99", "kld_max", "same_top1_%", "top1_agree_%", "rel_err",
              "token_match_%", "peak_mem"}
TRAINING = ("--quant={}: quantised weights are for inference; LibTorch's quantised linear "
            "kernels have no backward, so training phases run unquantised (--quant=none)")
INT8DYN_BF16 = ("--quant=int8dyn: FBGEMM's dynamic int8 linear takes fp32 activations (it "
                "quantises them itself), not bf16")
NO_MFU = ("mfu left out: FBGEMM's dynamic int8 linear multiplies in int8, whose peak the "
          "suite does not measure")


def bench_binary():
    path = built_bench()
    return path if os.access(path, os.X_OK) else None


def pybench_outputs(*args):
    """(exit status, stdout, stderr) of pybench run in this process (flags
    and --benchmark_list_tests: nothing runs)."""
    from ltb.pysuite import bench as pybench
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = pybench.pybench_main(list(args))
    return code, out.getvalue(), err.getvalue()


def by_name(path, runtime="/py_eager"):
    with open(path) as f:
        return {e["name"].replace(runtime, ""): e for e in json.load(f)["benchmarks"]}


def linear_shapes(family):
    """(in, out, bias) of every linear layer of the nano model, and the
    tied head's (in, out) or None: what bench quantises."""
    from ltb.pysuite import families
    model = families.build(family, "nano")
    layers = [(m.in_features, m.out_features, m.bias is not None)
              for m in model.modules() if isinstance(m, torch.nn.Linear)]
    o = model.options
    head = (o.d_model, o.vocab_size) if family == "GPT2" or getattr(o, "tied", False) else None
    return layers, head


def expected_weight_bytes(family, quant, dtype_bytes=4):
    """generate's weight_bytes by bench's rule: the unquantised weights a
    decode step reads, less those quantised, plus their packed bytes."""
    from ltb.pysuite import families
    total = families.decode_weight_elements(family, "nano") * dtype_bytes
    if quant == "none":
        return total
    layers, head = linear_shapes(family)
    if head is not None:
        layers = layers + [(head[0], head[1], False)]
    for inputs, out, bias in layers:
        bias_bytes = out * dtype_bytes if bias else 0
        total -= inputs * out * dtype_bytes + bias_bytes
        if quant == "int8":
            total += out * inputs + out * dtype_bytes + bias_bytes
        elif quant == "int8dyn":
            total += out * inputs + out * 12 + bias_bytes
        else:
            g = int(quant.split(":g")[1])
            rows = -(-out // 16) * 16
            total += rows * inputs // 2 + inputs // g * rows * 2 * dtype_bytes + bias_bytes
    return total


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class QuantFlagsTest(unittest.TestCase):
    """Names and flags, in this process."""

    def test_names_are_benchs(self):
        flags = ["--benchmark_filter=^(Transformer|GPT2|Llama|CNN)/nano/cpu/",
                 "--quant=none,int8,int4,int8dyn", "--quant_group=32,128", "--dtype=fp32,bf16",
                 "--batch=1", "--seq=16", "--prompt=4", "--new_tokens=3",
                 "--benchmark_list_tests"]
        code, out, err = pybench_outputs(*flags)
        self.assertEqual(code, 0, err)
        py = {n.replace("/py_eager", "") for n in out.split()}
        self.assertIn("Llama/nano/cpu/generate/batch:1/prompt:4/new:3/bf16/int4:g128/"
                      "manual_time", py)
        self.assertIn("Transformer/nano/cpu/train_step/batch:1/seq:16/fp32/int8dyn/"
                      "manual_time", py)
        self.assertIn("GPT2/nano/cpu/forward/batch:1/seq:16/fp32/manual_time", py)
        self.assertFalse([n for n in py if n.startswith("CNN/") and "/int" in n])
        # Each name of the quantising families in 5 forms: none, int8, int4 in
        # two groups, int8dyn; the runtime last.
        self.assertTrue(all("/py_eager/" in n for n in out.split()))
        quantised = [n for n in py if "/int" in n]
        self.assertEqual(len(quantised), 4 * len([n for n in py if not n.startswith("CNN/")
                                                  and "/int" not in n]))
        code, out, _ = pybench_outputs("--benchmark_filter=^GPT2/nano/cpu/generate/",
                                       "--quant=int8", "--weights=/none/gpt2.safetensors",
                                       "--benchmark_list_tests")
        self.assertEqual(out.split(), ["GPT2/nano/cpu/generate/batch:1/prompt:32/new:100/fp32/"
                                       "int8/weights:gpt2/py_eager/manual_time"])
        bench = bench_binary()
        if bench:
            for args in (flags, ["--benchmark_filter=^GPT2/nano/cpu/generate/", "--quant=int8",
                                 "--weights=/none/gpt2.safetensors", "--benchmark_list_tests"]):
                proc = subprocess.run([bench, *args], capture_output=True, text=True,
                                      timeout=120)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                _, out, _ = pybench_outputs(*args)
                self.assertEqual({n.replace("/py_eager", "") for n in out.split()},
                                 set(proc.stdout.split()))

    def test_bad_values_exit_2_naming_the_valid_ones(self):
        cases = {
            "--quant=int3": "bad --quant value 'int3': unknown quantisation 'int3'; valid: "
                            "none, int8, int4, int8dyn",
            "--quant=int8,x": "bad --quant value 'int8,x': unknown quantisation 'x'; valid: "
                              "none, int8, int4, int8dyn",
            "--quant_group=48": "bad --quant_group value '48': unknown group size '48'; "
                                "valid: 32, 64, 128",
            "--quant=": "--quant needs at least one value",
            "--quant_group=": "--quant_group needs at least one value",
        }
        bench = bench_binary()
        for flag, words in cases.items():
            args = [flag, "--benchmark_filter=^GPT2/nano/", "--benchmark_list_tests"]
            code, _, err = pybench_outputs(*args)
            self.assertEqual(code, 2, flag)
            self.assertEqual(err.strip(), f"pybench: {words}", flag)
            if bench:
                proc = subprocess.run([bench, *args], capture_output=True, text=True,
                                      timeout=120)
                self.assertEqual(proc.returncode, 2, flag)
                self.assertIn(f"bench: {words}\n", proc.stderr, flag)

    def test_refusals_are_benchs_words(self):
        from ltb.pysuite import quant
        int8, int4, dyn = quant.Quant("int8"), quant.Quant("int4", 32), quant.Quant("int8dyn")
        f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16
        self.assertIsNone(quant.refusal(quant.NONE, "cpu", f32, True))
        for q, dtype in ((int8, bf16), (int8, f16), (int4, f32), (int4, f16)):
            self.assertIsNone(quant.refusal(q, "cpu", dtype, False))
        self.assertEqual(quant.refusal(int4, "cpu", f32, True), TRAINING.format("int4:g32"))
        self.assertEqual(quant.refusal(int4, "cuda", f32, False),
                         "--quant=int4: LibTorch's int4 weight kernel on cuda takes bf16 "
                         "activations, not fp32")
        self.assertEqual(quant.refusal(int4, "cuda:1", f16, False),
                         "--quant=int4: LibTorch's int4 weight kernel on cuda:1 takes bf16 "
                         "activations, not fp16")
        for dtype in (f32, bf16, f16):
            self.assertIsNone(quant.refusal(int8, "cuda", dtype, False))
        self.assertEqual(quant.refusal(dyn, "cuda", f32, False),
                         "--quant=int8dyn: FBGEMM's dynamic int8 linear runs on x86 CPUs with "
                         "a LibTorch built with FBGEMM, not on cuda")
        if quant.has_fbgemm():
            self.assertEqual(quant.refusal(dyn, "cpu", bf16, False), INT8DYN_BF16)
            self.assertIsNone(quant.refusal(dyn, "cpu", f32, False))


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class QuantizedLayersTest(unittest.TestCase):
    """The layers against a dequantise-then-linear reference, and the
    quantised values as bench's QuantizeWeight makes them."""

    def test_int8_is_per_output_channel_and_symmetric(self):
        from ltb.pysuite import quant
        torch.manual_seed(0)
        w = torch.randn(24, 40) * torch.linspace(0.1, 3, 24).unsqueeze(1)
        values, scales, _ = quant.quantize_weight(w, quant.Quant("int8"), torch.float32)
        self.assertEqual((values.dtype, tuple(values.shape), tuple(scales.shape)),
                         (torch.int8, (24, 40), (24,)))
        self.assertTrue(torch.allclose(scales, w.abs().amax(1) / 127))
        self.assertEqual(values.abs().amax(1).int().min().item(), 127)
        err = (quant.dequantize(quant.Quant("int8"), values, scales) - w).abs()
        self.assertTrue((err <= scales.unsqueeze(1) * 0.5001).all())

    def test_int4_groups_have_a_scale_and_a_zero_from_their_min_and_max(self):
        from ltb.pysuite import quant
        torch.manual_seed(1)
        q = quant.Quant("int4", 32)
        w = torch.randn(16, 64) + 0.5
        values, scales, zeros = quant.quantize_weight(w, q, torch.float32)
        self.assertEqual((values.dtype, tuple(scales.shape), tuple(zeros.shape)),
                         (torch.int32, (16, 2), (16, 2)))
        groups = w.reshape(16, 2, 32)
        lo, hi = groups.amin(-1), groups.amax(-1)
        self.assertTrue(torch.allclose(scales, (hi - lo) / 15))
        self.assertTrue(torch.allclose(zeros, lo + scales * 8))
        self.assertEqual(values.reshape(16, 2, 32).amin(-1).max().item(), 0)
        self.assertEqual(values.reshape(16, 2, 32).amax(-1).min().item(), 15)
        err = (quant.dequantize(q, values, scales, zeros) - w).abs().reshape(16, 2, 32)
        self.assertTrue((err <= scales.unsqueeze(-1) * 0.5001).all())
        with self.assertRaisesRegex(quant.QuantError,
                                    r"input width \(48\) to be a multiple of 32"):
            quant.quantize_weight(torch.randn(16, 48), q, torch.float32)

    def check_kernel(self, q, dtype, bias, device="cpu"):
        """bench's ExpectKernelMatchesReference: 40 outputs (not a multiple
        of the int4 kernels' 16: padded, then cut), in fp32 on the same
        quantised values; int8dyn's activations quantised per tensor to 7
        bits as FBGEMM quantises them."""
        from ltb.pysuite import quant
        torch.manual_seed(2)
        w = (torch.randn(40, 128) * 0.05).to(device, dtype)
        b = (torch.randn(40) * 0.1).to(device, dtype) if bias else None
        x = torch.randn(3, 5, 128).to(device, dtype)
        layer = quant.quantized_linear(w, b, q)
        y = layer(x)
        self.assertEqual((tuple(y.shape), y.dtype), ((3, 5, 40), dtype))
        values, scales, zeros = quant.quantize_weight(w, q, dtype)
        xin = x.float()
        if q.kind == "int8dyn":
            scale, zero = torch._choose_qparams_per_tensor(xin, True)
            xin = torch.quantize_per_tensor(xin, scale, zero, torch.quint8).dequantize()
        ref = torch.nn.functional.linear(xin, quant.dequantize(q, values, scales, zeros),
                                         None if b is None else b.float())
        tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
        self.assertLessEqual((y.float() - ref).abs().max().item(),
                             tolerance * ref.abs().max().item(), f"{q.name()} {dtype} {bias}")
        return layer

    def test_each_cpu_kernel_computes_the_dequantised_linear(self):
        from ltb.pysuite import quant
        for dtype in quant.INT8_DTYPES["cpu"]:
            for bias in (False, True):
                self.check_kernel(quant.Quant("int8"), dtype, bias)
        for dtype in quant.INT4_DTYPES["cpu"]:
            for g in quant.GROUPS:
                self.check_kernel(quant.Quant("int4", g), dtype, g == 32)
        if quant.has_fbgemm():
            for bias in (False, True):
                self.check_kernel(quant.Quant("int8dyn"), torch.float32, bias)

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "needs a GPU")
    def test_each_gpu_kernel_computes_the_dequantised_linear(self):
        from ltb.pysuite import quant
        for dtype in quant.INT8_DTYPES["cuda"]:
            self.check_kernel(quant.Quant("int8"), dtype, True, "cuda")
        for g in quant.GROUPS:
            self.check_kernel(quant.Quant("int4", g), torch.bfloat16, g == 32, "cuda")

    def test_layers_count_the_packed_bytes(self):
        from ltb.pysuite import quant
        w = torch.randn(40, 128)
        # int8: a byte a weight and an fp32 scale a row.
        self.assertEqual(quant.quantized_linear(w, None, quant.Quant("int8")).bytes,
                         40 * 128 + 40 * 4)
        # int4: half a byte a weight, a scale and a zero a group, of 48 rows
        # (40 padded to the kernel's tiles of 16); plus the bf16 bias.
        w16, b16 = w.to(torch.bfloat16), torch.zeros(40, dtype=torch.bfloat16)
        self.assertEqual(quant.quantized_linear(w16, b16, quant.Quant("int4", 32)).bytes,
                         48 * 128 // 2 + 48 * (128 // 32) * 2 * 2 + 40 * 2)
        if quant.has_fbgemm():
            self.assertEqual(quant.quantized_linear(w, None, quant.Quant("int8dyn")).bytes,
                             40 * 128 + 40 * 12)

    def test_every_linear_layer_and_the_tied_head_are_quantised(self):
        """bench's QuantizeLinears test on Llama/nano: 14 linear layers and a
        quantised copy of the tied head; the lookup keeps the embedding; the
        predictions barely move. The plain twin is untouched by the hook."""
        from ltb.pysuite import families, quant
        torch.manual_seed(3)
        model = families.build("Llama", "nano").eval()
        plain_keys = list(model.state_dict())
        self.assertIsNone(model.quantized_head)
        tokens = torch.randint(0, 1000, (1, 12))
        with torch.no_grad():
            before = model(tokens)
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        linear_bytes = sum(m.weight.nbytes for m in linears)
        removed, added = quant.quantize_model(model, quant.Quant("int8"))
        self.assertEqual(len(linears), 14)
        self.assertFalse([m for m in model.modules() if isinstance(m, torch.nn.Linear)])
        self.assertEqual(removed, linear_bytes + 1000 * 64 * 4)
        self.assertEqual(added, 122_880 + 2 * 768 * 4 + 64_000 + 1_000 * 4)
        self.assertEqual(model.model.embed_tokens.weight.numel(), 1000 * 64)
        self.assertEqual(list(model.state_dict()), [k for k in plain_keys if "_proj" not in k])
        with torch.no_grad():
            after = model(tokens)
        self.assertLess((after - before).abs().max().item(),
                        0.02 * before.abs().max().item())
        self.assertTrue(torch.equal(after.argmax(-1), before.argmax(-1)))
        gpt2 = families.build("GPT2", "nano")
        removed, added = quant.quantize_model(gpt2, quant.Quant("int4", 32))
        self.assertEqual(gpt2.wte.weight.shape, (1000, 64))  # the lookup's
        self.assertEqual(gpt2.quantized_head.out, 1000)

    def test_an_untied_head_is_quantised_as_a_linear_layer_and_read(self):
        """Llama 8B's shape on nano: lm_head is the 15th linear layer, and
        the logits are the final hidden states through its int8 weights."""
        from ltb.pysuite import families, quant
        torch.manual_seed(3)
        model = families.build("Llama", "nano", tied=False).eval()
        tokens = torch.randint(0, 1000, (1, 12))
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        head = model.lm_head.weight.detach().clone()
        removed, _ = quant.quantize_model(model, quant.Quant("int8"))
        self.assertEqual(len(linears), 15)
        self.assertEqual(removed, sum(m.weight.nbytes for m in linears))
        self.assertIsNone(model.quantized_head)
        self.assertIsInstance(model.lm_head, quant.QuantizedLinear)
        with torch.no_grad():
            hidden = model.model.norm(model._hidden(tokens))
            got = model(tokens)
        int8 = quant.dequantize(quant.Quant("int8"),
                                *quant.quantize_weight(head, quant.Quant("int8"), torch.float32))
        torch.testing.assert_close(got, torch.nn.functional.linear(hidden, int8))


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class QuantRunTest(ToolTest):
    """One pybench process over GPT2's and Llama's nano generation at
    every quantisation and the refused cases; bench over the same where it
    is found."""

    def test_counters_and_refusals_are_benchs(self):
        out = os.path.join(self.tmp, "py.json")
        proc = subprocess.run([sys.executable, os.path.join(TOOLS, "pybench"), QUANT_FILTER,
                               *QUANT_FLAGS, f"--benchmark_out={out}"],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 1, proc.stderr)  # the refusals are errors
        py = by_name(out)
        quants = ("none", "int8", "int4:g32", "int4:g64", "int8dyn")
        generate = {f"{f}/nano/cpu/generate/batch:1/prompt:4/new:3/fp32"
                    + ("" if q == "none" else f"/{q}") + "/iterations:2/manual_time": (f, q)
                    for f in ("GPT2", "Llama") for q in quants}
        refused = {f"{f}/nano/cpu/train_step/batch:1/seq:8/fp32/{q}/iterations:2/manual_time":
                   TRAINING.format(q) for f in ("GPT2", "Llama") for q in quants[1:]}
        refused.update({f"{f}/nano/cpu/generate/batch:1/prompt:4/new:3/bf16/int8dyn/"
                        "iterations:2/manual_time": INT8DYN_BF16 for f in ("GPT2", "Llama")})
        self.assertEqual(set(py), set(generate) | set(refused))
        for name, words in refused.items():
            self.assertEqual(py[name].get("error_message"), words, name)
        for name, (family, q) in generate.items():
            e = py[name]
            self.assertNotIn("error_occurred", e, e.get("error_message"))
            self.assertEqual(e["weight_bytes"], expected_weight_bytes(family, q), name)
            self.assertAlmostEqual(e["weight_GB/s"] * 1e9 * e["tpot_ms"] * 1e-3,
                                   e["weight_bytes"], delta=e["weight_bytes"] * 1e-9)
            self.assertGreater(e["read_GB/s"], e["weight_GB/s"])
            self.assertEqual("mfu" in e, q != "int8dyn", name)
            # A nano model's decode step, which a CPU's last-level cache holds,
            # has no mbu either, and says why.
            # (bench's own label is held to pybench's below, word for word).
            step = e["read_GB/s"] * 1e9 * e["tpot_ms"] * 1e-3
            held = 0 < step <= last_level_cache()
            self.assertEqual("mbu" in e, not held, name)
            label = e.get("label", "")
            if q == "int8dyn":
                self.assertTrue(label.startswith(NO_MFU), name)
                label = label[len(NO_MFU):].removeprefix("; ")
            if held:
                self.assertRegex(label, r"^mbu left out: a step works over [0-9.]+ KiB, "
                                 r"which the device's [0-9.]+ [KMG]iB cache holds: it reads "
                                 r"from the cache, not from memory$", name)
            else:
                self.assertEqual(label, "", name)
            self.assertFalse(BENCH_ONLY - {"peak_mem"} & set(e), name)
        bench = bench_binary()
        if not bench:
            return
        cpp_out = os.path.join(self.tmp, "bench.json")
        proc = subprocess.run([bench, QUANT_FILTER, *QUANT_FLAGS, f"--benchmark_out={cpp_out}",
                               "--benchmark_out_format=json"],
                              capture_output=True, text=True, timeout=300)
        cpp = by_name(cpp_out)
        self.assertEqual(set(cpp), set(py))
        for name, e in cpp.items():
            mine = py[name]
            self.assertEqual(mine.get("error_message"), e.get("error_message"), name)
            if e.get("error_occurred"):
                continue
            self.assertEqual(set(mine) - {"name", "run_name"},
                             set(e) - {"name", "run_name"} - BENCH_ONLY, name)
            for counter in ("weight_bytes", "kv_cache_bytes", "params", "label"):
                self.assertEqual(mine.get(counter), e.get(counter), f"{name} {counter}")


if __name__ == "__main__":
    unittest.main()
