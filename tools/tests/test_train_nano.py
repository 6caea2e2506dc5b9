"""tools/train-nano and bench --eval_tokens: Llama/nano and GPT2/nano trained
on the Python standard library's sources (ltb/pysuite/nano_text.py) learn
it (their perplexity on held-out modules is far below the vocabulary's
1000), bench's ppl of a held-out text is torch's cross-entropy of the same
checkpoint, int8 keeps the predictions, and continuous batching serves
them token for token as generation at batch 1 does (the unit tests'
Trained/ContinuousBatching cases). The trained models come from
the cache (~/.cache/libtorch-bench/nano-text), trained there when missing
(minutes: this module is not in the fast label); the tool's own checks
train for a few steps in a temporary folder."""
import contextlib
import io
import json
import math
import os
import subprocess
import tempfile
import unittest

from tests.helpers import REPO, built_bench, built_unit_tests

try:
    import torch
except ImportError:  # the tools' tests also run where torch is not installed
    torch = None

VOCAB = 1000  # the nano sizes'
TOOL = os.path.join(REPO, "tools", "train-nano")


def run_bench(*args):
    proc = subprocess.run([built_bench(), *args, "--benchmark_min_time=0.01", "--warmup_s=0",
                           "--peak_flops=1e12", "--peak_bandwidth=1e10",
                           "--benchmark_format=json"],
                          capture_output=True, text=True, timeout=900)
    return proc


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class TrainedOnTheStandardLibraryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from ltb.pysuite import nano_text
        cls.made = nano_text.ensure(log=print)
        # Every fourth held-out sequence (32 of 128, spread over the same
        # modules): a quarter of the scoring, the same statistics.
        cls.tmp = tempfile.TemporaryDirectory()
        cls.tokens = nano_text.read_tokens(cls.made["tokens"])[::4]
        cls.text = os.path.join(cls.tmp.name, "heldout-quarter.tokens")
        nano_text.write_tokens(cls.text, cls.tokens, ["every fourth sequence of the cache's"])
        cls.results = {}
        for family in ("Llama", "GPT2"):
            proc = run_bench(
                f"--benchmark_filter=^{family}/nano/cpu/forward/batch:1/seq:128/"
                "(fp32|bf16|fp32/int8|fp32/int4:g32)/weights:",
                f"--weights={cls.made[family]}", f"--eval_tokens={cls.text}",
                "--dtype=fp32,bf16", "--quant=none,int8,int4", "--quant_group=32",
                "--batch=1", "--seq=128", "--devices=cpu")
            if proc.returncode != 0:
                raise AssertionError(proc.stderr[-3000:])
            doc = json.loads(proc.stdout)
            cls.context = doc["context"]
            for b in doc["benchmarks"]:
                cls.results[b["name"].removesuffix("/manual_time")] = b

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def result(self, family, precision):
        name = (f"{family}/nano/cpu/forward/batch:1/seq:128/{precision}/weights:"
                f"{family.lower()}-nano-stdlib")
        self.assertIn(name, self.results, sorted(self.results))
        r = self.results[name]
        self.assertNotIn("error_message", r, name)
        return r

    def test_the_models_learned_the_text(self):
        # Uniform guessing among the bytes would give 256, among the
        # vocabulary 1000; trained for minutes they give about 6.
        for family in ("Llama", "GPT2"):
            self.assertLess(self.result(family, "fp32")["ppl"], VOCAB / 10, family)

    def test_benchs_perplexity_is_torchs_cross_entropy_of_the_checkpoint(self):
        from ltb.pysuite import nano_text
        for family in ("Llama", "GPT2"):
            model = nano_text.load(family, self.made[family])
            with torch.no_grad():
                logits = model(self.tokens).double()
                loss = torch.nn.functional.cross_entropy(
                    logits[:, :-1].reshape(-1, VOCAB), self.tokens[:, 1:].reshape(-1))
            expected = math.exp(loss.item())
            self.assertAlmostEqual(self.result(family, "fp32")["ppl"] / expected, 1, delta=1e-4,
                                   msg=family)

    def test_an_unquantised_fp32_run_reports_perplexity_alone(self):
        for family in ("Llama", "GPT2"):
            r = self.result(family, "fp32")
            for counter in ("ppl_ratio", "kld_mean", "same_top1_%", "rel_err"):
                self.assertNotIn(counter, r, family)

    def test_int8_keeps_the_predictions(self):
        for family in ("Llama", "GPT2"):
            fp32 = self.result(family, "fp32")
            int8 = self.result(family, "fp32/int8")
            self.assertGreater(int8["same_top1_%"], 95, family)
            self.assertLess(int8["kld_mean"], 0.01, family)
            self.assertLess(abs(int8["ppl_ratio"] - 1), 0.01, family)
            # The ratio is to the fp32 run's perplexity of the same text.
            self.assertAlmostEqual(int8["ppl"] / int8["ppl_ratio"], fp32["ppl"],
                                   delta=1e-9 * fp32["ppl"], msg=family)

    def test_fewer_bits_move_the_distributions_more(self):
        for family in ("Llama", "GPT2"):
            int8, int4 = self.result(family, "fp32/int8"), self.result(family, "fp32/int4:g32")
            # (Not ppl_ratio > 1: rounding can make a little-trained model's
            # perplexity of a text a little better by chance.)
            self.assertGreater(int4["kld_mean"], 2 * int8["kld_mean"], family)
            bf16 = self.result(family, "bf16")
            self.assertIn("ppl_ratio", bf16, family)
            self.assertGreater(bf16["same_top1_%"], 90, family)

    def test_continuous_batching_serves_them_as_generation_at_batch_one(self):
        # Several arrival orders and slot counts, reused slots over stale
        # caches, prompts prefilled together and in chunks, graphed decode
        # steps, each family over its trained weights and held-out prompts.
        binary = built_unit_tests()
        self.assertTrue(os.access(binary, os.X_OK), f"{binary}: build unit_tests first")
        proc = subprocess.run(
            [binary, "--gtest_filter=Trained/ContinuousBatching.*"], capture_output=True,
            text=True, timeout=900,
            env=dict(os.environ, LTB_NANO_TEXT_DIR=os.path.dirname(self.made["GPT2"])))
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        tests = ("EveryRequestsTokensEqualGenerationAtBatchOne",
                 "AReusedSlotNeverReadsWhatItsLastRequestLeft",
                 "DecodeStepsCountOneTokenPerActiveSlot",
                 "PromptsOfOneLengthArrivingTogetherPrefillInOneForward",
                 "PromptsInChunksGiveTheSameTokens",
                 "BucketedDecodeStepsGiveTheSameTokensEachShapeRunFirst")
        for test in tests:
            for family in ("GPT2", "Llama"):
                self.assertIn(f"[       OK ] Trained/ContinuousBatching.{test}/{family} (",
                              proc.stdout)
        self.assertIn(f"[  PASSED  ] {2 * len(tests)} tests.", proc.stdout)
        self.assertNotIn("SKIPPED", proc.stdout)

    def test_the_context_names_the_text_by_content(self):
        import hashlib
        self.assertEqual(self.context["eval_tokens"], self.text)
        with open(self.text, "rb") as f:
            self.assertEqual(self.context["eval_tokens_sha256"],
                             hashlib.sha256(f.read()).hexdigest())


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class TrainNanoToolTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def train(self, *args):
        return subprocess.run([TOOL, "train", "--out", self.tmp.name, *args],
                              capture_output=True, text=True, timeout=600)

    def train_here(self, *args):
        """The tool's main in this process: what it writes to stderr."""
        from ltb.commands import train_nano
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                train_nano.main(["train", "--out", self.tmp.name, *args])
            except SystemExit as e:
                self.assertEqual(e.code, 0, err.getvalue())
        return err.getvalue()

    def test_it_writes_checkpoints_and_a_held_out_text_and_reuses_them(self):
        from ltb.pysuite import nano_text
        proc = self.train("--steps", "2")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        paths = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
        self.assertEqual(sorted(paths), ["GPT2", "Llama", "tokens"])
        # The token file: comments, then 128 sequences of 128 byte ids.
        with open(paths["tokens"]) as f:
            lines = f.read().splitlines()
        comments = [line for line in lines if line.startswith("#")]
        self.assertTrue(any("pprint.py" in c for c in comments), comments)
        tokens = nano_text.read_tokens(paths["tokens"])
        self.assertEqual(tuple(tokens.shape), (128, 128))
        self.assertLess(int(tokens.max()), 256)
        # Held out: none of its modules is trained on.
        self.assertFalse(set(nano_text.HELDOUT_MODULES) & set(nano_text.TRAIN_MODULES))
        recipe = nano_text.cached_recipe(paths["Llama"])
        self.assertEqual(recipe, nano_text.recipe(steps=2))
        # Cached: a second run trains nothing; a missing file is made again.
        # (The tool run in this process from here: starting Python and torch
        # again would take longer than these checks.)
        self.assertNotIn("training", self.train_here("--steps", "2"))
        os.remove(paths["GPT2"])
        again = self.train_here("--steps", "2")
        self.assertIn("GPT2/nano: training", again)
        self.assertNotIn("Llama/nano: training", again)
        # Another recipe (here, steps) is another model.
        self.assertIn("Llama/nano: training", self.train_here("--steps", "3"))

    def test_the_checkpoint_loads_into_the_twin_as_trained(self):
        # GPT-2's Conv1D weights are stored transposed, as Hugging Face's are:
        # loading by bench's rules gives the trained parameters back.
        from ltb.pysuite import llama_fixtures, nano_text
        text, _ = nano_text.read_modules(nano_text.HELDOUT_MODULES)
        for family in ("Llama", "GPT2"):
            model, _ = nano_text.train(family, text, steps=1, batch=2, length=16)
            tensors = nano_text.checkpoint_tensors(family, model)
            path = os.path.join(self.tmp.name, f"{family}.safetensors")
            llama_fixtures.write_safetensors(
                path, {k: (v.shape, v.dtype) for k, v in tensors.items()}, tensors.__getitem__)
            loaded = nano_text.load(family, path)
            for (name, p), (_, q) in zip(model.named_parameters(), loaded.named_parameters()):
                self.assertTrue(torch.equal(p, q), f"{family} {name}")

    def test_bad_input_exits_2(self):
        proc = self.train("--steps", "0")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--steps=0: valid: a number of steps >= 1", proc.stderr)
        proc = subprocess.run([TOOL, "table", "--weights=x.safetensors"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--weights is the train-nano's own", proc.stderr)
        # One row a precision: repetitions would repeat every row.
        proc = subprocess.run([TOOL, "table", "--benchmark_repetitions=2"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--benchmark_repetitions is the train-nano's own: the table scores each "
                      "precision once", proc.stderr)

    def test_bench_refuses_a_token_file_it_cannot_read(self):
        bad = os.path.join(self.tmp.name, "bad.tokens")
        with open(bad, "w") as f:
            f.write("# two sequences of different lengths\n1 2 3\n4 5\n")
        for path, message in ((bad, f"--eval_tokens: {bad} line 3 holds 2 ids, but the first "
                                    "sequence 3: every sequence must be as long"),
                              (os.path.join(self.tmp.name, "none.tokens"),
                               "cannot open it; valid: a text file of token ids")):
            proc = run_bench("--benchmark_filter=^GPT2/nano/cpu/forward/", f"--eval_tokens={path}")
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(message, proc.stderr)


if __name__ == "__main__":
    unittest.main()
