"""ltb.pysuite.families: its size tables are the C++ ones (every option of
every size, as bench --list_families prints them), every size has the card's parameter count, the
inference inputs have the benchmark's shapes, and each family's nano
forward_module exports with torch.export. Parity of the computation itself
is test/models/parity_test.cc's."""
import dataclasses
import json
import os
import subprocess
import unittest

from ltb.pysuite import facts
from tests.helpers import built_bench

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TOOLS)
MODELS = os.path.join(REPO, "lib", "models")

try:
    import torch
except ImportError:  # the tools' tests also run where torch is not installed
    torch = None

if torch is not None:
    from ltb.pysuite import families as ltb_models

# Family -> the file stem of its size table and options struct, in lib/models
# and in ltb/pysuite/models alike (the decoder families: their rows).
SOURCES = {"Transformer": "decoder_family", "GPT2": "decoder_family",
           "Llama": "decoder_family", "ResNet": "resnet", "CNN": "cnn",
           "Encoder": "encoder", "Whisper": "whisper", "EncDec": "encdec"}


def cpp_cards(family):
    """[(name, {option: value}, card_params)] of the C++ size table, in
    order, as bench --list_families prints it (lists as tuples, as the
    Python options hold them)."""
    return [(c["name"],
             {k: tuple(v) if isinstance(v, list) else v for k, v in c["options"].items()},
             c["card_params"])
            for c in facts.family(family)["size_cards"]]


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class SizeTableTest(unittest.TestCase):
    def test_the_families_are_the_cpp_ones(self):
        self.assertEqual(set(ltb_models.FAMILIES), set(SOURCES))

    def test_sizes_and_every_option_equal_the_cpp_tables(self):
        # A changed C++ default changes the options of the sizes that keep
        # it, so the Python defaults are checked through every size.
        for family in ltb_models.FAMILIES:
            with self.subTest(family=family):
                cpp = cpp_cards(family)
                self.assertTrue(cpp, f"bench prints no size table for {family}")
                self.assertEqual(ltb_models.sizes(family), tuple(name for name, _, _ in cpp))
                for name, values, card in cpp:
                    entry = ltb_models.size_entry(family, name)
                    # fused_attention switches the C++ attention's
                    # implementation, not what it computes; the Python
                    # models have one implementation.
                    values.pop("fused_attention", None)
                    got = {k: getattr(entry.options, k, None) for k in values}
                    self.assertEqual(got, values, f"{family}/{name}")
                    self.assertEqual(entry.card_params, card, f"{family}/{name}")

    def test_options_have_the_cpp_fields_in_order(self):
        for family in ltb_models.FAMILIES:
            with self.subTest(family=family):
                fields = [f for f in cpp_cards(family)[0][1] if f != "fused_attention"]
                options = type(ltb_models.size_entry(family, "nano").options)
                self.assertEqual([f.name for f in options.__dataclass_fields__.values()],
                                 fields)

    def test_every_size_has_the_card_parameter_count(self):
        for family in ltb_models.FAMILIES:
            for name, _, card in cpp_cards(family):
                with self.subTest(family=family, size=name):
                    with torch.device("meta"):  # shapes only: xl sizes are billions
                        model = ltb_models.build(family, name)
                    self.assertEqual(ltb_models.param_count(model), card)

    def test_an_unknown_size_names_the_valid_ones(self):
        with self.assertRaisesRegex(ValueError, "valid: nano, small"):
            ltb_models.build("Transformer", "huge")


