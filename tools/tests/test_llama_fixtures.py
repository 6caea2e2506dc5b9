"""The Llama fixtures (test/models/fixtures, written by tools/llama-fixtures
with transformers): the checkpoint transformers saved loads into
ltb.pysuite's Llama by its names, which then computes transformers'
logits and greedy tokens; and the tool writes the same tensors again without
transformers. None of it needs transformers."""
import hashlib
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

from tests.helpers import REPO, ToolTest, built_bench

from ltb.pysuite import families as ltb_models

FIXTURES = os.path.join(REPO, "test", "models", "fixtures")
NANO_DIR = os.path.join(FIXTURES, "llama-nano")
INV_FREQ = "model.rotary_emb.inv_freq"  # computed, never in a checkpoint


def load_tool():
    from ltb.pysuite import llama_fixtures
    return llama_fixtures


tool = load_tool()


def expected(shape):
    return tool.read_safetensors(os.path.join(FIXTURES, f"llama-{shape}.expected.safetensors"))


def nano_checkpoint():
    return tool.read_safetensors(os.path.join(NANO_DIR, "model.safetensors"))[0]


def nano_mirror():
    """ltb_models' Llama nano with the committed weights, loaded strictly."""
    model = ltb_models.build("Llama", "nano").eval()
    state = {name: torch.from_numpy(a.copy()) for name, a in nano_checkpoint().items()}
    state[INV_FREQ] = model.model.rotary_emb.inv_freq
    model.load_state_dict(state, strict=True)
    return model


class CheckpointTest(unittest.TestCase):
    def test_names_and_shapes_are_the_mirrors(self):
        tensors = nano_checkpoint()
        model = ltb_models.build("Llama", "nano")
        want = {name: tuple(t.shape) for name, t in model.state_dict().items()
                if name != INV_FREQ}
        self.assertEqual({name: a.shape for name, a in tensors.items()}, want)
        # The head is tied: transformers saves no lm_head.weight.
        self.assertEqual(len(tensors), 2 + 9 * 2)
        self.assertNotIn("lm_head.weight", tensors)
        self.assertTrue(all(a.dtype == np.float32 for a in tensors.values()))
        self.assertEqual(sum(a.size for a in tensors.values()),
                         ltb_models.size_entry("Llama", "nano").card_params)
        nano_mirror()  # strict

    def test_config_is_the_cpp_models(self):
        with open(os.path.join(NANO_DIR, "config.json")) as f:
            saved = json.load(f)
        config = tool.hf_config("nano")
        self.assertEqual({k: saved.get(k) for k in config}, config)
        self.assertEqual(saved["transformers_version"], expected("nano")[1]["transformers_version"])
        for shape in tool.SHAPES:
            self.assertEqual(json.loads(expected(shape)[1]["config"]), tool.hf_config(shape))
        o = ltb_models.options("Llama", "1B")
        self.assertEqual(tool.shape_options("1B-2L"), ltb_models.options("Llama", "1B",
                                                                          num_layers=2))
        self.assertEqual((o.rope_theta, o.rope_factor, o.low_freq_factor, o.high_freq_factor,
                          o.original_context, o.eps), (500000.0, 32.0, 1.0, 4.0, 8192, 1e-5))

    def test_norm_weights_are_not_ones(self):
        norm = nano_checkpoint()["model.norm.weight"]
        self.assertGreater(norm.std(), 0.05)


