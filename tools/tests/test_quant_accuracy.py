"""bench --quant's accuracy counters on a model whose predictions are
confident: Llama/nano trained here for a few seconds to continue every token
with the next id (a bigram any prompt follows), loaded with --weights.
Random weights predict almost uniformly, so quantisation flips their argmax;
this model's margins are wide, so int8 must keep its predictions, and the
counters must agree with the same tokens computed here in fp32."""
import json
import os
import re
import subprocess
import tempfile
import unittest

import numpy as np

from tests.helpers import built_bench

try:
    import torch
except ImportError:  # the tools' tests also run where torch is not installed
    torch = None

VOCAB = 1000  # Llama/nano's
PROMPT, NEW = 32, 16


def train_bigram(steps=120):
    """Llama/nano (the Python twin, HF names) trained on sequences that count
    up by one modulo the vocabulary, from random starts."""
    from ltb.pysuite import families
    torch.manual_seed(0)
    model = families.build("Llama", "nano")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        seq = (torch.randint(0, VOCAB, (16, 1)) + torch.arange(65)) % VOCAB
        logits = model(seq[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                 seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def greedy(model, prompt, n):
    """n tokens of greedy decoding by recomputing the whole sequence."""
    tokens = torch.tensor([prompt])
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(tokens)[0, -1].argmax())
            out.append(nxt)
            tokens = torch.cat([tokens, torch.tensor([[nxt]])], 1)
    return out


@unittest.skipIf(torch is None, "needs torch (the project's venv)")
class ConfidentModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from ltb.pysuite import llama_fixtures
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = train_bigram()
        state = {k: v.detach().numpy() for k, v in cls.model.state_dict().items()}
        path = os.path.join(cls.tmp.name, "bigram.safetensors")
        llama_fixtures.write_safetensors(
            path, {k: (v.shape, np.float32) for k, v in state.items()}, state.__getitem__,
            {"format": "pt"})
        proc = subprocess.run(
            [built_bench(), "--benchmark_filter=^Llama/nano/cpu/(generate|forward)/",
             f"--weights={path}", "--quant=none,int8,int4,int8dyn", "--dtype=fp32",
             f"--prompt={PROMPT}", f"--new_tokens={NEW}", "--seq=64", "--print_tokens=true",
             "--benchmark_min_time=0.01", "--warmup_s=0", "--peak_flops=1e12",
             "--peak_bandwidth=1e10", "--benchmark_format=json"],
            capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError(proc.stderr[-3000:])
        cls.stderr = proc.stderr
        cls.results = {b["name"].removesuffix("/manual_time"): b
                       for b in json.loads(proc.stdout)["benchmarks"]}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def result(self, phase, quant):
        shape = (f"batch:1/prompt:{PROMPT}/new:{NEW}" if phase == "generate"
                 else "batch:1/seq:64")
        name = f"Llama/nano/cpu/{phase}/{shape}/fp32{quant}/weights:bigram"
        self.assertIn(name, self.results, sorted(self.results))
        r = self.results[name]
        self.assertNotIn("error_message", r, name)
        return r

    def printed(self, quant, what):
        name = f"Llama/nano/cpu/generate/batch:1/prompt:{PROMPT}/new:{NEW}/fp32{quant}" \
               "/weights:bigram"
        m = re.search(re.escape(name) + r"\S* " + what + r"\[0\]: ([\d ]+)", self.stderr)
        self.assertIsNotNone(m, f"{name} {what}")
        return [int(t) for t in m.group(1).split()]

    def test_the_model_is_confident(self):
        prompt = self.printed("", "prompt")
        with torch.no_grad():
            probs = self.model(torch.tensor([prompt])).softmax(-1)[0]
        self.assertGreater(float(probs.max(-1).values.mean()), 0.9)
        # And bench's unquantised tokens are the ones this model generates.
        self.assertEqual(self.printed("", "tokens"), greedy(self.model, prompt, NEW))

    def test_int8_keeps_the_predictions(self):
        for quant in ("/int8", "/int8dyn"):
            if quant == "/int8dyn" and not any("/int8dyn/" in n or n.endswith("/int8dyn")
                                               for n in self.results):
                continue
            for phase in ("generate", "forward"):
                r = self.result(phase, quant)
                self.assertGreaterEqual(r["top1_agree_%"], 99.0, (phase, quant))
                self.assertLess(r["rel_err"], 0.05, (phase, quant))
                # Teacher-forced against fp32: the distributions barely move.
                self.assertGreaterEqual(r["same_top1_%"], 99.0, (phase, quant))
                self.assertGreater(r["kld_mean"], 0, (phase, quant))
                self.assertLess(r["kld_mean"], 0.01, (phase, quant))
                self.assertLessEqual(r["kld_p99"], r["kld_max"], (phase, quant))
            self.assertGreaterEqual(self.result("generate", quant)["token_match_%"], 99.0)

    def test_fewer_bits_move_the_distributions_more(self):
        # Teacher-forced KL against fp32: int4's 16 levels a group move the
        # next-token distributions far more than int8's 255 a channel.
        for phase in ("generate", "forward"):
            int8, int4 = self.result(phase, "/int8"), self.result(phase, "/int4:g32")
            self.assertGreater(int4["kld_mean"], 10 * int8["kld_mean"], phase)

    def test_token_match_counts_the_tokens_printed(self):
        prompt = self.printed("", "prompt")
        self.assertEqual(self.printed("/int4:g32", "prompt"), prompt)
        reference = greedy(self.model, prompt, NEW)
        for quant in ("/int8", "/int4:g32"):
            tokens = self.printed(quant, "tokens")
            same = sum(a == b for a, b in zip(tokens, reference)) / NEW * 100
            self.assertAlmostEqual(self.result("generate", quant)["token_match_%"], same,
                                   places=6, msg=quant)

    def test_unquantised_runs_report_no_quantisation_counters(self):
        for phase in ("generate", "forward"):
            r = self.result(phase, "")
            for counter in ("kld_mean", "kld_p99", "kld_max", "same_top1_%", "top1_agree_%",
                            "rel_err", "token_match_%"):
                self.assertNotIn(counter, r, phase)

    def test_weight_bytes_are_the_packed_ones(self):
        # Llama/nano: 122,880 weights in linear layers (outputs 768 a block,
        # two blocks), the tied head's 1000 x 64, the norms' 320 fp32 values.
        linear, outs, head, norms = 122_880, 2 * 768, 64_000, 320 * 4
        self.assertEqual(self.result("generate", "")["weight_bytes"],
                         (linear + head) * 4 + norms)
        self.assertEqual(self.result("generate", "/int8")["weight_bytes"],
                         linear + outs * 4 + head + 1000 * 4 + norms)
        # int4, groups of 32: half a byte a weight and an fp32 scale and zero
        # a group; the head's 1000 rows padded to 1008.
        self.assertEqual(self.result("generate", "/int4:g32")["weight_bytes"],
                         linear // 2 + linear // 32 * 8 + 1008 * 64 // 2 + 1008 * 2 * 8
                         + norms)


if __name__ == "__main__":
    unittest.main()
