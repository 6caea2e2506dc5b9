"""pysuite's serve: the batcher (every request run once, batches within the
limit), LoadGen's results through its Python bindings, an INVALID result,
Server's peak search; and tools/pybench --compare's table of C++ beside
Python."""
import importlib.util
import json
import os
import tempfile
import threading
import time
import unittest

from ltb.pysuite import serve
from tests.helpers import doc, entry

# LoadGen 6.0's messages of a peak search (loadgen.cc FindPeakPerformanceMode).
LINE = ':::MLLOG {"key": "%s", "value": %s, "time_ms": 1.0, "namespace": "mlperf::logging"}'
FOUND = [LINE % kv for kv in (
    ("generic_message", '"FindPeakPerformance: Check validity of the base settings field: '
                        '50.000000"'),
    ("generic_message", '"FindBoundaries: Checking fields [50.000000, 100.000000)"'),
    ("generic_message", '"FindPeakPerformance: Found peak performance field: 575.500000"'),
    ("result_validity", '"VALID"'), ("result_completed_samples_per_sec", "452.5"),
    ("effective_target_latency_ns", "50000000"))]
MISSED = [LINE % kv for kv in (
    ("generic_message", '"FindPeakPerformance: Check validity of the base settings field: '
                        '50.000000"'),
    ("error_runtime", '"FindPeakPerformance: Initial lower bound does not satisfy performance '
                      'constraints, msg: Reduce target QPS to improve latency."'),
    ("result_validity", '"INVALID"'), ("result_completed_samples_per_sec", "51.25"))]

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


    def test_a_handed_call_runs_on_the_thread_that_runs_batches(self):
        # As bench's Batcher::RunOnWorker: once, on the worker's thread,
        # between batches; what it raises reaches the caller, and the worker
        # serves on.
        import threading

        threads = set()
        batcher = serve.Batcher(4, 100, lambda b: threads.add(threading.get_ident()))
        called = []
        batcher.call(lambda: called.append(threading.get_ident()))
        self.assertEqual(len(called), 1)
        self.assertNotEqual(called[0], threading.get_ident())

        def refuse():
            raise RuntimeError("refused")

        with self.assertRaisesRegex(RuntimeError, "refused"):
            batcher.call(refuse)
        batcher.submit([(i, i, time.monotonic()) for i in range(9)])
        batcher.drain()
        batcher.close()
        self.assertEqual(threads, {called[0]})
        self.assertEqual(len(called), 1)
        self.assertEqual(batcher.batches, 3)