class ExpectedTest(unittest.TestCase):
    def test_the_files_hold_the_prompt_logits_and_tokens(self):
        for shape, logits, new_tokens in (("nano", "logits", 16), ("1B-2L", "logits_last", 8)):
            tensors, meta = expected(shape)
            vocab = tool.shape_options(shape).vocab_size
            self.assertEqual(sorted(tensors), sorted(["prompt", logits, "tokens"]))
            self.assertEqual((tensors["prompt"].dtype, tensors["prompt"].shape),
                             (np.dtype("<i8"), (1, 8)))
            self.assertEqual((tensors["tokens"].dtype, tensors["tokens"].shape),
                             (np.dtype("<i8"), (1, new_tokens)))
            want = (1, 8, vocab) if shape == "nano" else (1, vocab)
            self.assertEqual((tensors[logits].dtype, tensors[logits].shape),
                             (np.dtype("<f4"), want))
            self.assertTrue(((tensors["tokens"] >= 0) & (tensors["tokens"] < vocab)).all())
            np.testing.assert_array_equal(tensors["prompt"], tool.prompt(shape))
            self.assertEqual((meta["shape"], meta["seed"], meta["new_tokens"]),
                             (shape, str(tool.SEED), str(new_tokens)))
            for key in ("transformers_version", "torch_version", "numpy_version",
                        "weights_sha256", "min_top2_margin"):
                self.assertIn(key, meta)

    def test_the_mirror_reproduces_transformers_logits(self):
        tensors, _ = expected("nano")
        want = torch.from_numpy(tensors["logits"].copy())
        with torch.inference_mode():
            got = nano_mirror()(torch.from_numpy(tensors["prompt"].copy()))
        err = ((got - want).abs().max() / want.abs().max()).item()
        self.assertLessEqual(err, 1e-5, f"relative error {err:.3g}")

    def test_the_mirror_generates_transformers_greedy_tokens(self):
        tensors, _ = expected("nano")
        model = nano_mirror()
        with torch.inference_mode():
            tokens, _ = tool.greedy_by_recompute(model, torch.from_numpy(tensors["prompt"].copy()),
                                                 tensors["tokens"].shape[1])
        self.assertEqual(tokens.tolist(), tensors["tokens"].tolist())


BENCH = built_bench()
GIVEN_PEAKS = ["--benchmark_min_time=0.01", "--warmup_s=0", "--peak_flops=1e12",
               "--peak_bandwidth=1e10", "--benchmark_format=json"]