class FactsTest(unittest.TestCase):
    """bench's family facts (bench --list_families), which the Python suite
    reads from ltb/pysuite/families.json: the file is what the built bench
    prints, and every C++ family has its Python twin with bench's sizes."""

    def test_the_committed_facts_are_what_bench_prints(self):
        bench = built_bench()
        if not os.access(bench, os.X_OK):
            self.skipTest(f"no bench binary at {bench}")
        proc = subprocess.run([bench, "--list_families"], capture_output=True, text=True,
                              timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        printed = json.loads(proc.stdout)
        self.assertEqual(printed, facts.load(),
                         "bench's families changed: run build/bench/bench --list_families "
                         "> tools/ltb/pysuite/families.json")

    def test_every_cpp_family_has_a_python_twin(self):
        cpp = {f["name"] for f in facts.load()["families"]} - {"Ops"}
        self.assertEqual(cpp, set(SOURCES), "a family of lib/models/ not named in SOURCES")
        for family, stem in SOURCES.items():
            self.assertTrue(os.path.isfile(os.path.join(MODELS, f"{stem}.cc")), stem)
            self.assertTrue(os.path.isfile(os.path.join(TOOLS, "ltb", "pysuite", "models",
                                                        f"{stem}.py")),
                            f"{family} has no Python twin ltb/pysuite/models/{stem}.py")

    @unittest.skipIf(torch is None, "needs torch (the project's venv)")
    def test_the_python_families_have_benchs_sizes_and_parameter_counts(self):
        self.assertEqual(set(ltb_models.FAMILIES), set(facts.names()) - {"Ops"})
        for family in ltb_models.FAMILIES:
            sizes = facts.family(family)["sizes"]
            self.assertEqual(ltb_models.sizes(family), tuple(s["name"] for s in sizes), family)
            for s in sizes:
                self.assertEqual(ltb_models.size_entry(family, s["name"]).card_params,
                                 s["params"], f"{family}/{s['name']}")

    def test_the_settings_pybench_reads(self):
        gpt2 = facts.settings("GPT2")
        self.assertEqual(gpt2["phases"], ("forward", "forward_backward", "train_step",
                                          "generate"))
        self.assertEqual((gpt2["batch"], gpt2["seqs"], gpt2["cpu_seqs"]), (1, (512,), (64,)))
        self.assertEqual(facts.settings("Whisper")["fixed_prompt"], 4)
        # What each phase's names carry: the sweep reads it.
        self.assertEqual(facts.settings("Whisper")["shapes"],
                         {"encode": "batch", "generate": "generate", "transcribe": "generate"})
        self.assertEqual(set(gpt2["shapes"].values()), {"sequence", "generate"})
        self.assertNotIn("fixed_prompt", facts.settings("Llama"))
        with self.assertRaisesRegex(KeyError, "bench has no family 'Gpt3'; it has .*GPT2"):
            facts.family("Gpt3")


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class ForwardInputsTest(unittest.TestCase):
    def test_shapes_and_dtypes(self):
        ids, floats = torch.int64, torch.bfloat16
        shapes = {  # batch 2, seq 8: as the C++ Build* functions pass them
            "Transformer": [((2, 8), ids)],
            "GPT2": [((2, 8), ids)],
            "Llama": [((2, 8), ids)],
            "ResNet": [((2, 3, 224, 224), floats)],
            "CNN": [((2, 3, 32, 32), floats)],
            "Encoder": [((8, 2, 64), floats)],  # (T, B, d)
            "Whisper": [((2, 80, 3000), floats)],
            "EncDec": [((2, 8), ids), ((2, 7), ids)],  # src, tgt without its last
        }
        for family, want in shapes.items():
            with self.subTest(family=family):
                inputs = ltb_models.forward_inputs(family, "nano", 2, 8, dtype=torch.bfloat16)
                self.assertEqual([(tuple(t.shape), t.dtype) for t in inputs], want)

    def test_token_ids_are_in_the_vocabulary(self):
        (ids,) = ltb_models.forward_inputs("GPT2", "nano", 4, 64)
        self.assertGreaterEqual(ids.min().item(), 0)
        self.assertLess(ids.max().item(), 1000)

    def test_a_generator_makes_them_reproducible(self):
        draw = lambda: ltb_models.forward_inputs(  # noqa: E731
            "EncDec", "nano", 2, 8, generator=torch.Generator().manual_seed(3))
        for a, b in zip(draw(), draw()):
            self.assertTrue(torch.equal(a, b))

    def test_the_forward_module_takes_them(self):
        for family in ("Transformer", "CNN", "EncDec"):
            with self.subTest(family=family):
                model = ltb_models.forward_module(family, "nano", seq=8)
                self.assertFalse(model.training)
                with torch.inference_mode():
                    out = model(*ltb_models.forward_inputs(family, "nano", 2, 8))
                self.assertEqual(out.shape[0], 2)


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
@unittest.skipIf(torch is None, "needs torch")
class LlamaRotaryTest(unittest.TestCase):
    def test_frequencies_stay_fp32_when_the_model_is_cast(self):
        # As bench's LlamaRotary: cast to bf16, the model keeps fp32
        # frequencies, so position 2047's cos and sin are rounded once.
        from ltb.pysuite.models import decoder
        o = ltb_models.options("Llama", "1B")
        rope = decoder.HalfRotary(o).to(torch.bfloat16)
        self.assertEqual(rope.inv_freq.dtype, torch.float32)
        self.assertTrue(torch.equal(rope.inv_freq, decoder.half_frequencies(o)))
        positions = torch.arange(2048)
        cos, sin = rope(positions, torch.bfloat16)
        angles = torch.outer(positions.double(), decoder.half_frequencies(o).double())
        self.assertLess((cos.double() - angles.cos()).abs().max().item(), 4e-3)
        self.assertLess((sin.double() - angles.sin()).abs().max().item(), 4e-3)


@unittest.skipIf(torch is None, "needs torch")
class DecoderTest(unittest.TestCase):
    """models/decoder.py: a setting outside its choices is refused by name,
    and a family is a row: Qwen2's biases on q, k and v alone."""

    def test_an_unknown_setting_names_the_valid_ones(self):
        from ltb.pysuite.models import decoder
        o = ltb_models.options("Llama", "nano")
        for field, want in (("norm", "unknown norm 'batch'; valid: layer, rms"),
                            ("positions", "unknown positions 'batch'; valid: learned, "
                                          "rope_pairs, rope_half, none"),
                            ("mlp", "unknown mlp 'batch'; valid: gelu_tanh, swiglu, gelu")):
            with self.subTest(field=field), self.assertRaisesRegex(ValueError, want):
                dataclasses.replace(o, **{field: "batch"})

    def test_qkv_bias_is_on_q_k_and_v_only(self):
        from ltb.pysuite.models import decoder, decoder_family
        o = dataclasses.replace(ltb_models.options("Llama", "nano"), qkv_bias=True,
                                rope_factor=0.0)
        model = decoder.Decoder(o, decoder_family.LLAMA_NAMES)
        biases = {n: p for n, p in model.named_parameters() if n.endswith(".bias")}
        self.assertEqual(sorted(biases), [f"model.layers.{i}.self_attn.{m}_proj.bias"
                                          for i in range(2) for m in "kqv"])
        self.assertEqual(ltb_models.param_count(model), 187_200 + 2 * (64 + 32 + 32))
        self.assertTrue(all(not b.any() for b in biases.values()))  # drawn as Hugging Face's
        # No Llama 3 scaling: theta^(-2i/d) itself.
        plain = 1.0 / (500000.0 ** (torch.arange(0, 16, 2).float() / 16))
        self.assertTrue(torch.equal(model.model.rotary_emb.inv_freq, plain))
        with torch.no_grad():
            self.assertEqual(model(torch.zeros(1, 5, dtype=torch.int64)).shape, (1, 5, 1000))


    def test_built_for_a_checkpoint_a_decoder_draws_nothing(self):
        # As C++'s EveryDecoder.BuiltForACheckpointItDrawsNothing: whichever
        # way the row draws, the generator is left as seeded, and the
        # parameters are the drawn model's by name and shape.
        for family in ("Transformer", "GPT2", "Llama"):
            with self.subTest(family=family):
                torch.manual_seed(11)
                seeded = torch.get_rng_state()
                undrawn = ltb_models.build(family, "nano", draw=False)
                self.assertTrue(torch.equal(torch.get_rng_state(), seeded))
                drawn = ltb_models.build(family, "nano")
                self.assertEqual([(n, p.shape) for n, p in undrawn.named_parameters()],
                                 [(n, p.shape) for n, p in drawn.named_parameters()])

class ExportTest(unittest.TestCase):
    def test_each_nano_forward_module_exports(self):
        for family in ltb_models.FAMILIES:
            with self.subTest(family=family):
                model = ltb_models.forward_module(family, "nano", seq=16)
                inputs = ltb_models.forward_inputs(family, "nano", 1, 16)
                exported = torch.export.export(model, inputs)
                with torch.no_grad():
                    want = model(*inputs)
                    got = exported.module()(*inputs)
                torch.testing.assert_close(got, want)


if __name__ == "__main__":
    unittest.main()
