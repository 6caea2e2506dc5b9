"""tools/vs-llamacpp: the GGUF files it writes (ltb/pysuite/llama_gguf.py),
read back with gguf's own reader against the checkpoint they come from; the
tool end to end against a stand-in llama-bench (fake_llama_bench.py) and
the fake bench's Llama generation (fake_bench.py): what each was asked, the
table's numbers and ratios; bad input."""
import contextlib
import io
import json
import os
import shlex
import shutil
import sys
import tempfile
import unittest
from unittest import mock

import gguf
import numpy as np
import torch

from ltb.base import BadInput
from ltb.commands import vs_llamacpp
from ltb.pysuite import families, llama_fixtures, llama_gguf
from ltb.pysuite.models.decoder import half_frequencies
from tests.helpers import REPO, ToolTest, bench_wrapper, fake_bench

FAKE_LLAMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_llama_bench.py")
NANO = families.options("Llama", "nano")  # V 1000, d 64, d_ff 256, 2 layers, 4/2 heads of 16
Q = gguf.GGMLQuantizationType
TYPES = {"F32": Q.F32, "BF16": Q.BF16, "Q8_0": Q.Q8_0, "Q4_0": Q.Q4_0}
FILE_TYPES = {"F32": 0, "BF16": 32, "Q8_0": 7, "Q4_0": 2}  # llama.h's LLAMA_FTYPE_*


def llama_cpp_names(layers):
    """llama.cpp's name of each tensor (llama-arch.cpp) -> Hugging Face's."""
    names = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight"}
    for i in range(layers):
        hf, cpp = f"model.layers.{i}.", f"blk.{i}."
        names.update({
            cpp + "attn_norm.weight": hf + "input_layernorm.weight",
            cpp + "attn_q.weight": hf + "self_attn.q_proj.weight",
            cpp + "attn_k.weight": hf + "self_attn.k_proj.weight",
            cpp + "attn_v.weight": hf + "self_attn.v_proj.weight",
            cpp + "attn_output.weight": hf + "self_attn.o_proj.weight",
            cpp + "ffn_norm.weight": hf + "post_attention_layernorm.weight",
            cpp + "ffn_gate.weight": hf + "mlp.gate_proj.weight",
            cpp + "ffn_up.weight": hf + "mlp.up_proj.weight",
            cpp + "ffn_down.weight": hf + "mlp.down_proj.weight",
        })
    return names


def heads_of(hf_name):
    if hf_name.endswith("q_proj.weight"):
        return NANO.num_heads
    return NANO.num_kv_heads if hf_name.endswith("k_proj.weight") else None