class DetailTest(unittest.TestCase):
    def test_unmet_early_stopping_says_loadgens_counts_and_the_flag(self):
        # As bench's CountersFromDetail.EarlyStoppingUnmetSaysLoadGensCountsAndTheFlag.
        _, label, _ = serve.counters_from_detail({
            "result_validity": "INVALID", "early_stopping_met": False,
            "early_stopping_result": " * Only processed 544 queries.  * Need to process at "
                                     "least 662 queries for early stopping."}, "MultiStream")
        self.assertEqual(label, "scenario:MultiStream INVALID (early stopping not met: 544 "
                                "queries of the 662 its percentile's bound needs; "
                                "--serve_min_queries=662 runs them)")
        _, label, _ = serve.counters_from_detail({
            "result_validity": "INVALID",
            "result_invalid_reason": "Reduce target QPS to improve latency. ",
            "early_stopping_met": False,
            "early_stopping_result": " * Run unsuccessful.  * Processed 120 queries.  * Would "
                                     "need to run at least 57 more queries,  with the run "
                                     "being successful if every additional  query were under "
                                     "latency."}, "Server")
        self.assertEqual(label, "scenario:Server INVALID: Reduce target QPS to improve "
                                "latency. (early stopping not met: 120 queries: 57 more, all "
                                "within the bound, would be needed)")
        self.assertEqual(serve.early_stopping_why(""),
                         "too few queries for the percentile's bound")
        # With none over the bound the run was only too short (93 queries of
        # the 459 a p99 needs); some over, LoadGen's count assumes the rest in.
        unmet = (" * Run unsuccessful.  * Processed 93 queries.  * Would need to run at least "
                 "366 more queries,  with the run being successful if every additional  "
                 "query were under latency.")
        _, label, _ = serve.counters_from_detail({
            "result_validity": "INVALID", "early_stopping_met": False,
            "early_stopping_result": unmet, "result_overlatency_query_count": 0}, "Server")
        self.assertEqual(label, "scenario:Server INVALID (early stopping not met: 93 queries, "
                                "none over the bound, too few for its percentile: 366 more "
                                "would be needed; --serve_min_queries=459 runs them)")
        self.assertEqual(serve.early_stopping_why(unmet, 3),
                         "93 queries, 3 of them over the bound: 366 more, all within it, "
                         "would be needed")
        # Served generation: TTFT's and TPOT's results, the unmet one named.
        _, label, _ = serve.counters_from_detail({
            "result_validity": "INVALID", "early_stopping_met": False,
            "early_stopping_ttft_result": " * Run successful.",
            "early_stopping_tpot_result": unmet, "result_overlatency_query_count": 0},
            "Server")
        self.assertEqual(label, "scenario:Server INVALID (early stopping not met: TPOT: 93 "
                                "queries: 366 more, all within the bound, would be needed)")
        _, label, _ = serve.counters_from_detail({
            "result_validity": "INVALID", "early_stopping_met": False,
            "early_stopping_ttft_result": " * Only processed 144 queries.  * Need to process "
                                          "at least 1001 queries for early stopping.",
            "early_stopping_tpot_result": " * Only processed 144 queries.  * Need to process "
                                          "at least 662 queries for early stopping."},
            "MultiStream")
        self.assertEqual(label, "scenario:MultiStream INVALID (early stopping not met: TTFT: "
                                "144 queries of the 1001 its percentile's bound needs; "
                                "--serve_min_queries=1001 runs them; TPOT: 144 queries of "
                                "the 662 its percentile's bound needs; "
                                "--serve_min_queries=662 runs them)")

    def test_offlines_query_is_sized_as_loadgen_sizes_it(self):
        # As bench's spec_test: max(min count, 1.1 x rate x whole-ms duration).
        for args, samples in (((2000, 1, 32), 2200), ((20, 1, 32), 32), ((10, 1, 200), 200),
                              ((10, 3, 32), 33), ((1e6, 0.00209, 1), 2200), ((0, 0, 1), 1)):
            self.assertEqual(serve.offline_query_samples(*args), samples, args)

    def test_the_streams_expected_latency_is_a_querys_time(self):
        # As bench's SetExpectedLatency.SetsTheStreamsIntervalFromAQuerysTime.
        class Settings:
            single_stream_expected_latency_ns = 1e6
            multi_stream_expected_latency_ns = 8e6
        for scenario, single, multi in (("SingleStream", 250e3, 8e6),
                                        ("MultiStream", 1e6, 250e3),
                                        ("Server", 1e6, 8e6), ("Offline", 1e6, 8e6)):
            settings = Settings()
            serve.set_expected_latency(settings, scenario, 0.00025, 1)
            self.assertAlmostEqual(settings.single_stream_expected_latency_ns, single)
            self.assertAlmostEqual(settings.multi_stream_expected_latency_ns, multi)
        settings = Settings()
        serve.set_expected_latency(settings, "SingleStream", None, 1)
        self.assertEqual(settings.single_stream_expected_latency_ns, 1e6)
        serve.set_expected_latency(settings, "SingleStream", 1e-6, 30)
        self.assertAlmostEqual(settings.single_stream_expected_latency_ns, 60e3)

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


    def test_multistream_reports_its_queries_latencies_beside_its_samples(self):
        # LoadGen 6.0.17's values for a run of GPT2/nano, 8 samples a query
        # in batches of 4: a query's p99 (its last sample) is above the
        # samples' p99, and is the figure MLPerf judges MultiStream by.
        detail = serve.parse_detail("\n".join(
            ':::MLLOG {"key": "%s", "value": %s, "time_ms": 1}' % kv for kv in (
                ("effective_samples_per_query", "8"), ("result_validity", '"VALID"'),
                ("result_mean_query_latency_ns", "2850226"),
                ("result_50.00_percentile_per_query_latency_ns", "1608555"),
                ("result_90.00_percentile_per_query_latency_ns", "6635601"),
                ("result_99.00_percentile_per_query_latency_ns", "11530992"),
                ("result_99.90_percentile_per_query_latency_ns", "11530992"),
                ("result_99.00_percentile_latency_ns", "11081805"))))
        counters, _, seconds = serve.counters_from_detail(detail, "MultiStream")
        self.assertAlmostEqual(counters["samples/s"], 8 / 2850226e-9)
        self.assertAlmostEqual(counters["p99_ms"], 11.081805)
        self.assertAlmostEqual(counters["query_latency_mean_ms"], 2.850226)
        self.assertAlmostEqual(counters["query_p50_ms"], 1.608555)
        self.assertAlmostEqual(counters["query_p90_ms"], 6.635601)
        self.assertAlmostEqual(counters["query_p99_ms"], 11.530992)
        self.assertAlmostEqual(counters["query_p99.9_ms"], 11.530992)
        single, _, _ = serve.counters_from_detail(detail, "SingleStream")
        self.assertFalse([k for k in single if k.startswith("query_")])


