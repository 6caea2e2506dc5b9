"""pysuite's serve: the batcher (every request run once, batches within the
limit), LoadGen's results through its Python bindings, an INVALID result."""
import importlib.util
import tempfile
import threading
import time
import unittest

from ltb.pysuite import serve

HAS_RUNTIME = all(importlib.util.find_spec(m) for m in ("torch", "mlperf_loadgen"))


class BatcherTest(unittest.TestCase):
    def test_every_request_runs_once_in_batches_within_the_limit(self):
        ran, sizes, lock = [], [], threading.Lock()

        def run(batch):
            with lock:
                sizes.append(len(batch))
                ran.extend(r[0] for r in batch)

        batcher = serve.Batcher(5, 300, run)
        now = time.monotonic
        for burst in range(4):
            batcher.submit([(100 + 13 * burst + i, i, now()) for i in range(13)])
        for i in range(20):
            batcher.submit([(i, i, now())])
        batcher.drain()
        batcher.close()
        self.assertEqual(sorted(ran), sorted(list(range(20)) + list(range(100, 152))))
        self.assertTrue(all(1 <= s <= 5 for s in sizes), sizes)
        self.assertEqual(batcher.largest, 5)
        self.assertEqual([r for r in ran if r < 20], list(range(20)))

    def test_a_lone_request_runs_when_its_wait_runs_out(self):
        sizes = []
        batcher = serve.Batcher(8, 1000, lambda b: sizes.append(len(b)))
        batcher.submit([(1, 0, time.monotonic())])
        batcher.drain()
        batcher.close()
        self.assertEqual(sizes, [1])


class DetailTest(unittest.TestCase):
    def test_a_server_result_and_its_reason(self):
        detail = serve.parse_detail("\n".join(
            ':::MLLOG {"key": "%s", "value": %s, "time_ms": 1}' % kv for kv in (
                ("result_validity", '"INVALID"'),
                ("result_invalid_reason", '"Reduce target QPS to improve latency. "'),
                ("result_query_count", "200"), ("result_overlatency_query_count", "50"),
                ("result_completed_samples_per_sec", "80.0"),
                ("result_scheduled_samples_per_sec", "100.5"),
                ("result_99.00_percentile_latency_ns", "9000000"),
                ("early_stopping_met", "true"))))
        counters, label, seconds = serve.counters_from_detail(detail, "Server", 16)
        self.assertEqual(counters["samples/s"], 80.0)
        self.assertEqual(counters["tokens/s"], 1280.0)
        self.assertEqual(counters["goodput"], 60.0)
        self.assertEqual(counters["p99_ms"], 9.0)
        self.assertEqual(counters["valid"], 0)
        self.assertEqual(label, "scenario:Server INVALID: Reduce target QPS to improve latency.")
        self.assertAlmostEqual(seconds, 1 / 80)


@unittest.skipUnless(HAS_RUNTIME, "torch or mlperf_loadgen is not installed")
class LoadGenTest(unittest.TestCase):
    def setUp(self):
        import torch
        torch.manual_seed(0)
        self.model = torch.nn.Linear(16, 4)
        self.inputs = torch.randn(4, 16)
        self.seen = []
        self.forward = lambda x: (self.seen.append(x.shape[0]), self.model(x))[1]

    def test_two_scenarios_report_loadgens_counters_and_keep_its_logs(self):
        for scenario in ("SingleStream", "Offline"):
            with tempfile.TemporaryDirectory() as logs:
                counters, label, _ = serve.serve(
                    self.forward, self.inputs, scenario, logs, target_qps=500, min_s=0.1,
                    min_queries=16, max_batch=4)
                self.assertGreater(counters["samples/s"], 0, scenario)
                self.assertLessEqual(counters["p50_ms"], counters["p99_ms"])
                self.assertRegex(label, rf"^scenario:{scenario} (VALID|INVALID)")
                with open(f"{logs}/mlperf_log_detail.txt") as f:
                    self.assertIn(f'"effective_scenario", "value": "{scenario}"', f.read())
        self.assertTrue(all(1 <= b <= 4 for b in self.seen), self.seen)
        self.assertIn(4, self.seen, "Offline fills batches")

    def test_a_bound_no_server_meets_is_invalid(self):
        with tempfile.TemporaryDirectory() as logs:
            counters, label, _ = serve.serve(
                self.forward, self.inputs, "Server", logs, target_qps=200, min_s=0.2,
                min_queries=16, latency_bound_ms=0.001)
        self.assertEqual(counters["valid"], 0)
        self.assertEqual(counters["goodput"], 0)
        self.assertTrue(label.startswith("scenario:Server INVALID: "), label)


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(HAS_RUNTIME, "torch or mlperf_loadgen is not installed")
class PybenchServeTest(unittest.TestCase):
    """pybench's --scenario: bench's names, LoadGen's counters, bench's refusals."""

    def pybench(self, *args):
        from tests.test_pybench import pybench_outputs
        return pybench_outputs(*args)

    def test_names_match_bench_and_a_run_reports_loadgens_counters(self):
        import json
        import os
        common = ["--benchmark_filter=GPT2/nano/cpu/serve/", "--devices=cpu", "--seq=16",
                  "--max_batch=4", "--target_qps=100,200", "--scenario=Server,Offline"]
        code, out, err = self.pybench(*common, "--benchmark_list_tests")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(line.split("/py_")[0] for line in out.split()), [
            "GPT2/nano/cpu/serve/scenario:Offline/max_batch:4/seq:16/fp32",
            "GPT2/nano/cpu/serve/scenario:Server/qps:100/max_batch:4/seq:16/fp32",
            "GPT2/nano/cpu/serve/scenario:Server/qps:200/max_batch:4/seq:16/fp32"])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "py.json")
            code, _, err = self.pybench(
                "--benchmark_filter=GPT2/nano/cpu/serve/", "--devices=cpu", "--seq=16",
                "--max_batch=4", "--scenario=Offline", "--target_qps=300", "--warmup_s=0",
                "--serve_min_s=0.1", "--serve_min_queries=16", "--peak_flops=1e12",
                f"--benchmark_out={path}")
            self.assertEqual(code, 0, err)
            with open(path) as f:
                [e] = json.load(f)["benchmarks"]
            self.assertEqual(e["iterations"], 1)
            self.assertGreater(e["samples/s"], 0)
            self.assertAlmostEqual(e["tokens/s"] / e["samples/s"], 16)
            self.assertRegex(e["label"], r"^scenario:Offline (VALID|INVALID)")
            self.assertEqual(len(os.listdir(os.path.join(tmp, "py.loadgen"))), 1)

    def test_refusals_name_the_valid_choices(self):
        for args, expected in ((["--scenario=Burst"], "SingleStream, MultiStream, Server"),
                               (["--scenario=Server", "--latency_bound_ms=0"], "> 0"),
                               (["--scenario=Server", "--target_qps=x"], "not a rate")):
            code, _, err = self.pybench("--benchmark_filter=GPT2/nano/cpu/serve/", *args)
            self.assertEqual(code, 2, (args, err))
            self.assertIn(expected, err, args)