def unpermute(w, heads):
    """The inverse of convert_hf_to_gguf.py's permutation of q and k."""
    return (w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


class GgufWriterTest(unittest.TestCase):
    """A random Llama/nano checkpoint and its four GGUF files."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.checkpoint, _ = llama_gguf.random_checkpoint(
            "nano", os.path.join(cls._tmp.name, "nano.safetensors"), seed=3)
        cls.files = {t: llama_gguf.write_gguf(cls.checkpoint, "nano", t,
                                              os.path.join(cls._tmp.name, f"nano-{t}.gguf"))[0]
                     for t in TYPES}
        cls.hf, _ = llama_fixtures.read_safetensors(cls.checkpoint)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_the_checkpoint_is_the_sizes_drawn_from_its_seed(self):
        shapes = llama_fixtures.checkpoint_shapes(NANO)
        self.assertEqual(sorted(self.hf), sorted(shapes))
        for name in shapes:
            np.testing.assert_array_equal(
                self.hf[name], llama_fixtures.draw_tensor(shapes, name, 3, 0.02))

    def test_the_tool_offers_the_types_the_writer_writes(self):
        self.assertEqual(vs_llamacpp.GGUF_TYPES, tuple(llama_gguf.TYPES))
        self.assertEqual(tuple(TYPES), tuple(llama_gguf.TYPES))

    def test_metadata_is_the_sizes_llama_architecture(self):
        want = {"general.architecture": "llama", "llama.vocab_size": 1000,
                "llama.context_length": 131072, "llama.embedding_length": 64,
                "llama.block_count": 2, "llama.feed_forward_length": 256,
                "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
                "llama.attention.key_length": 16, "llama.attention.value_length": 16,
                "llama.rope.dimension_count": 16, "llama.rope.freq_base": 500000.0,
                "tokenizer.ggml.model": "no_vocab", "general.quantization_version": 2}
        for t, path in self.files.items():
            fields = gguf.GGUFReader(path).fields
            got = {k: fields[k].contents() for k in want if k in fields}
            self.assertEqual(got, want, t)
            self.assertEqual(fields["general.file_type"].contents(), FILE_TYPES[t])
            self.assertAlmostEqual(
                fields["llama.attention.layer_norm_rms_epsilon"].contents(), 1e-5, delta=1e-12)

    def test_names_shapes_and_types_are_llama_cpps(self):
        names = llama_cpp_names(2)
        for t, path in self.files.items():
            found = tensors(path)
            # A tied head has no output.weight: llama.cpp reads token_embd.
            self.assertEqual(sorted(found), sorted(list(names) + ["rope_freqs.weight"]), t)
            self.assertEqual(list(found["rope_freqs.weight"].shape), [8])
            self.assertEqual(found["rope_freqs.weight"].tensor_type, Q.F32)
            for cpp, hf in names.items():
                # GGUF lists dimensions innermost first.
                self.assertEqual(list(found[cpp].shape), list(self.hf[hf].shape[::-1]), cpp)
                want = Q.F32 if self.hf[hf].ndim == 1 else TYPES[t]
                self.assertEqual(found[cpp].tensor_type, want, f"{t} {cpp}")

    def test_f32_and_bf16_hold_the_checkpoint_once_q_and_k_are_unpermuted(self):
        for t in ("F32", "BF16"):
            found = tensors(self.files[t])
            for cpp, hf in llama_cpp_names(2).items():
                data = found[cpp].data
                if found[cpp].tensor_type == Q.BF16:
                    data = data.view(np.uint16).reshape(self.hf[hf].shape)
                if heads_of(hf):
                    data = unpermute(data, heads_of(hf))
                want = self.hf[hf]
                if found[cpp].tensor_type == Q.BF16:  # as torch rounds, bench's cast
                    want = torch.from_numpy(want.copy()).to(torch.bfloat16).view(torch.int16)
                    want = want.numpy().view(np.uint16)
                np.testing.assert_array_equal(data, want, f"{t} {cpp}")

    def test_an_untied_head_is_its_own_output_tensor(self):
        # Llama/8B's lm_head is its own matrix: llama.cpp reads it as
        # output.weight, and token_embd only as the embedding. (nano, 1B and
        # 3B tie theirs, and their files have no output.weight.)
        o = families.options("Llama", "8B")
        shapes = llama_fixtures.checkpoint_shapes(o)
        plan = {name: (hf, t, shape) for name, hf, t, shape in
                llama_gguf.plan(o, shapes, Q.Q8_0)}
        self.assertEqual(plan["output.weight"], ("lm_head.weight", Q.Q8_0, (128256, 4096)))
        self.assertEqual(plan["token_embd.weight"],
                         ("model.embed_tokens.weight", Q.Q8_0, (128256, 4096)))
        # rope_freqs, token_embd, output_norm, output and 9 a layer
        self.assertEqual(len(plan), 4 + 9 * o.num_layers)
        for size in ("nano", "1B", "3B"):
            o = families.options("Llama", size)
            names = [t[0] for t in llama_gguf.plan(o, llama_fixtures.checkpoint_shapes(o), Q.F32)]
            self.assertNotIn("output.weight", names, size)

    def test_the_permutation_puts_what_rope_rotates_together_side_by_side(self):
        # Hugging Face rotates a head's rows j and j + 16/2 together,
        # llama.cpp's RoPE rows 2j and 2j + 1.
        found = tensors(self.files["F32"])
        for cpp, hf, heads in (("blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight", 4),
                               ("blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight", 2)):
            rows, hs = found[cpp].data, NANO.head_dim
            for h in range(heads):
                for j in range(hs // 2):
                    np.testing.assert_array_equal(rows[h * hs + 2 * j], self.hf[hf][h * hs + j])
                    np.testing.assert_array_equal(rows[h * hs + 2 * j + 1],
                                                  self.hf[hf][h * hs + j + hs // 2])

    def test_q8_0_and_q4_0_are_gguf_quantize_of_the_permuted_matrices(self):
        for t, most in (("Q8_0", 1 / 100), ("Q4_0", 1 / 7)):
            found = tensors(self.files[t])
            for cpp, hf in llama_cpp_names(2).items():
                want = self.hf[hf]
                if want.ndim == 1:
                    np.testing.assert_array_equal(found[cpp].data, want)
                    continue
                if heads_of(hf):
                    want = llama_gguf.permute(want, heads_of(hf))
                np.testing.assert_array_equal(found[cpp].data, gguf.quants.quantize(want, TYPES[t]),
                                              f"{t} {cpp}")
                back = gguf.quants.dequantize(found[cpp].data, TYPES[t])
                self.assertLessEqual(np.abs(back - want).max(), most * np.abs(want).max(), cpp)

    def test_rope_freqs_scale_the_frequencies_as_the_model_does(self):
        factors = tensors(self.files["F32"])["rope_freqs.weight"].data
        base = 1 / NANO.rope_theta ** (np.arange(0, 16, 2, dtype=np.float64) / 16)
        np.testing.assert_allclose(base / factors, half_frequencies(NANO).numpy(),
                                   rtol=1e-6)
        self.assertEqual(factors[0], 1)  # the fastest rotation is not scaled
        self.assertEqual(factors[-1], NANO.rope_factor)  # the slowest by the factor

    def test_a_file_from_the_same_source_is_kept_and_another_rewritten(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "copy.gguf")
            shutil.copy(self.files["Q4_0"], copy)
            self.assertEqual(llama_gguf.write_gguf(self.checkpoint, "nano", "Q4_0", copy),
                             (copy, False))
            self.assertEqual(llama_gguf.write_gguf(self.checkpoint, "nano", "Q4_0", copy,
                                                   source="elsewhere"), (copy, True))
            self.assertTrue(llama_gguf.gguf_source(copy).startswith("elsewhere as Q4_0;"))
            self.assertEqual(llama_gguf.random_checkpoint("nano", self.checkpoint, seed=3),
                             (self.checkpoint, False))


# The fake bench's Llama rates (pp 100, tg 10; x2 bf16; x3, x4, x5 int8,
# int8dyn, int4; x1.5 onednn; x1, 1.01, 1.02 over 3 repetitions) beside the
# stand-in llama-bench's (pp 30, tg 3; x1, 2, 3, 4 F32, BF16, Q8_0, Q4_0;
# x0.98, 1, 1.02): (llama.cpp, its pp, its tg, bench, its pp, its tg, the
# ratios), bench's fastest tg beside each type in bold.
TABLE = [
    ["F32", "30.00 ± 0.60", "3.00 ± 0.06", "fp32", "101.00 ± 1.00", "10.10 ± 0.10",
     "3.37x", "3.37x"],
    ["F32", "30.00 ± 0.60", "3.00 ± 0.06", "**fp32/onednn**", "151.50 ± 1.50",
     "15.15 ± 0.15", "5.05x", "5.05x"],
    ["BF16", "60.00 ± 1.20", "6.00 ± 0.12", "**bf16**", "202.00 ± 2.00", "20.20 ± 0.20",
     "3.37x", "3.37x"],
    ["Q8_0", "90.00 ± 1.80", "9.00 ± 0.18", "fp32/int8", "303.00 ± 3.00", "30.30 ± 0.30",
     "3.37x", "3.37x"],
    ["Q8_0", "90.00 ± 1.80", "9.00 ± 0.18", "**bf16/int8**", "606.00 ± 6.00", "60.60 ± 0.60",
     "6.73x", "6.73x"],
    ["Q8_0", "90.00 ± 1.80", "9.00 ± 0.18", "fp32/int8dyn", "404.00 ± 4.00", "40.40 ± 0.40",
     "4.49x", "4.49x"],
    ["Q8_0", "90.00 ± 1.80", "9.00 ± 0.18", "bf16/int8dyn", "—", "—", "—", "—"],
    ["Q4_0", "120.00 ± 2.40", "12.00 ± 0.24", "fp32/int4:g32", "505.00 ± 5.00", "50.50 ± 0.50",
     "4.21x", "4.21x"],
    ["Q4_0", "120.00 ± 2.40", "12.00 ± 0.24", "**bf16/int4:g32**", "1010.00 ± 10.00",
     "101.00 ± 1.00", "8.42x", "8.42x"],
]


def table_rows(stdout):
    """The Markdown table's rows as cells, the llama.cpp cell without its size."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")][1:]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [[r[0].split(" (")[0]] + r[1:] for r in rows]


def flags(args):
    """{flag: value} of --flag=value arguments, and {-x: [values]} of llama-bench's."""
    out = {}
    for a in args:
        if a.startswith("--"):
            key, _, value = a.partition("=")
            out[key] = value
    for key, value in zip(args, args[1:]):
        if key.startswith("-") and not key.startswith("--"):
            out.setdefault(key, []).append(value)
    return out


class VsLlamacppTest(ToolTest):
    def setUp(self):
        super().setUp()
        self.out = os.path.join(self.tmp, "out")
        self.bench_log = os.path.join(self.tmp, "bench.log")
        self.llama_log = os.path.join(self.tmp, "llama.log")
        self.llama = bench_wrapper(os.path.join(self.tmp, "llama-bench"),
                                   f"{shlex.quote(sys.executable)} {shlex.quote(FAKE_LLAMA)}",
                                   FAKE_LLAMA_LOG=self.llama_log)
        self.bench = fake_bench(os.path.join(self.tmp, "bench"), FAKE_BENCH_LLAMA=1,
                                FAKE_BENCH_QUANT=1, FAKE_BENCH_LOG=self.bench_log,
                                FAKE_BENCH_ERROR="bf16/int8dyn")

    def logged(self, path):
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f]

    def measured(self):
        """The arguments of each bench process that measured."""
        return [args for args in self.logged(self.bench_log)
                if "--benchmark_list_tests" not in args]

    def main(self, *argv, env=None):
        """The tool's main in this process: (stdout, stderr)."""
        out, err = io.StringIO(), io.StringIO()
        with mock.patch.dict(os.environ, env or {}), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            self.assertEqual(vs_llamacpp.vs_llamacpp_main(list(argv)), 0)
        return out.getvalue(), err.getvalue()

    def args(self, *more, bench=None):
        return ["--llama-bench", self.llama, "--bench", bench or self.bench, "--size", "nano",
                "--prompt", "8", "--new-tokens", "4", "--threads", "2", "--out", self.out,
                *more]

    def test_the_table_pairs_each_llama_cpp_type_with_its_bench_rows(self):
        save = os.path.join(self.tmp, "vs.json")
        proc = self.run_tool("vs-llamacpp", *self.args("--depth", "16", "--save", save,
                                                       "--benchmark_min_time=0.01s"))
        self.assertExit(proc, 0)
        self.assertEqual(table_rows(proc.stdout), TABLE)
        self.assertIn("| llama.cpp | pp8 @ d16 t/s | tg4 @ d16 t/s | bench | pp8 @ d16 t/s | "
                      "tg4 @ d24 t/s | pp bench/llama.cpp | tg bench/llama.cpp |", proc.stdout)
        self.assertIn("- Q8_0 beside bench bf16/int8dyn: fake: this case failed", proc.stdout)

        # One llama-bench process measured the four files at the settings.
        (called,) = self.logged(self.llama_log)
        got = flags(called)
        stem = os.path.join(self.out, "llama-nano-seed0")
        self.assertEqual(got["-m"], [f"{stem}-{t}.gguf" for t in TYPES])
        self.assertEqual({k: got[k] for k in ("-p", "-n", "-d", "-t", "-r", "-o", "-ngl")},
                         {"-p": ["8"], "-n": ["4"], "-d": ["16"], "-t": ["2"], "-r": ["3"],
                          "-o": ["json"], "-ngl": ["0"]})
        # bench ran the checkpoint the files came from, once plain, once
        # through oneDNN's linear and once quantised, generating one token
        # more than llama-bench's -n.
        listed = [args for args in self.logged(self.bench_log) if "--benchmark_list_tests" in args]
        self.assertEqual(len(listed), 3)  # first, to stop early on arguments it refuses
        plain, onednn, quantised = [flags(args[1:]) for args in self.measured()]
        for got in (plain, onednn, quantised):
            self.assertEqual({k: got[k] for k in (
                "--batch", "--prompt", "--new_tokens", "--depth", "--threads", "--weights",
                "--benchmark_repetitions", "--benchmark_filter", "--benchmark_min_time")},
                {"--batch": "1", "--prompt": "8", "--new_tokens": "5", "--depth": "16", "--threads": "2",
                 "--weights": f"{stem}.safetensors", "--benchmark_repetitions": "3",
                 "--benchmark_filter": "^Llama/nano/cpu/generate/",
                 "--benchmark_min_time": "0.01s"})
        self.assertEqual(plain["--dtype"], "fp32,bf16")
        self.assertNotIn("--quant", plain)
        self.assertNotIn("--quant_group", plain)
        self.assertNotIn("--cpu_linear", plain)
        self.assertEqual((onednn["--dtype"], onednn["--cpu_linear"]), ("fp32", "onednn"))
        self.assertNotIn("--quant", onednn)
        self.assertNotIn("--cpu_linear", quantised)
        self.assertEqual((quantised["--dtype"], quantised["--quant"], quantised["--quant_group"]),
                         ("fp32,bf16", "int8,int8dyn,int4", "32"))
        with open(save) as f:
            saved = json.load(f)
        self.assertEqual(len(saved["llama_bench"]), 8)
        self.assertEqual([r["bench"] for r in saved["table"]], [r[3].strip("*") for r in TABLE])
        self.assertEqual([r["fastest"] for r in saved["table"]],
                         [r[3].startswith("**") for r in TABLE])
        self.assertTrue(saved["table"][1]["name"].endswith("/fp32/onednn/weights:llama-nano-seed0"),
                        saved["table"][1]["name"])
        self.assertAlmostEqual(saved["table"][0]["pp_ratio"], 101 / 30)

    def test_a_bench_without_quant_measures_f32_and_bf16_of_a_checkpoint_given(self):
        weights = os.path.join(REPO, "test", "models", "fixtures", "llama-nano")
        older = fake_bench(os.path.join(self.tmp, "older"), FAKE_BENCH_LLAMA=1,
                           FAKE_BENCH_LOG=self.bench_log, FAKE_BENCH_NO_CPU_LINEAR=1)
        out, err = self.main(*self.args("--weights", weights, "--types", "BF16,F32,Q4_0",
                                        bench=older))
        none = ["—"] * 4
        # The one measured row beside F32 is its fastest.
        self.assertEqual(table_rows(out), [TABLE[0][:3] + ["**fp32**"] + TABLE[0][4:],
                                           TABLE[1][:3] + ["fp32/onednn"] + none, TABLE[2],
                                           TABLE[7][:4] + none,
                                           TABLE[8][:3] + ["bf16/int4:g32"] + none])
        self.assertIn("- Q4_0 beside bench bf16/int4:g32: this bench has no --quant", out)
        self.assertIn("- F32 beside bench fp32/onednn: this bench has no --cpu_linear", out)
        (called,) = self.measured()
        self.assertIn(f"--weights={weights}", called)
        self.assertIn("--dtype=fp32,bf16", called)
        self.assertFalse([a for a in called if a.startswith("--quant")])
        (called,) = self.logged(self.llama_log)
        files = [os.path.join(self.out, f"llama-nano-{t}.gguf") for t in ("F32", "BF16", "Q4_0")]
        self.assertEqual(flags(called)["-m"], files)
        self.assertNotIn("-d", called)  # depth 0: no -d, which older llama-bench lacks
        checkpoint, _ = llama_fixtures.read_safetensors(os.path.join(weights, "model.safetensors"))
        np.testing.assert_array_equal(tensors(files[0])["token_embd.weight"].data,
                                      checkpoint["model.embed_tokens.weight"])

        # Again: the files written from the same checkpoint are kept.
        _, err = self.main(*self.args("--weights", weights, "--types", "F32", bench=older))
        self.assertIn(f"kept {files[0]}", err)
        self.assertNotIn("wrote", err)

    def test_the_mark_follows_the_fastest_decode_not_the_order_of_the_rows(self):
        class Measured:
            def __init__(self, pp, tg):
                self.rates = {"pp_tok/s": pp, "tg_tok/s": tg}

            def values(self, counter):
                return self.rates[counter]

        args = vs_llamacpp.parse_args(self.args("--types", "F32,Q8_0", "--activations",
                                                "fp32"))[0]
        record = {"avg_ts": 1.0, "stddev_ts": 0.0}
        found = {(t, test): record for t in ("F32", "Q8_0") for test in ("pp", "tg")}
        # at::linear decodes faster than oneDNN here though its prompt is
        # slower; beside Q8_0 the faster prompt is int8's, the faster decode
        # int8dyn's.
        measured = {("fp32", ""): (Measured([10.0], [4.0, 5.0]), "a", None),
                    ("fp32", "onednn"): (Measured([20.0], [4.4]), "b", None),
                    ("fp32", "int8"): (Measured([30.0], [1.0]), "c", None),
                    ("fp32", "int8dyn"): (Measured([5.0], [3.0]), "d", None)}
        rows = vs_llamacpp.table(args, found, measured)
        self.assertEqual([(r["bench"], r["fastest"]) for r in rows],
                         [("fp32", True), ("fp32/onednn", False), ("fp32/int8", False),
                          ("fp32/int8dyn", True)])
        # A type none of whose rows was measured has no mark.
        rows = vs_llamacpp.table(args, found, {("fp32", "int8"): (None, "c", "failed")})
        self.assertEqual([r["fastest"] for r in rows], [False] * 4)
        self.assertNotIn("**", vs_llamacpp.markdown(args, rows))
        self.assertIn("| **fp32** |", vs_llamacpp.markdown(
            args, vs_llamacpp.table(args, found, measured)))

    def test_a_repetition_that_failed_is_named_beside_the_others_mean(self):
        name = "Llama/nano/cpu/generate/batch:1/prompt:8/new:5/fp32/manual_time"
        reps = [{"name": name, "run_name": name, "run_type": "iteration", "repetitions": 3,
                 "repetition_index": i, "iterations": 1, "real_time": 1.0, "time_unit": "ms",
                 "pp_tok/s": pp, "tg_tok/s": pp / 10} for i, pp in enumerate((100.0, 110.0))]
        reps.append({"name": name, "run_name": name, "run_type": "iteration", "repetitions": 3,
                     "repetition_index": 2, "error_occurred": True,
                     "error_message": "out of memory", "real_time": 0, "time_unit": "ms"})
        measured = vs_llamacpp.bench_results([{"context": {}, "benchmarks": reps}], {})
        args = vs_llamacpp.parse_args(self.args("--types", "F32"))[0]
        record = {"avg_ts": 50.0, "stddev_ts": 0.0}
        rows = vs_llamacpp.table(args, {("F32", "pp"): record, ("F32", "tg"): record}, measured)
        self.assertEqual(rows[0]["bench_pp"][0], 105.0)
        self.assertEqual(rows[0]["error"], "1 of 3 repetitions failed (out of memory): its "
                                           "cells are the mean of the other 2")

    def test_bench_keys_tell_the_paths_apart(self):
        for name, key in [
                ("Llama/1B/cpu/generate/batch:1/prompt:32/new:17/fp32/weights:x", ("fp32", "")),
                ("Llama/1B/cpu/generate/batch:1/prompt:32/new:17/fp32/onednn/weights:x",
                 ("fp32", "onednn")),
                ("Llama/1B/cpu/generate/batch:1/prompt:32/new:17/bf16/int4:g32/manual_time",
                 ("bf16", "int4:g32")),
                ("Llama/1B/cpu/generate/batch:1/prompt:32/new:17/fp32/int8dyn", ("fp32", "int8dyn"))]:
            self.assertEqual(vs_llamacpp.bench_key(name), key, name)

    def test_bad_input_is_named_with_the_valid_choices(self):
        cases = [
            (["--types", "F32,Q5_K"], r"unknown --types value 'Q5_K'; valid: F32, BF16, Q8_0, Q4_0"),
            (["--activations", "fp16"], r"unknown --activations value 'fp16'; valid: fp32, bf16"),
            (["--size", "2B"], r"unknown Llama size '2B'; valid: nano, 1B, 3B, 8B"),
            (["--new-tokens", "0"], r"--new-tokens must be at least 1"),
            (["--weights", os.path.join(self.tmp, "none.safetensors")],
             r"--weights .*none.safetensors: no such file or folder"),
            (["--llama-bench", os.path.join(self.tmp, "none")],
             r"--llama-bench .*none: no executable there; to build one .*pip download"),
            (["--bench", os.path.join(self.tmp, "none")], r"none: no bench binary there"),
        ]
        for more, message in cases:
            with self.subTest(more=more), self.assertRaisesRegex(BadInput, message):
                self.main(*self.args("--types", "F32"), *more)
        with self.assertRaisesRegex(BadInput, r"tensor 'model.embed_tokens.weight' has shape "
                                    r"\[1000, 64\], but Llama/1B needs \[128256, 2048\]"):
            self.main(*self.args("--types", "F32", "--size", "1B", "--weights",
                                 os.path.join(REPO, "test", "models", "fixtures", "llama-nano")))
        with self.assertRaisesRegex(BadInput, r"llama-bench exited with code 1: .*failed to load "
                                    r"model '.*llama-nano-seed0-F32.gguf'"):
            self.main(*self.args("--types", "F32"), env={"FAKE_LLAMA_MODE": "fail"})
        with self.assertRaisesRegex(BadInput, r"llama-bench printed no JSON array"):
            self.main(*self.args("--types", "F32"), env={"FAKE_LLAMA_MODE": "text"})
        self.assertEqual(self.measured(), [])  # bench measured nothing

    def test_a_llama_bench_with_a_gpu_backend_is_refused(self):
        """At -ngl 0 a GPU build still runs a prompt's matrix products on the
        GPU (ggml's op offload, from a batch of 32 tokens on CUDA): its pp
        would be the GPU's beside bench's /cpu/ rows."""
        for backends in ("CUDA", "BLAS,Vulkan"):
            with self.subTest(backends=backends), self.assertRaisesRegex(
                    BadInput, f"llama-bench .* was built with {backends.split(',')[-1]}, "
                    r"which runs a prompt's matrix products on the GPU even at -ngl 0 .*"
                    r"use a llama-bench built for the CPU alone"):
                self.main(*self.args("--types", "F32"), env={"FAKE_LLAMA_BACKENDS": backends})
        self.assertEqual(self.measured(), [])  # bench measured nothing
        # BLAS (OpenBLAS, Accelerate) computes on the CPU.
        out, _ = self.main(*self.args("--types", "BF16"), env={"FAKE_LLAMA_BACKENDS": "BLAS"})
        self.assertEqual(table_rows(out), [TABLE[2]])

    def test_a_batch_of_sequences_is_refused(self):
        """llama-bench's pp and tg time one sequence; bench at --batch=4 would
        generate four at once, four times the tokens a decode step, and its
        tg_tok/s would stand beside llama.cpp's one-sequence rate."""
        proc = self.run_tool("vs-llamacpp", *self.args("--types", "F32", "--batch=4"))
        self.assertExit(proc, 2)
        self.assertIn("--batch is the vs-llamacpp's own: llama-bench's pp and tg run one "
                      "sequence", proc.stderr)
        self.assertEqual(self.measured(), [])

    def test_aggregates_alone_are_refused(self):
        """bench's JSON with its aggregates alone has no repetition whose
        tokens/s to average: every row would be empty, for a wrong reason."""
        for flag in ("--benchmark_report_aggregates_only=true",
                     "--benchmark_display_aggregates_only=true"):
            proc = self.run_tool("vs-llamacpp", *self.args("--types", "F32", flag))
            self.assertExit(proc, 2)
            self.assertIn(f"{flag.split('=')[0]} is the vs-llamacpp's own: it averages "
                          "bench's repetitions", proc.stderr)
        self.assertEqual(self.measured(), [])

    def test_without_llama_bench_it_says_how_to_build_one(self):
        proc = self.run_tool("vs-llamacpp", "--size", "nano", "--bench", self.bench)
        self.assertExit(proc, 2)
        self.assertIn("needs --llama-bench PATH", proc.stderr)
        self.assertIn("pip download --no-binary :all: --no-deps llama-cpp-python", proc.stderr)
        self.assertIn("cmake --build build --target llama-bench", proc.stderr)