class PeakTest(unittest.TestCase):
    def test_a_peak_found_is_the_counter_and_the_time(self):
        counters, label, seconds = serve.counters_from_log(
            "\n".join(FOUND), "Server", find_peak=True, target_qps=50)
        self.assertEqual(counters["peak_qps"], 575.5)
        self.assertEqual(counters["samples/s"], 452.5)
        self.assertEqual(counters["bound_ms"], 50)
        self.assertEqual(label, "scenario:Server peak 575.5 QPS within the bound; at the peak "
                                "VALID")
        self.assertAlmostEqual(seconds, 1 / 575.5)

    def test_a_start_that_misses_the_bound_is_no_peak_with_loadgens_reason(self):
        counters, label, seconds = serve.counters_from_log(
            "\n".join(MISSED), "Server", find_peak=True, target_qps=50)
        self.assertEqual(counters["peak_qps"], 0)
        self.assertEqual(label, "scenario:Server no peak: the starting rate 50 QPS misses the "
                                "bound: Reduce target QPS to improve latency.")
        self.assertAlmostEqual(seconds, 1 / 51.25)
        # The benchmark's error, as bench's: its time (1 / 51.25 s) would
        # read as a rate above a search that found 40 QPS.
        self.assertEqual(serve.no_peak_error(counters, label, True),
                         "no peak: the starting rate 50 QPS misses the bound: Reduce target "
                         "QPS to improve latency. (that test: samples/s 51.25); search from "
                         "a lower --target_qps")
        found, label, _ = serve.counters_from_log("\n".join(FOUND), "Server", find_peak=True,
                                                  target_qps=50)
        self.assertIsNone(serve.no_peak_error(found, label, True))

    def test_without_find_peak_there_is_no_peak_counter(self):
        counters, _, _ = serve.counters_from_log("\n".join(FOUND), "Server")
        self.assertNotIn("peak_qps", counters)

    def test_the_search_resolves_one_percent_of_the_start(self):
        self.assertEqual([serve.peak_search_decimals(q) for q in (1, 10, 50, 100, 400, 0.05)],
                         [2, 1, 1, 0, 0, 4])


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

    def test_the_streams_expected_latency_is_a_query_timed_in_the_warm_up(self):
        def forward(x):  # at least 2 ms a batch
            time.sleep(0.002)
            return x
        for scenario, key, batches in (("SingleStream", "single", 1),
                                       ("MultiStream", "multi", 2)):
            with tempfile.TemporaryDirectory() as logs:
                serve.serve(forward, self.inputs, scenario, logs, min_s=0.1, min_queries=8,
                            max_batch=2, samples_per_query=4)
                with open(f"{logs}/mlperf_log_detail.txt") as f:
                    detail = serve.parse_detail(f.read())
            expected = detail[f"requested_{key}_stream_expected_latency_ns"]
            # A query is one batch (SingleStream) or two of 2 samples: no
            # shorter than its sleeps, and not LoadGen's default (1 or 8 ms).
            self.assertGreaterEqual(expected, batches * 2e6, scenario)
            self.assertNotIn(expected, (1e6, 8e6), scenario)

    def test_a_bound_no_server_meets_is_invalid(self):
        with tempfile.TemporaryDirectory() as logs:
            counters, label, _ = serve.serve(
                self.forward, self.inputs, "Server", logs, target_qps=200, min_s=0.2,
                min_queries=16, latency_bound_ms=0.001)
        self.assertEqual(counters["valid"], 0)
        self.assertEqual(counters["goodput"], 0)
        self.assertTrue(label.startswith("scenario:Server INVALID: "), label)

    def test_find_peak_finds_a_peak_between_the_start_and_what_the_server_holds(self):
        def forward(x):  # 2 ms a sample, one at a time: at most 500 samples/s
            time.sleep(0.002)
            return x
        with tempfile.TemporaryDirectory() as logs:
            counters, label, seconds = serve.serve(
                forward, self.inputs, "Server", logs, target_qps=50, min_s=0.2,
                min_queries=16, max_batch=1, latency_bound_ms=50, find_peak=True)
            with open(f"{logs}/mlperf_log_detail.txt") as f:
                detail = f.read()
        self.assertIn("FindPeakPerformance: Found peak performance field", detail)
        # A 0.2 s test can hide a backlog of up to the bound's 50 ms: the peak
        # found is at most 1.25 times the 500 a second the server can do.
        self.assertGreaterEqual(counters["peak_qps"], 50)
        self.assertLess(counters["peak_qps"], 1000)
        self.assertEqual(seconds, 1 / counters["peak_qps"])
        self.assertRegex(label, r"^scenario:Server peak [0-9.]+ QPS within the bound; at the "
                                r"peak (VALID|INVALID)")
        # The batcher served every test of the search; the counters are the peak's.
        self.assertNotIn("batches", counters)
        self.assertTrue(label.endswith("; " + serve.FIND_PEAK_BATCHES), label)

    def test_find_peak_outside_server_is_refused(self):
        with tempfile.TemporaryDirectory() as logs, self.assertRaisesRegex(
                ValueError, "Server scenario only"):
            serve.serve(self.forward, self.inputs, "Offline", logs, find_peak=True)
        self.assertEqual(self.seen, [])


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
            # 1.1 x 100 QPS x 1 s: Offline's one query holds 110 samples.
            "GPT2/nano/cpu/serve/scenario:Offline/samples:110/max_batch:4/seq:16/fp32",
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
            self.assertTrue(e["name"].startswith(
                "GPT2/nano/cpu/serve/scenario:Offline/samples:33/"), e["name"])
            with open(os.path.join(tmp, "py.loadgen", os.listdir(
                    os.path.join(tmp, "py.loadgen"))[0], "mlperf_log_detail.txt")) as f:
                detail = serve.parse_detail(f.read())
            self.assertEqual(detail["effective_samples_per_query"], 33)
            self.assertEqual(e["iterations"], 1)
            self.assertGreater(e["samples/s"], 0)
            self.assertAlmostEqual(e["tokens/s"] / e["samples/s"], 16)
            self.assertRegex(e["label"], r"^scenario:Offline (VALID|INVALID)")
            self.assertEqual(len(os.listdir(os.path.join(tmp, "py.loadgen"))), 1)

    def test_repetitions_each_run_a_test_and_a_search_with_no_peak_is_an_error(self):
        import json
        import os
        common = ["--benchmark_filter=GPT2/nano/cpu/serve/", "--devices=cpu", "--seq=16",
                  "--max_batch=4", "--warmup_s=0", "--serve_min_s=0.1",
                  "--serve_min_queries=16", "--peak_flops=1e12"]
        with tempfile.TemporaryDirectory() as tmp:
            # --benchmark_repetitions ran one test and wrote one entry, as if
            # 1; now each repetition is a test, with its own logs, and the
            # aggregates follow, as bench's.
            path = os.path.join(tmp, "py.json")
            code, _, err = self.pybench(*common, "--scenario=Offline", "--target_qps=300",
                                        "--benchmark_repetitions=2", f"--benchmark_out={path}")
            self.assertEqual(code, 0, err)
            with open(path) as f:
                entries = json.load(f)["benchmarks"]
            self.assertEqual([e.get("repetition_index", e.get("aggregate_name"))
                              for e in entries], [0, 1, "mean", "median", "stddev", "cv"])
            self.assertEqual(sorted(os.listdir(os.path.join(tmp, "py.loadgen"))), [
                "GPT2_nano_cpu_serve_scenario-Offline_samples-33_max_batch-4_seq-16_fp32",
                "GPT2_nano_cpu_serve_scenario-Offline_samples-33_max_batch-4_seq-16_fp32"
                "_repetition1"])
            # A bound no rate meets: no peak, the benchmark's error (exit 1),
            # naming the starting test's figures, as bench's.
            path = os.path.join(tmp, "peak.json")
            code, _, err = self.pybench(*common, "--scenario=Server", "--target_qps=50",
                                        "--find_peak=true", "--latency_bound_ms=0.000001",
                                        f"--benchmark_out={path}")
            self.assertEqual(code, 1, err)
            with open(path) as f:
                [e] = json.load(f)["benchmarks"]
            self.assertTrue(e["error_occurred"])
            self.assertTrue(e["error_message"].startswith(
                "no peak: the starting rate 50 QPS misses the bound: "), e["error_message"])
            self.assertRegex(e["error_message"], r"\(that test: samples/s [0-9.e+]+, p99_ms "
                                                 r"[0-9.e+]+\); search from a lower "
                                                 r"--target_qps$")
            self.assertNotIn("peak_qps", e)

    def test_refusals_name_the_valid_choices(self):
        for args, expected in ((["--scenario=Burst"], "SingleStream, MultiStream, Server"),
                               (["--scenario=Server", "--latency_bound_ms=0"], "> 0"),
                               (["--scenario=Server", "--latency_bound_ms=inf"], "> 0"),
                               # 0 was LoadGen's 100 ms without a word.
                               (["--scenario=Server", "--serve_phase=generate",
                                 "--ttft_bound_ms=0"], "--ttft_bound_ms=0: the bound must be"),
                               (["--scenario=Server", "--serve_phase=generate",
                                 "--tpot_bound_ms=0"], "--tpot_bound_ms=0: the bound must be"),
                               (["--scenario=Server", "--serve_phase=generate",
                                 "--ttft_bound_ms=1e-07"],
                                "--ttft_bound_ms=1e-07: the bound must be a number of "
                                "milliseconds > 0, at least 1e-06 (a nanosecond, LoadGen's "
                                "unit)"),
                               (["--scenario=Server", "--latency_bound_ms=5e-07"],
                                "--latency_bound_ms=5e-07: the bound must be"),
                               (["--scenario=Server", "--target_qps=x"], "not a rate"),
                               # Names hold six digits: these two would share one.
                               (["--scenario=Server", "--target_qps=12.3456789,12.3456781"],
                                "--target_qps=12.3456789: a benchmark's name holds it to six "
                                "significant digits (12.3457)"),
                               # LoadGen would run no minimum duration.
                               (["--scenario=Server", "--serve_min_s=nan"],
                                "--serve_min_s=nan: LoadGen's minimum duration must be"),
                               (["--scenario=Server", "--serve_min_s=inf"], "--serve_min_s"),
                               # Past LoadGen's whole milliseconds, as bench refuses them.
                               (["--scenario=Offline", "--serve_min_s=1e300"],
                                "--serve_min_s=1e+300: LoadGen's minimum duration must be a "
                                "number of seconds from 0 to 1e+06"),
                               (["--scenario=Offline", "--target_qps=1,1e9"],
                                "Offline at --target_qps=1e+09 for --serve_min_s=1: its one "
                                "query would hold 1.1e+09 samples"),
                               (["--serve_min_queries=99999999999999999999"],
                                "--serve_min_queries=99999999999999999999: LoadGen's minimum "
                                "query count must be a whole number >= 1"),
                               (["--max_batch=0"], "--max_batch must be a whole number >= 1"),
                               (["--scenario=MultiStream", "--samples_per_query=-3"],
                                "--samples_per_query=-3: MultiStream's samples a query must "
                                "be a whole number >= 1")):
            code, _, err = self.pybench("--benchmark_filter=GPT2/nano/cpu/serve/", *args)
            self.assertEqual(code, 2, (args, err))
            self.assertIn(expected, err, args)

    def test_find_peak_names_servers_start_and_is_refused_without_server(self):
        common = ["--benchmark_filter=GPT2/nano/cpu/serve/", "--devices=cpu", "--seq=16",
                  "--max_batch=4", "--target_qps=20", "--find_peak=true"]
        code, out, err = self.pybench(*common, "--scenario=Server,Offline",
                                      "--benchmark_list_tests")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(line.split("/py_")[0] for line in out.split()), [
            # 1.1 x 20 QPS x 1 s is 22: the minimum count's 32, as by default.
            "GPT2/nano/cpu/serve/scenario:Offline/max_batch:4/seq:16/fp32",
            "GPT2/nano/cpu/serve/scenario:Server/find_peak_from:20/max_batch:4/seq:16/fp32"])
        code, out, err = self.pybench(*common, "--scenario=Offline,SingleStream")
        self.assertEqual(code, 2, err)
        self.assertIn("Server scenario only; valid: --scenario=Server", err)
        self.assertEqual(out, "")

    def test_what_a_query_or_a_batch_holds_is_in_the_name_where_not_the_default(self):
        """MultiStream's samples a query and the batcher's wait (not
        SingleStream's, whose batches hold one sample) change what is
        served: two runs that differ in them have two names, bench's."""
        from tests.test_pybench import runnable_bench
        flt = "--benchmark_filter=GPT2/nano/cpu/serve/"
        base = [flt, "--devices=cpu", "--seq=16", "--max_batch=4",
                "--scenario=SingleStream,MultiStream,Offline", "--benchmark_list_tests"]
        prefix = "GPT2/nano/cpu/serve/scenario:"
        for extra, want in (
                ([], [f"{prefix}MultiStream/max_batch:4/seq:16/fp32",
                      f"{prefix}Offline/max_batch:4/seq:16/fp32",
                      f"{prefix}SingleStream/max_batch:4/seq:16/fp32"]),
                (["--samples_per_query=8", "--batch_timeout_us=2000"],
                 [f"{prefix}MultiStream/max_batch:4/seq:16/fp32",
                  f"{prefix}Offline/max_batch:4/seq:16/fp32",
                  f"{prefix}SingleStream/max_batch:4/seq:16/fp32"]),
                (["--samples_per_query=4", "--batch_timeout_us=500"],
                 [f"{prefix}MultiStream/max_batch:4/samples_per_query:4/batch_timeout_us:500/"
                  "seq:16/fp32",
                  f"{prefix}Offline/max_batch:4/batch_timeout_us:500/seq:16/fp32",
                  f"{prefix}SingleStream/max_batch:4/seq:16/fp32"])):
            code, out, err = self.pybench(*base, *extra)
            self.assertEqual(code, 0, err)
            names = sorted(line.split("/py_")[0] for line in out.split())
            self.assertEqual(names, want, extra)
            bench = runnable_bench()
            if bench is None:
                continue
            import subprocess
            proc = subprocess.run([bench, *base, *extra], capture_output=True, text=True,
                                  timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(sorted(n.split("/iterations:")[0] for n in proc.stdout.split()),
                             want, extra)

    def test_servers_bounds_other_than_loadgens_are_in_the_name(self):
        """Server's p99 bounds decide its validity, its goodput and the peak
        its search finds: two runs at other bounds have two names, bench's;
        LoadGen's own 100 ms keeps the name."""
        from tests.test_pybench import runnable_bench
        prefix = "GPT2/nano/cpu/serve/scenario:"
        forward = ["--benchmark_filter=GPT2/nano/cpu/serve/", "--devices=cpu", "--seq=16",
                   "--max_batch=4", "--scenario=Server,Offline", "--target_qps=20"]
        generate = ["--benchmark_filter=GPT2/nano/cpu/serve/", "--devices=cpu",
                    "--max_batch=4", "--scenario=Server", "--target_qps=20",
                    "--prompt_len=4:8", "--output_len=3"]
        for base, extra, want in (
                (forward, ["--latency_bound_ms=100"],
                 [f"{prefix}Offline/max_batch:4/seq:16/fp32",
                  f"{prefix}Server/qps:20/max_batch:4/seq:16/fp32"]),
                (forward, ["--latency_bound_ms=37.5", "--find_peak=true"],
                 [f"{prefix}Offline/max_batch:4/seq:16/fp32",
                  f"{prefix}Server/find_peak_from:20/max_batch:4/seq:16/"
                  "latency_bound_ms:37.5/fp32"]),
                (generate, ["--ttft_bound_ms=250", "--tpot_bound_ms=100"],
                 [f"{prefix}Server/qps:20/max_batch:4/prompt:4:8/output:3/"
                  "ttft_bound_ms:250/fp32"]),
                (generate, ["--ttft_bound_ms=250", "--tpot_bound_ms=20"],
                 [f"{prefix}Server/qps:20/max_batch:4/prompt:4:8/output:3/"
                  "ttft_bound_ms:250/tpot_bound_ms:20/fp32"])):
            code, out, err = self.pybench(*base, *extra, "--benchmark_list_tests")
            self.assertEqual(code, 0, err)
            self.assertEqual(sorted(line.split("/py_")[0] for line in out.split()), want,
                             extra)
            bench = runnable_bench()
            if bench is None:
                continue
            import subprocess
            proc = subprocess.run([bench, *base, *extra, "--benchmark_list_tests"],
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(sorted(n.split("/iterations:")[0] for n in proc.stdout.split()),
                             want, extra)

    # Served as bench serves them (batch first).
    FAMILIES = ("Encoder", "EncDec", "Whisper")
    OFFLINE = ["--devices=cpu", "--seq=16", "--max_batch=4", "--scenario=Offline",
               "--target_qps=300", "--warmup_s=0", "--serve_min_s=0.1",
               "--serve_min_queries=16"]

    def test_encoder_encdec_and_whisper_are_listed_as_bench_lists_them(self):
        from tests.test_pybench import runnable_bench
        flt = "--benchmark_filter=(Encoder|EncDec|Whisper)/nano/cpu/serve"
        args = [flt, "--scenario=Offline,Server", "--benchmark_list_tests"]
        code, out, err = self.pybench(*args)
        self.assertEqual(code, 0, err)
        names = [line.replace("/py_eager/", "/") for line in out.split()]
        self.assertEqual({n.split("/")[0] for n in names}, set(self.FAMILIES))
        self.assertIn("Whisper/nano/cpu/serve/scenario:Offline/max_batch:8/fp32/iterations:1/"
                      "manual_time", names)  # its encode, which has no seq
        bench = runnable_bench()
        if bench is None:
            self.skipTest("no built bench (LTB_BENCH)")
        import subprocess
        proc = subprocess.run([bench, *args], capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(names, [n for n in proc.stdout.split() if "/serve/" in n])

    def test_an_offline_run_serves_every_sample_with_benchs_counters(self):
        from unittest import mock
        from tests.test_pybench import bench_json, runnable_bench
        bench = runnable_bench()
        original = serve.serve
        for family in self.FAMILIES:
            flt = f"--benchmark_filter=^{family}/nano/cpu/serve/scenario:Offline/"
            rows = []

            def counting(forward, *args, **kwargs):
                def counted(batch):
                    rows.append(batch.shape[0])
                    return forward(batch)
                return original(counted, *args, **kwargs)
            with self.subTest(family), tempfile.TemporaryDirectory() as tmp, \
                    mock.patch.object(serve, "serve", counting):
                path = os.path.join(tmp, "py.json")
                code, _, err = self.pybench(flt, *self.OFFLINE, f"--benchmark_out={path}")
                self.assertEqual(code, 0, err)
                with open(path) as f:
                    [py] = json.load(f)["benchmarks"]
                [folder] = os.listdir(os.path.join(tmp, "py.loadgen"))
                with open(os.path.join(tmp, "py.loadgen", folder, "mlperf_log_detail.txt")) as f:
                    detail = {e["key"]: e["value"] for e in serve.detail_entries(f.read())}
                issued = detail["generated_samples_per_query"] * detail["generated_query_count"]
                self.assertGreater(issued, 0)
                # The warm-up ran each batch size once first, on the
                # batcher's thread; then the test's batches.
                self.assertEqual(rows[:4], [1, 2, 3, 4])
                rows = rows[4:]
                self.assertEqual(sum(rows), issued)
                self.assertTrue(all(1 <= r <= 4 for r in rows), rows)
                self.assertEqual(py["batches"], len(rows))
                self.assertGreater(py["samples/s"], 0)
                if bench is None:
                    continue
                with open(bench_json(bench, tmp, flt, *self.OFFLINE,
                                     f"--serve_log_dir={tmp}/bench.loadgen")) as f:
                    [cpp] = json.load(f)["benchmarks"]
                self.assertEqual(py["name"].replace("/py_eager/", "/"), cpp["name"])
                self.assertEqual(set(py), set(cpp))

    def test_the_served_forward_of_a_batch_is_the_phases_output_row_by_row(self):
        import torch
        from ltb.pysuite import flags, sweep, workloads
        for family in self.FAMILIES:
            with self.subTest(family):
                args = flags.parse_flags([
                    f"--benchmark_filter=^{family}/nano/cpu/serve/scenario:Offline/",
                    "--devices=cpu", "--seq=16", "--max_batch=3", "--scenario=Offline"])
                [spec] = sweep.specs(args)
                w = workloads.Workload(spec, args)
                with torch.inference_mode():
                    phase = w.infer()  # the phase's own inputs, in its own layout
                    if family == "Encoder":
                        phase = phase.transpose(0, 1)  # (T, B, d) -> (B, T, d)
                    batched = w.serve_forward(w.serve_inputs)
                    self.assertEqual(batched.shape[0], 3)
                    torch.testing.assert_close(batched, phase, rtol=1e-5, atol=1e-5)
                    for i in range(3):
                        torch.testing.assert_close(
                            w.serve_forward(w.serve_inputs[i:i + 1])[0], batched[i],
                            rtol=1e-4, atol=1e-5)


NAME = "{family}/cpu/serve/scenario:{scenario}/max_batch:8/{rest}fp32"


def served(family, scenario, rest="", py=False, **counters):
    name = NAME.format(family=family, scenario=scenario, rest=rest)
    return entry(name + ("/py_eager" if py else ""), 10.0, **counters)


def serve_docs():
    """A bench file and a tools/pybench file of the same serve benchmarks,
    and one that only bench ran."""
    latencies = dict(p50_ms=5.0, p90_ms=8.0, p99_ms=12.0)
    cpp, py = [], []
    for side, out, scale in ((False, cpp, 1.0), (True, py, 1.25)):
        for family, rest in (("ResNet/resnet18", ""), ("GPT2/small", "seq:64/")):
            out.append(served(family, "Offline", rest, side, samples_per_s=40 / scale,
                              **latencies))
            out.append(served(family, "SingleStream", rest, side, samples_per_s=30,
                              p50_ms=20 * scale, p90_ms=32 * scale, p99_ms=40 * scale))
            search = served(family, "Server", "".join(("find_peak_from:10/", rest)), side,
                            samples_per_s=20, peak_qps=(24 if family[0] == "R" else 0) / scale,
                            bound_ms=100.0, **latencies)
            if not search["peak_qps"]:  # no peak: the benchmark's error, no counter
                search = {k: v for k, v in search.items() if k in (
                    "name", "run_name", "run_type", "iterations", "real_time", "cpu_time",
                    "time_unit")}
                search.update(error_occurred=True, error_message="no peak: the starting rate "
                              "10 QPS misses the bound: Reduce target QPS to improve latency.")
            out.append(search)
        out.append(served("ResNet/resnet18", "Server", "qps:20/", side, samples_per_s=19,
                          p50_ms=30.0, p90_ms=50.0, p99_ms=80 * scale, bound_ms=100.0))
        out.append(entry("ResNet/resnet18/cpu/forward/batch:8/fp32"
                         + ("/py_eager" if side else ""), 100.0, samples_per_s=80.0))
    cpp.append(served("CNN/default", "Offline", samples_per_s=500.0, **latencies))
    return (doc(cpp, libtorch_version="2.15.0"),
            doc(py, runtime="python", torch_version="2.15.0"))


class CompareTest(unittest.TestCase):
    """tools/pybench --compare BENCH.json PYBENCH.json."""

    TABLE = """\
| Benchmark | Scenario | Figure | C++ | Python | C++ vs Python |
|---|---|---|---|---|---|
| GPT2/small/cpu/max_batch:8/seq:64/fp32 | SingleStream | p90 ms | 32 | 40 | 1.25x |
| GPT2/small/cpu/max_batch:8/seq:64/fp32 | Server, search from 10 QPS | peak QPS | no peak \
| no peak | — |
| GPT2/small/cpu/max_batch:8/seq:64/fp32 | Offline | samples/s | 40 | 32 | 1.25x |
| ResNet/resnet18/cpu/max_batch:8/fp32 | SingleStream | p90 ms | 32 | 40 | 1.25x |
| ResNet/resnet18/cpu/max_batch:8/fp32 | Server, search from 10 QPS | peak QPS at p99 <= 100 ms \
| 24 | 19.2 | 1.25x |
| ResNet/resnet18/cpu/max_batch:8/fp32 | Server at 20 QPS | p99 ms | 80 | 100 | 1.25x |
| ResNet/resnet18/cpu/max_batch:8/fp32 | Offline | samples/s | 40 | 32 | 1.25x |
"""

    def compare(self, *paths):
        from tests.test_pybench import pybench_outputs
        return pybench_outputs("--compare", *paths)

    def write(self, tmp, name, document):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump(document, f)
        return path

    def test_each_family_and_scenario_side_by_side_with_the_ratio(self):
        cpp, py = serve_docs()
        with tempfile.TemporaryDirectory() as tmp:
            paths = [self.write(tmp, "bench.json", cpp), self.write(tmp, "py.json", py)]
            code, out, err = self.compare(*paths)
            self.assertEqual(code, 0, err)
            self.assertEqual(out, self.TABLE)
            # Either order: the files say which side they are.
            self.assertEqual(self.compare(*reversed(paths))[1], self.TABLE)

    def test_served_generation_pairs_tokens_and_token_latencies(self):
        from ltb.results import serving
        rest = "prompt:8:16/output:4:8/"
        cpp, py = [], []
        for side, out, scale in ((False, cpp, 1.0), (True, py, 2.0)):
            out.append(served("GPT2/nano", "Offline", rest, side, samples_per_s=10,
                              tokens_per_s=60 / scale, p99_ms=9.0))
            out.append(served("GPT2/nano", "Server", "qps:10/" + rest, side, samples_per_s=9,
                              tokens_per_s=50, p99_ms=9.0, ttft_p99_ms=4 * scale,
                              tpot_p99_ms=1.5 * scale))
            out.append(served("GPT2/nano", "Server", "find_peak_from:5/" + rest, side,
                              samples_per_s=9, peak_qps=30 / scale, ttft_bound_ms=200.0,
                              tpot_bound_ms=50.0))
        self.assertEqual(serving.rows(doc(cpp), doc(py)), [
            ("GPT2/nano/cpu/max_batch:8/prompt:8:16/output:4:8/fp32",
             "Server, search from 5 QPS", "peak QPS at TTFT p99 <= 200 ms, TPOT p99 <= 50 ms",
             "30", "15", "2.00x"),
            ("GPT2/nano/cpu/max_batch:8/prompt:8:16/output:4:8/fp32", "Server at 10 QPS",
             "TTFT, TPOT p99 ms", "4, 1.5", "8, 3", "2.00x, 2.00x"),
            ("GPT2/nano/cpu/max_batch:8/prompt:8:16/output:4:8/fp32", "Offline",
             "tokens/s", "60", "30", "2.00x")])

    def test_offlines_query_is_shown_with_its_scenario(self):
        from ltb.results import serving
        docs = [doc([served("GPT2/nano", "Offline", "samples:330/seq:16/", side,
                            samples_per_s=rate)])
                for side, rate in ((False, 900.0), (True, 600.0))]
        self.assertEqual(serving.rows(*docs), [
            ("GPT2/nano/cpu/max_batch:8/seq:16/fp32", "Offline of 330 samples",
             "samples/s", "900", "600", "1.50x")])

    def test_repetitions_are_compared_by_their_medians(self):
        # The first repetition alone (3x slower here) was compared: 0.33x.
        from ltb.results import serving
        name = NAME.format(family="CNN/nano", scenario="Offline", rest="")
        cpp = doc([entry(name, 10.0, rep=i, reps=3, samples_per_s=rate)
                   for i, rate in enumerate((101.1, 303.2, 310.0))])
        py = doc([entry(name + "/py_eager", 10.0, rep=i, reps=3, samples_per_s=rate)
                  for i, rate in enumerate((303.0, 290.0, 303.2))])
        self.assertEqual(serving.rows(cpp, py), [
            ("CNN/nano/cpu/max_batch:8/fp32", "Offline", "samples/s", "303.2", "303",
             "1.00x")])

    def test_multistream_compares_a_querys_p99_not_its_samples(self):
        # MLPerf's MultiStream figure is the p99 of a query's latency (its
        # last sample's); the samples' p99 is lower and is not compared.
        from ltb.results import serving
        docs = [doc([served("GPT2/nano", "MultiStream", "seq:16/", side, samples_per_s=900.0,
                            p99_ms=p99, query_p99_ms=query_p99)])
                for side, p99, query_p99 in ((False, 11.0, 12.0), (True, 6.8, 8.4))]
        self.assertEqual(serving.rows(*docs), [
            ("GPT2/nano/cpu/max_batch:8/seq:16/fp32", "MultiStream", "query p99 ms", "12",
             "8.4", "0.70x")])
        # A file without the query's p99 (bench before it reported one)
        # shows none rather than the samples'.
        del docs[1]["benchmarks"][0]["query_p99_ms"]
        self.assertEqual(serving.rows(*docs)[0][3:], ("12", "—", "—"))

    def test_peaks_at_different_bounds_are_not_compared(self):
        from ltb.results import serving
        rest = "find_peak_from:5/prompt:8/output:4/"
        text = [doc([served("GPT2/nano", "Server", rest, side, samples_per_s=9, peak_qps=30.0,
                            ttft_bound_ms=200.0, tpot_bound_ms=tpot)])
                for side, tpot in ((False, 50.0), (True, 40.0))]
        self.assertEqual(serving.rows(*text)[0][-1], "bounds differ: 200, 50 and 200, 40 ms")
        cpp, py = serve_docs()
        for e in py["benchmarks"]:
            if "find_peak_from" in e["name"]:
                e["bound_ms"] = 50.0
        with tempfile.TemporaryDirectory() as tmp:
            code, out, err = self.compare(self.write(tmp, "b.json", cpp),
                                          self.write(tmp, "p.json", py))
        self.assertEqual(code, 0, err)
        self.assertIn("| 24 | 19.2 | bounds differ: 100 and 50 ms |", out)

    def test_bad_input_exits_2_saying_why(self):
        cpp, py = serve_docs()
        with tempfile.TemporaryDirectory() as tmp:
            bench = self.write(tmp, "b.json", cpp)
            for paths, expected in (([bench], "two result files"),
                                    ([bench, bench], "are both bench's"),
                                    ([bench, os.path.join(tmp, "none.json")], "cannot read")):
                code, out, err = self.compare(*paths)
                self.assertEqual(code, 2, paths)
                self.assertIn(expected, err)
                self.assertEqual(out, "")
            py["benchmarks"] = [e for e in py["benchmarks"] if "/serve/" not in e["name"]]
            code, _, err = self.compare(bench, self.write(tmp, "p.json", py))
            self.assertEqual(code, 2)
            self.assertIn("no serve benchmark is in both files", err)


if __name__ == "__main__":
    unittest.main()
