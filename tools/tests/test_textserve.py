"""pysuite's continuous batching (ltb.pysuite.textserve): every request's
tokens equal generation at batch 1 of the same prompt, in several arrival
orders and slot counts, over slots reused on purpose; the request draws
are bench's; one LoadGen test that reports tokens and token latencies;
pybench's served generation with bench's names, counters and refusals."""
import importlib.util
import os
import random
import tempfile
import unittest

from ltb.pysuite import textserve

HAS_RUNTIME = all(importlib.util.find_spec(m) for m in ("torch", "mlperf_loadgen"))


class DrawsTest(unittest.TestCase):
    def test_draws_are_benchs(self):
        # test/serve/text_serve_test.cc pins the same value.
        self.assertEqual(textserve.request_draw(55, 0, 0), 0x6E1351B2349F331C)
        lengths = [textserve.draw_length(55, i, 1, 16, 64) for i in range(200)]
        self.assertTrue(all(16 <= n <= 64 for n in lengths))
        self.assertGreater(len(set(lengths)), 30)


@unittest.skipUnless(HAS_RUNTIME, "needs torch and mlperf_loadgen")
class ContinuousBatchingTest(unittest.TestCase):
    def model(self, family):
        import torch
        from ltb.pysuite.models import decoder_family as df

        torch.manual_seed(7)
        row = df.ROWS[family]
        return row.build(next(s.options for s in row.sizes if s.name == "nano")).eval()

    def generate(self, model, prompt, n):
        import torch

        cache = model.make_cache(1, prompt.shape[1] + n)
        token = model.forward_cached(prompt, 0, cache).argmax(-1, keepdim=True)
        out = [int(token)]
        for i in range(1, n):
            token = model.forward_cached(token, prompt.shape[1] + i - 1, cache).argmax(
                -1, keepdim=True)
            out.append(int(token))
        return out

    def serve(self, model, cases, slots, order, arrive_at, stale=0.0, prefill_chunk=0,
              buckets=None):
        cache = model.make_cache(slots, 32)
        for k, v in cache:
            k.fill_(stale)
            v.fill_(stale)
        got, firsts = {}, {}
        batcher = textserve.ContinuousBatcher(
            model, cache, lambda r, t: firsts.__setitem__(r.id, t),
            lambda r, tokens: got.__setitem__(r.id, list(tokens)), prefill_chunk, buckets)
        nxt, most = 0, 0
        for step in range(1000):
            while nxt < len(order) and arrive_at[nxt] <= step:
                prompt, n = cases[order[nxt]]
                batcher.add(textserve.Request(order[nxt], prompt, n))
                nxt += 1
            more = batcher.step()
            most = max(most, len(batcher.active))
            if not more and nxt == len(order):
                break
        self.assertLessEqual(most, slots)
        self.assertEqual({i: g[0] for i, g in got.items()}, firsts)
        return got, batcher

    def test_tokens_equal_generation_at_batch_one(self):
        import torch

        for family in ("GPT2", "Llama"):
            model = self.model(family)
            with torch.inference_mode():
                cases = [(torch.randint(0, 1000, (1, 1 + (i * 5) % 13)), 1 + (i * 7) % 11)
                         for i in range(12)]
                expected = {i: self.generate(model, p, n) for i, (p, n) in enumerate(cases)}
                n = len(cases)
                shuffled = list(range(n))
                random.Random(3).shuffle(shuffled)
                for slots in (1, 3, 8):
                    for order in (list(range(n)), list(reversed(range(n))), shuffled):
                        for arrive in ([0] * n, [2 * i for i in range(n)]):
                            # At each step's exact keys, and over key buckets
                            # (16 and the context's 32) as served.
                            for buckets in (None, textserve.key_buckets(2, 32)):
                                got, _ = self.serve(model, cases, slots, order, arrive,
                                                    buckets=buckets)
                                self.assertEqual(got, expected,
                                                 (family, slots, order, arrive, buckets))
                # Two slots reused six times each over stale values.
                got, batcher = self.serve(model, cases, 2, list(range(n)), [0] * n, 50.0)
                self.assertEqual(got, expected, (family, "stale"))
                self.assertEqual(batcher.prefills, n)
                self.assertEqual(batcher.active_slot_steps, sum(o - 1 for _, o in cases))
                # Eight prompts of one length first: those at the front of the
                # queue prefill together, one forward for the free slots.
                same = [(torch.randint(0, 1000, (1, 6)), 1 + (i * 3) % 8) for i in range(8)]
                more = same + cases
                want = {i: self.generate(model, p, o) for i, (p, o) in enumerate(more)}
                for slots in (3, 8):
                    got, batcher = self.serve(model, more, slots, list(range(len(more))),
                                              [0] * len(more), 50.0)
                    self.assertEqual(got, want, (family, "one length", slots))
                    self.assertEqual(batcher.prefills, len(more))
                    self.assertLessEqual(batcher.prefill_runs, len(more) - slots + 1)
                # Prompts in chunks of 1 and 4 tokens a step, slots freed while
                # one is part-way in, as bench's (test/serve/text_serve_test.cc).
                for chunk in (1, 4):
                    for slots in (1, 3):
                        for arrive in ([0] * n, [2 * i for i in range(n)]):
                            got, batcher = self.serve(model, cases, slots, list(range(n)),
                                                      arrive, 50.0, chunk)
                            self.assertEqual(got, expected, (family, chunk, slots, arrive))
                            self.assertEqual(batcher.prefills, n)

    def test_every_shape_served_ran_in_the_warm_up(self):
        """warm_up runs every decode and whole-prompt prefill shape that
        serving its requests then runs (as bench's RunTextServe): prompts of
        one length, which join in up to the slots' rows, and of a range."""
        import torch

        class Noting:
            def __init__(self, model):
                self.model, self.shapes = model, set()

            def forward_cached(self, tokens, position, cache):
                self.shapes.add(("prefill", *tokens.shape, position))
                return self.model.forward_cached(tokens, position, cache)

            def forward_slots(self, tokens, positions, cache, keys=None):
                self.shapes.add(("decode", tokens.shape[0], keys))
                return self.model.forward_slots(tokens, positions, cache, keys)

        self.assertEqual(textserve.key_buckets(4, 20), [16, 20])
        self.assertEqual(textserve.key_buckets(33, 192), [64, 128, 192])
        model = Noting(self.model("GPT2"))
        for prompt, output in (((6, 6), (4, 4)), ((3, 12), (2, 8))):
            requests = [textserve.draw_request(i, prompt, output, 1000)
                        for i in range(textserve.SAMPLES)]
            requests = [(torch.tensor([ids]), n) for ids, n in requests]
            cache = model.model.make_cache(4, prompt[1] + output[1])
            buckets = textserve.key_buckets(prompt[0] + 1, prompt[1] + output[1])
            model.shapes = set()
            textserve.warm_up(model, cache, requests, buckets, 4)
            warmed, model.shapes = model.shapes, set()
            batcher = textserve.ContinuousBatcher(model, cache, lambda r, t: None,
                                                  lambda r, tokens: None, 0, buckets)
            with torch.inference_mode():
                for i, (p, n) in enumerate(requests):
                    batcher.add(textserve.Request(i, p, n))
                while batcher.step():
                    pass
            self.assertTrue(model.shapes, prompt)
            self.assertEqual(model.shapes - warmed, set(), prompt)
            self.assertEqual({s[0] for s in model.shapes}, {"prefill", "decode"})
            self.assertNotIn(None, {s[2] for s in model.shapes if s[0] == "decode"})
            if prompt[0] == prompt[1]:  # one length: prompts joined in rows
                self.assertEqual(max(s[1] for s in model.shapes if s[0] == "prefill"), 4)

    def test_serving_and_its_warm_up_run_on_the_servers_thread(self):
        """serve_text warms up on the thread that serves (cuDNN keeps its
        attention plans per thread), never on the caller's."""
        import threading

        model = self.model("GPT2")

        class Noting:
            def __init__(self):
                self.threads, self.options = set(), model.options

            def __getattr__(self, name):
                method = getattr(model, name)
                if name in ("forward_cached", "forward_slots"):
                    def noted(*args, **kwargs):
                        self.threads.add(threading.get_ident())
                        return method(*args, **kwargs)
                    return noted
                return method

        noting = Noting()
        with tempfile.TemporaryDirectory() as d:
            textserve.serve_text(noting, "Offline", d, prompt=(3, 12), output=(2, 8),
                                 max_batch=4, target_qps=50, min_s=0.2, min_queries=16)
        self.assertEqual(len(noting.threads), 1)
        self.assertNotIn(threading.get_ident(), noting.threads)

    def test_loadgen_reports_tokens_and_token_latencies(self):
        model = self.model("GPT2")
        with tempfile.TemporaryDirectory() as d:
            for scenario in ("Offline", "Server"):
                counters, label, _ = textserve.serve_text(
                    model, scenario, d, prompt=(3, 12), output=(2, 8), max_batch=4,
                    target_qps=50, min_s=0.2, min_queries=16, ttft_bound_ms=5000,
                    tpot_bound_ms=5000)
                self.assertGreater(counters["tokens/s"], 0, scenario)
                self.assertGreaterEqual(counters["prefills"], 16)
                self.assertLessEqual(counters["mean_active_slots"], 4)
                if scenario == "Server":
                    self.assertGreater(counters["ttft_p99_ms"], 0)
                    self.assertGreater(counters["tpot_p99_ms"], 0)
                    self.assertLessEqual(counters["goodput"], counters["samples/s"] + 1e-9)
        with self.assertRaisesRegex(ValueError, "2 <= MIN"):
            textserve.serve_text(model, "Offline", "/tmp", prompt=(4, 4), output=(0, 0))

    def test_the_streams_query_is_timed_and_holds_its_samples(self):
        # MultiStream's samples a query reach LoadGen (they were left at its
        # 8 while the name said 3), and both streams' expected latency is a
        # query timed in the warm-up, not LoadGen's 1 or 8 ms.
        from ltb.pysuite import serve
        model = self.model("GPT2")
        for scenario, key, per_query in (("SingleStream", "single", 1),
                                         ("MultiStream", "multi", 3)):
            with tempfile.TemporaryDirectory() as d:
                counters, _, _ = textserve.serve_text(
                    model, scenario, d, prompt=(3, 6), output=(4, 4), max_batch=4, min_s=0.1,
                    min_queries=8, samples_per_query=3)
                with open(os.path.join(d, "mlperf_log_detail.txt")) as f:
                    detail = serve.parse_detail(f.read())
            self.assertEqual(detail["effective_samples_per_query"], per_query, scenario)
            expected = detail[f"requested_{key}_stream_expected_latency_ns"]
            self.assertGreater(expected, 0, scenario)
            self.assertNotIn(expected, (1e6, 8e6), scenario)
            if scenario == "MultiStream":
                # tokens/s over the span samples/s counts (without the gaps
                # between queries): 4 tokens a sample, exactly, as bench's.
                self.assertAlmostEqual(counters["tokens/s"], 4 * counters["samples/s"],
                                       delta=1e-9 * counters["tokens/s"])
        with self.assertRaisesRegex(ValueError, "Server scenario only"):
            textserve.serve_text(model, "Offline", "/tmp", prompt=(4, 4), output=(2, 2),
                                 find_peak=True)
        with self.assertRaisesRegex(ValueError, "has 1024"):
            textserve.serve_text(model, "Offline", "/tmp", prompt=(1020, 1020), output=(8, 8))

    def test_find_peak_searches_within_the_token_bounds(self):
        # A TPOT bound no step meets stops LoadGen's search at its start, with
        # its reason, as bench's (test/serve/text_serve_test.cc).
        with tempfile.TemporaryDirectory() as d:
            counters, label, _ = textserve.serve_text(
                self.model("GPT2"), "Server", d, prompt=(3, 12), output=(2, 8), max_batch=4,
                target_qps=50, min_s=0.2, min_queries=16, ttft_bound_ms=5000,
                tpot_bound_ms=1e-6, find_peak=True)
        self.assertEqual(counters["peak_qps"], 0)
        self.assertNotIn("goodput", counters)
        self.assertTrue(label.startswith(
            "scenario:Server no peak: the starting rate 50 QPS misses the bound: "), label)
        self.assertIn("TPOT constrain not met", label)