@unittest.skipUnless(os.path.exists(BENCH), f"no built bench at {BENCH}")
class BenchWeightsTest(unittest.TestCase):
    """bench --weights with the checkpoint transformers wrote: the tokens it
    prints are the mirror's greedy tokens for the prompt it prints."""

    def run_bench(self, *args):
        proc = subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout), proc.stderr

    def test_printed_tokens_are_the_mirrors_for_the_printed_prompt(self):
        doc, err = self.run_bench("--benchmark_filter=^Llama/nano/cpu/generate/",
                                  f"--weights={NANO_DIR}", "--print_tokens=true",
                                  "--prompt=8", "--new_tokens=12", *GIVEN_PEAKS)
        [entry] = [b for b in doc["benchmarks"] if b["run_type"] == "iteration"]
        self.assertFalse(entry.get("error_occurred", False), entry.get("error_message"))
        name = "Llama/nano/cpu/generate/batch:1/prompt:8/new:12/fp32/weights:llama-nano"
        self.assertEqual(entry["run_name"], name + "/manual_time")
        lines = dict(line.split(": ", 1) for line in err.splitlines()
                     if line.startswith(name + " "))
        prompt = [int(t) for t in lines[name + " prompt[0]"].split()]
        printed = [int(t) for t in lines[name + " tokens[0]"].split()]
        self.assertEqual(len(prompt), 8)
        with torch.inference_mode():
            want, _ = tool.greedy_by_recompute(nano_mirror(), torch.tensor([prompt]), 12)
        self.assertEqual(printed, want[0].tolist())
        with open(os.path.join(NANO_DIR, "model.safetensors"), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(doc["context"]["weights_sha256"], digest)
        self.assertEqual(doc["context"]["weights"], NANO_DIR)

    def test_a_checkpoint_of_other_names_stops_its_benchmark_alone(self):
        doc, _ = self.run_bench(
            "--benchmark_filter=^(Transformer/nano/cpu/forward|Llama/nano/cpu/generate)/",
            f"--weights={NANO_DIR}", "--seq=16", "--batch=1", "--new_tokens=4", *GIVEN_PEAKS)
        by_name = {b["run_name"].split("/")[0]: b for b in doc["benchmarks"]}
        self.assertEqual(set(by_name), {"Transformer", "Llama"})
        transformer = by_name["Transformer"]
        self.assertTrue(transformer.get("error_occurred"))
        self.assertRegex(transformer["error_message"],
                         r"model\.safetensors has no tensor '[^']+', which Transformer/nano "
                         r"needs with shape \[")
        self.assertFalse(by_name["Llama"].get("error_occurred", False))

    def test_a_truncated_checkpoint_is_one_sentence_naming_the_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "cut.safetensors")
            with open(os.path.join(NANO_DIR, "model.safetensors"), "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[:len(data) // 2])
            doc, _ = self.run_bench("--benchmark_filter=^Llama/nano/cpu/forward/",
                                    f"--weights={path}", "--seq=16", "--batch=1",
                                    *GIVEN_PEAKS)
        [entry] = doc["benchmarks"]
        self.assertTrue(entry.get("error_occurred"))
        self.assertIn(path, entry["error_message"])
        self.assertEqual(entry["error_message"].count(path), 1, entry["error_message"])
        # The context records what the file held, bad or not.
        self.assertEqual(doc["context"]["weights_sha256"],
                         hashlib.sha256(data[:len(data) // 2]).hexdigest())


class RegenerateTest(ToolTest):
    """The nano checkpoint through the command, as a user writes it; the
    rest through the tool's main in this process (torch loaded once)."""

    def fixtures(self, *args):
        return self.run_main("llama-fixtures", tool.main, *args)

    def test_weights_rewrites_the_committed_tensors_bit_for_bit(self):
        out = os.path.join(self.tmp, "nano")
        self.assertExit(self.run_tool("llama-fixtures", "weights", "nano", out), 0)
        written, committed = tool.read_safetensors(os.path.join(out, "model.safetensors"))[0], \
            nano_checkpoint()
        self.assertEqual(sorted(written), sorted(committed))
        for name, array in committed.items():
            self.assertEqual((written[name].dtype, written[name].shape),
                             (array.dtype, array.shape), name)
            self.assertEqual(written[name].tobytes(), array.tobytes(), name)
        with open(os.path.join(out, "config.json")) as f:
            self.assertEqual(json.load(f), tool.hf_config("nano"))

    def test_the_expected_files_name_the_tensors_they_were_computed_with(self):
        # nano's whole checkpoint, and a few of 1B-2L's (its whole is 1.5 GB).
        digests = json.loads(expected("nano")[1]["weights_sha256"])
        self.assertEqual(digests, {n: tool.sha256(a) for n, a in nano_checkpoint().items()})
        names = ["model.norm.weight", "model.layers.1.input_layernorm.weight",
                 "model.layers.0.self_attn.k_proj.weight"]
        out = os.path.join(self.tmp, "1B-2L")
        self.assertExit(self.fixtures("weights", "1B-2L", out, "--only", ",".join(names)), 0)
        written = tool.read_safetensors(os.path.join(out, "model.safetensors"))[0]
        self.assertEqual(sorted(written), sorted(names))
        digests = json.loads(expected("1B-2L")[1]["weights_sha256"])
        self.assertEqual(list(digests), tool.tensor_names("1B-2L"))
        for name in names:
            self.assertEqual(tool.sha256(written[name]), digests[name], name)

    def test_bad_input_exits_2(self):
        proc = self.fixtures("weights", "7B", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("unknown shape '7B'; valid: nano, 1B-2L", proc.stderr)
        proc = self.fixtures("weights", "nano", self.tmp, "--only", "model.nope.weight")
        self.assertExit(proc, 2)
        self.assertIn("no tensor model.nope.weight", proc.stderr)
        proc = self.fixtures("weights", "nano", self.write("file", ""))
        self.assertExit(proc, 2)
        self.assertIn("is not a directory", proc.stderr)


if __name__ == "__main__":
    unittest.main()