PATHS = os.path.join(REPO, "docs", "results", "llama-1B-cpu-paths")


class DocsTableTest(unittest.TestCase):
    """docs/models.md's table of Llama/1B's CPU decode paths, recomputed from
    the stored files it names: every number in it is a mean of theirs."""

    @staticmethod
    def docs_rows():
        with open(os.path.join(REPO, "docs", "models.md")) as f:
            text = f.read()
        section = text[text.index("### The fastest decode on a CPU"):]
        section = section[:section.index("\n## ")]
        rows = {}
        for line in section.splitlines():
            cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
            if len(cells) == 6 and cells[2][:1].isdigit():
                rows[cells[1]] = cells[2:]
        return rows

    @staticmethod
    def means(doc):
        """{bench row label: its mean aggregate} of one bench result file."""
        out = {}
        for e in doc["benchmarks"]:
            if e.get("aggregate_name") == "mean":
                dtype, quant = vs_llamacpp.bench_key(e["name"])
                out[f"{dtype}/{quant}" if quant else dtype] = e
        return out

    def test_the_docs_rows_are_the_stored_files_means(self):
        rows = self.docs_rows()
        bench, llama = {}, {}
        for name in sorted(os.listdir(PATHS)):
            with open(os.path.join(PATHS, name)) as f:
                doc = json.load(f)
            for part in doc["bench"] if "bench" in doc else [doc]:
                bench.update(self.means(part))
            for r in doc.get("llama_bench", []):  # llama-bench's records
                gguf_type = r["model_filename"].rsplit("-", 1)[1].removesuffix(".gguf")
                test = "pp" if r["n_gen"] == 0 else "tg"
                llama.setdefault(gguf_type, {})[test] = r["avg_ts"]
        labels = {
            "bench `at::linear` (MKL)": "fp32", "bench `--cpu_linear=onednn`": "fp32/onednn",
            "bench `--dtype=bf16`": "bf16",
            "bench fp32 `--quant=int8` (`_weight_int8pack_mm`)": "fp32/int8",
            "bench bf16 `--quant=int8`": "bf16/int8",
            "bench fp32 `--quant=int8dyn` (FBGEMM)": "fp32/int8dyn",
            "bench bf16 `--quant=int4 --quant_group=32`": "bf16/int4:g32"}
        self.assertEqual(len(rows), len(labels) + 4, sorted(rows))
        for label, key in labels.items():
            e = bench[key]
            decode, prompt, mbu, gb = rows[label]
            self.assertEqual(decode, f"{e['tg_tok/s']:.2f}", label)
            self.assertEqual(prompt, f"{e['pp_tok/s']:.1f}", label)
            self.assertEqual(mbu, f"{e['mbu']:.2f}", label)
            self.assertEqual(gb, f"{e['weight_bytes'] / 1e9:.2f} GB", label)
        for t in ("F32", "BF16", "Q8_0", "Q4_0"):
            decode, prompt, _, _ = rows[f"llama.cpp {t}"]
            self.assertEqual(decode, f"{llama[t]['tg']:.2f}", t)
            self.assertEqual(prompt, f"{llama[t]['pp']:.1f}", t)


if __name__ == "__main__":
    unittest.main()