@unittest.skipUnless(HAS_RUNTIME, "needs torch and mlperf_loadgen")
class PybenchTextServeTest(unittest.TestCase):
    """pybench serves generation as bench does: its names, its counters, its
    refusals."""

    LENGTHS = ["--scenario=Offline,Server", "--prompt_len=8:16", "--output_len=4:8"]
    # What bench lists (and the comparison needs) for LENGTHS.
    NAMES = [f"{f}/nano/cpu/serve/scenario:{s}/max_batch:8/prompt:8:16/output:4:8/fp32"
             for f in ("GPT2", "Llama") for s in ("Offline", "Server/qps:10")]
    KEYS = {"cpu_time", "decode_share", "decode_steps", "family_index", "iterations", "label",
            "latency_mean_ms", "max_batch", "mean_active_slots", "name", "p50_ms", "p90_ms",
            "p99.9_ms", "p99_ms", "per_family_instance_index", "prefill_share", "prefills",
            "queries", "real_time", "repetition_index", "repetitions", "run_name",
            "run_type", "samples/s", "threads", "time_unit", "tokens/s", "valid"}
    RUN = ["--benchmark_filter=GPT2/nano/cpu/serve", "--devices=cpu", "--scenario=Offline",
           "--prompt_len=4:8", "--output_len=2:4", "--serve_min_s=0.1",
           "--serve_min_queries=16", "--warmup_s=0"]

    def pybench(self, *args):
        from tests.test_pybench import pybench_outputs
        return pybench_outputs(*args)

    def test_names_are_benchs(self):
        from tests.test_pybench import runnable_bench
        import subprocess
        flt = "--benchmark_filter=(GPT2|Llama)/nano/cpu/serve"
        code, out, err = self.pybench(flt, "--devices=cpu", *self.LENGTHS,
                                      "--benchmark_list_tests")
        self.assertEqual(code, 0, err)
        names = [line.replace("/py_eager", "").replace("/iterations:1/manual_time", "")
                 for line in out.split()]
        self.assertEqual(names, self.NAMES)
        # --prompt and --new_tokens lists repeat the served lengths: one each.
        code, again, err = self.pybench(flt, "--devices=cpu", *self.LENGTHS, "--prompt=4,8",
                                        "--new_tokens=2,3", "--depth=0,16",
                                        "--benchmark_list_tests")
        self.assertEqual((code, again), (0, out), err)
        bench = runnable_bench()
        if bench:
            listed = subprocess.run([bench, flt, "--devices=cpu", *self.LENGTHS,
                                     "--benchmark_list_tests"], capture_output=True,
                                    text=True, timeout=300)
            self.assertEqual(listed.stdout.replace("/manual_time", "/py_eager/manual_time")
                             .replace("/iterations:1/py_eager", "/py_eager/iterations:1"),
                             out)

    def test_a_run_reports_benchs_counters(self):
        import json
        import os
        from tests.test_pybench import bench_json, runnable_bench
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "py.json")
            code, _, err = self.pybench(*self.RUN, f"--benchmark_out={path}")
            self.assertEqual(code, 0, err)
            with open(path) as f:
                [e] = json.load(f)["benchmarks"]
            self.assertEqual(set(e), self.KEYS)
            self.assertEqual(e["max_batch"], 8)
            self.assertGreaterEqual(e["prefills"], 16)  # every request prefilled once
            # Each request generates 2 to 4 tokens.
            self.assertGreaterEqual(e["tokens/s"] / e["samples/s"], 2 - 1e-9)
            self.assertLessEqual(e["tokens/s"] / e["samples/s"], 4 + 1e-9)
            self.assertRegex(e["label"], r"^scenario:Offline (VALID|INVALID)")
            self.assertEqual(len(os.listdir(os.path.join(tmp, "py.loadgen"))), 1)
            bench = runnable_bench()
            if bench:
                with open(bench_json(bench, tmp, *self.RUN,
                                     f"--serve_log_dir={tmp}/logs")) as f:
                    [b] = json.load(f)["benchmarks"]
                self.assertEqual(set(b), set(e))

    def test_prompts_in_chunks_are_named_and_refused_as_benchs(self):
        from tests.test_pybench import runnable_bench
        import subprocess
        flt = "--benchmark_filter=GPT2/nano/cpu/serve"
        code, out, err = self.pybench(flt, "--devices=cpu", "--scenario=Offline",
                                      "--prompt_len=8", "--output_len=4", "--prefill_chunk=4",
                                      "--benchmark_list_tests")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.split(), [
            "GPT2/nano/cpu/serve/scenario:Offline/max_batch:8/prompt:8/output:4/"
            "prefill_chunk:4/fp32/py_eager/iterations:1/manual_time"])
        refusals = ((("--scenario=Offline", "--prefill_chunk=4"),
                     "--prefill_chunk: prompts are chunked only in serve of generate"),
                    (("--scenario=Offline", "--output_len=4", "--prefill_chunk=-1"),
                     "--prefill_chunk=-1: valid: a whole number of prompt tokens >= 1, or 0 "
                     "for whole prompts"),
                    # Served generation's settings beside another phase served.
                    (("--scenario=Offline", "--serve_phase=forward", "--output_len=4"),
                     "--output_len applies to serve of generate alone, not "
                     "--serve_phase=forward; valid: with --serve_phase=generate, --prompt_len "
                     "or --output_len"),
                    (("--scenario=Server", "--tpot_bound_ms=50"),
                     "--tpot_bound_ms applies to serve of generate alone; valid: with "
                     "--serve_phase=generate, --prompt_len or --output_len"),
                    (("--scenario=Offline", "--output_len=4", "--depth=64"),
                     "--depth: served generation starts every request from an empty slot, at "
                     "depth 0, which --depth leaves out; valid: --depth with 0 among its "
                     "values, or left out"),
                    (("--scenario=Server", "--output_len=4", "--latency_bound_ms=50"),
                     "--latency_bound_ms bounds a served batch's latency, which served "
                     "generation does not have; valid: --ttft_bound_ms and --tpot_bound_ms"))
        bench = runnable_bench()
        for flags, message in refusals:
            code, out, err = self.pybench(flt, *flags)
            self.assertEqual((code, out), (2, ""), err)
            self.assertIn(message, err)
            if bench:
                ran = subprocess.run([bench, flt, *flags, "--benchmark_list_tests"],
                                     capture_output=True, text=True, timeout=300)
                self.assertEqual(ran.returncode, 2, ran.stderr)
                self.assertIn(message, ran.stderr)

    def test_bad_lengths_are_refused_as_bench_refuses_them(self):
        for flag, message in (
                ("--output_len=1", "--output_len=1: valid: a length N or a range MIN:MAX of "
                 "whole numbers, 2 <= MIN <= MAX (LoadGen times the output tokens after the "
                 "first, so a request generates at least 2)"),
                ("--prompt_len=9:3", "--prompt_len=9:3: valid: a length N or a range MIN:MAX "
                 "of whole numbers, 1 <= MIN <= MAX\n")):
            code, out, err = self.pybench("--benchmark_filter=GPT2/nano/cpu/serve",
                                          "--scenario=Offline", flag)
            self.assertEqual((code, out), (2, ""), err)
            self.assertIn(message, err)


if __name__ == "__main__":
    unittest.main()
