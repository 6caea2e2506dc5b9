"""The serve phase in Python: a model's forward under MLPerf LoadGen's load,
through LoadGen's own Python bindings (mlperf_loadgen, the version bench links)
and the dynamic batcher of bench's lib/serve, so that a C++ and a Python
server are measured by the same load generator, the same way.

One worker thread forms batches of up to max_batch samples, or fewer once the
oldest has waited batch_timeout_us (SingleStream does not wait: one sample is
in flight), copies them into an input buffer allocated once, runs the model,
waits for the device and completes each sample. The counters are LoadGen's,
read from its detail log as lib/serve/serve.cc reads them."""
import collections
import json
import math
import os
import re
import threading
import time

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
# bench's refusal of --find_peak without Server (lib/suite/flags.cc).
FIND_PEAK_OUTSIDE_SERVER = ("--find_peak=true: LoadGen searches a peak QPS in the Server "
                            "scenario only; valid: --scenario=Server (alone or among others)")
# lib/serve/serve.cc kFindPeakBatches.
FIND_PEAK_BATCHES = ("batches left out: --find_peak's search runs several LoadGen tests, and "
                     "the counters are the peak's alone")
# The samples LoadGen's library holds (lib/serve/serve.cc kServeSamples).
SAMPLES = 64
# LoadGen tests a signal stopped, left to finish alone on their threads
# (run_test): the process then ends without waiting for them, as bench's does.
ABANDONED = []


class Worker:
    """One worker thread (its _work) over state guarded by one condition
    variable; close() stops it and waits for it."""

    def __init__(self):
        self.cv = threading.Condition()
        self.stop = False
        self.error = None
        self.abandoned = False  # a signal stopped the test: samples complete unrun
        self.pending = self.ran = None  # a handed call, and its outcome

    def call(self, fn):
        """Runs fn on the worker thread, between its steps, and returns once
        it has, re-raising what it raised: what a device keeps per thread
        (cuDNN's attention plans) is then the worker's (bench's HandedCall)."""
        with self.cv:
            self.cv.wait_for(lambda: self.pending is None)
            self.pending, self.ran = fn, None
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.ran is not None)
            ran, self.pending, self.ran = self.ran, None, None
            self.cv.notify_all()
        if isinstance(ran, BaseException):
            raise ran

    def _handed(self):
        return self.pending is not None and self.ran is None

    def _run_handed(self):
        """The worker, holding cv: runs the handed call with cv released."""
        fn = self.pending
        self.cv.release()
        try:
            fn()
            ran = True
        except Exception as e:  # noqa: BLE001 - re-raised by call()
            ran = e
        finally:
            self.cv.acquire()
        self.ran = ran
        self.cv.notify_all()

    def start(self):
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def close(self):
        with self.cv:
            self.stop = True
            self.cv.notify_all()
        self.thread.join()


class Batcher(Worker):
    """Gathers (id, index, arrived) requests into batches on one worker
    thread; run(batch) gets each batch, in arrival order."""

    def __init__(self, max_batch, timeout_us, run):
        super().__init__()
        self.max_batch = max(1, int(max_batch))
        self.timeout = timeout_us / 1e6
        self.run = run
        self.queue = collections.deque()
        self.running = False
        self.batches = 0
        self.largest = 0
        self.start()

    def submit(self, requests):
        with self.cv:
            self.queue.extend(requests)
            self.cv.notify_all()

    def drain(self):
        """Returns once every request submitted so far has run."""
        with self.cv:
            self.cv.wait_for(lambda: not self.queue and not self.running)

    def _work(self):
        with self.cv:
            while True:
                self.cv.wait_for(lambda: self.stop or self.queue or self._handed())
                if self._handed():
                    self._run_handed()
                    continue
                if not self.queue:
                    return
                # The oldest request's wait bounds the batch's.
                deadline = self.queue[0][2] + self.timeout
                while not self.stop and len(self.queue) < self.max_batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cv.wait(left)
                take = min(len(self.queue), self.max_batch)
                batch = [self.queue.popleft() for _ in range(take)]
                self.running = True
                self.batches += 1
                self.largest = max(self.largest, take)
                self.cv.release()
                try:
                    self.run(batch)
                except Exception as e:  # noqa: BLE001 - reported after the test
                    self.error = self.error or e
                finally:
                    self.cv.acquire()
                    self.running = False
                    self.cv.notify_all()


def make_sample(batch_inputs, i):
    """Sample i: row i % B of the inputs, rolled along its last dimension by
    i // B (lib/serve/serve.cc MakeSample)."""
    rows = batch_inputs.shape[0]
    row, shift = batch_inputs[i % rows], i // rows
    return (row.roll(shift, -1) if shift and row.dim() else row).clone()


def detail_entries(text):
    """The entries of LoadGen's detail log (":::MLLOG " and a JSON object a
    line) that have a value, in order."""
    mark = ":::MLLOG "
    for line in text.splitlines():
        at = line.find(mark)
        if at < 0:
            continue
        try:
            entry = json.loads(line[at + len(mark):])
        except ValueError:
            continue
        if isinstance(entry, dict) and "value" in entry:
            yield entry


def parse_detail(text):
    """LoadGen's detail log as key -> value (the last of each key)."""
    return {e["key"]: e["value"] for e in detail_entries(text) if "key" in e}


def _number(detail, key):
    try:
        return float(detail[key])
    except (KeyError, TypeError, ValueError):
        return None


def counters_from_detail(detail, scenario, tokens_per_sample=0):
    """(counters, label, seconds per sample) as lib/serve's CountersFromDetail."""
    out = {}
    if scenario == "SingleStream":
        rate = _number(detail, "result_qps_with_loadgen_overhead")
    elif scenario == "MultiStream":
        query_ns = _number(detail, "result_mean_query_latency_ns")
        per_query = _number(detail, "effective_samples_per_query")
        rate = per_query / (query_ns * 1e-9) if query_ns and per_query else None
    elif scenario == "Server":
        rate = _number(detail, "result_completed_samples_per_sec")
    else:
        rate = _number(detail, "result_samples_per_second")
    if rate is not None:
        out["samples/s"] = rate
        if tokens_per_sample > 0:
            out["tokens/s"] = rate * tokens_per_sample
    if scenario == "Server":
        for name, key in (("qps_scheduled", "result_scheduled_samples_per_sec"),):
            if _number(detail, key) is not None:
                out[name] = _number(detail, key)
        if rate is not None:
            out["qps_completed"] = rate
        queries = _number(detail, "result_query_count")
        over = _number(detail, "result_overlatency_query_count")
        if queries and over is not None and rate is not None:
            out["goodput"] = rate * (1 - over / queries)
        bound = _number(detail, "effective_target_latency_ns")
        if bound is not None:
            out["bound_ms"] = bound * 1e-6
    for name, key in (("latency_mean_ms", "result_mean_latency_ns"),
                      ("p50_ms", "result_50.00_percentile_latency_ns"),
                      ("p90_ms", "result_90.00_percentile_latency_ns"),
                      ("p99_ms", "result_99.00_percentile_latency_ns"),
                      ("p99.9_ms", "result_99.90_percentile_latency_ns")):
        if _number(detail, key) is not None:
            out[name] = _number(detail, key) * 1e-6
    if scenario == "MultiStream":
        # MLPerf judges MultiStream by a query's latency, until its last
        # sample completes, which the samples' own percentiles understate.
        for name, key in (("query_latency_mean_ms", "result_mean_query_latency_ns"),
                          ("query_p50_ms", "result_50.00_percentile_per_query_latency_ns"),
                          ("query_p90_ms", "result_90.00_percentile_per_query_latency_ns"),
                          ("query_p99_ms", "result_99.00_percentile_per_query_latency_ns"),
                          ("query_p99.9_ms", "result_99.90_percentile_per_query_latency_ns")):
            if _number(detail, key) is not None:
                out[name] = _number(detail, key) * 1e-6
    if _number(detail, "result_query_count") is not None:
        out["queries"] = _number(detail, "result_query_count")
    validity = detail.get("result_validity")
    valid = validity == "VALID"
    out["valid"] = 1 if valid else 0
    label = f"scenario:{scenario} {validity or 'no result'}"
    if not valid:
        reason = str(detail.get("result_invalid_reason", "")).rstrip()
        if reason:
            label += f": {reason}"
        if detail.get("early_stopping_met") is False:
            label += f" (early stopping not met: {early_stopping_clause(detail)})"
    return out, label, (1 / rate if rate else 0)


def _count_after(text, after):
    m = re.search(re.escape(after) + r"(\d+)", text)
    return int(m.group(1)) if m else -1


def early_stopping_why(result, over=-1):
    """Why LoadGen's early stopping was not met, in its own counts, `over`
    of Server's queries over the bound (-1: not known)
    (lib/serve/serve.cc EarlyStoppingWhy)."""
    done = _count_after(result, "Only processed ")
    needed = _count_after(result, "Need to process at least ")
    if done >= 0 and needed > 0:
        return (f"{done} queries of the {needed} its percentile's bound needs; "
                f"--serve_min_queries={needed} runs them")
    processed = _count_after(result, "Processed ")
    more = _count_after(result, "Would need to run at least ")
    if processed >= 0 and more > 0:
        # LoadGen's count assumes every further query within the bound.
        if over == 0:
            return (f"{processed} queries, none over the bound, too few for its percentile: "
                    f"{more} more would be needed; --serve_min_queries={processed + more} "
                    "runs them")
        if over > 0:
            return (f"{processed} queries, {over} of them over the bound: {more} more, all "
                    "within it, would be needed")
        return f"{processed} queries: {more} more, all within the bound, would be needed"
    return "too few queries for the percentile's bound"


def early_stopping_clause(detail):
    """The label's clause of an unmet early stopping: the sample latencies'
    result, or served generation's TTFT and TPOT results, each not met
    named (lib/serve/serve.cc EarlyStoppingClause)."""
    if "early_stopping_result" in detail:
        over = _number(detail, "result_overlatency_query_count")
        return early_stopping_why(str(detail["early_stopping_result"]),
                                  -1 if over is None else int(over))
    unmet = []
    for name, key in (("TTFT", "early_stopping_ttft_result"),
                      ("TPOT", "early_stopping_tpot_result")):
        result = str(detail.get(key, ""))
        if "unsuccessful" in result or "Only processed" in result:
            unmet.append(f"{name}: {early_stopping_why(result)}")
    return "; ".join(unmet) if unmet else early_stopping_why("")


_PEAK_FOUND = "FindPeakPerformance: Found peak performance field: "
_PEAK_FAILED = "FindPeakPerformance: Initial lower bound does not satisfy "


def peak_from_detail(text):
    """(peak QPS or None, LoadGen's reason when None) from the messages
    LoadGen's peak search logs (lib/serve/serve.cc PeakFromDetailLog)."""
    peak, why = None, ""
    for entry in detail_entries(text):
        value = entry["value"]
        if not isinstance(value, str):
            continue
        if value.startswith(_PEAK_FOUND):
            try:
                peak, why = float(value[len(_PEAK_FOUND):]), ""
            except ValueError:
                pass
        elif value.startswith(_PEAK_FAILED):
            peak = None
            why = value.split("msg: ", 1)[1] if "msg: " in value else value
    return peak, why


def with_peak(result, text, find_peak, target_qps):
    """(counters, label, seconds) with find_peak's result from the detail
    log's text, as lib/serve/serve.cc WithPeak: the peak found as `peak_qps`
    and the time 1 / peak, or 0 and LoadGen's reason."""
    counters, label, seconds = result
    if not find_peak:
        return counters, label, seconds
    peak, why = peak_from_detail(text)
    counters["peak_qps"] = peak or 0
    verdict = label.split(" ", 1)[1]
    if peak:
        return (counters, f"scenario:Server peak {peak:g} QPS within the bound; at the peak "
                f"{verdict}", 1 / peak)
    why = (why or "no peak in LoadGen's log").rstrip()
    return (counters, f"scenario:Server no peak: the starting rate {target_qps:g} QPS misses "
            f"the bound: {why}", seconds)


def no_peak_error(counters, label, find_peak):
    """The error of a peak search that found no peak (its time, the
    starting test's, would read as a rate), naming that test's samples/s
    and p99, as lib/serve/serve.cc WithPeak says it; None otherwise."""
    if not find_peak or counters.get("peak_qps"):
        return None
    why = label.split("scenario:Server ", 1)[-1].removesuffix("; " + FIND_PEAK_BATCHES)
    figures = ", ".join(f"{k} {counters[k]:.4g}"  # in bench's order
                        for k in ("samples/s", "p99_ms", "ttft_p99_ms", "tpot_p99_ms")
                        if k in counters)
    return f"{why} (that test: {figures}); search from a lower --target_qps"


def counters_from_log(text, scenario, tokens_per_sample=0, find_peak=False, target_qps=0):
    """counters_from_detail over a detail log's text, with_peak."""
    return with_peak(counters_from_detail(parse_detail(text), scenario, tokens_per_sample),
                     text, find_peak, target_qps)


def loadgen_settings(lg, scenario, *, target_qps, min_s, min_queries, find_peak=False,
                     samples_per_query=0):
    """LoadGen's settings of a test (lib/serve/serve.cc SetLoadGenSettings);
    the latency bounds are the caller's."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario '{scenario}'; valid: {', '.join(SCENARIOS)}")
    if find_peak and scenario != "Server":
        raise ValueError(FIND_PEAK_OUTSIDE_SERVER)
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = (lg.TestMode.FindPeakPerformance if find_peak
                     else lg.TestMode.PerformanceOnly)
    settings.min_duration_ms = int(min_s * 1000)
    settings.min_query_count = int(min_queries)
    settings.server_target_qps = target_qps
    settings.offline_expected_qps = target_qps
    settings.server_find_peak_qps_boundary_step_size = 1
    settings.server_find_peak_qps_decimals_of_precision = peak_search_decimals(target_qps)
    if samples_per_query > 0:
        settings.multi_stream_samples_per_query = int(samples_per_query)
    settings.performance_sample_count_override = SAMPLES
    return settings


# lib/serve/serve.h: LoadGen takes a bound in whole nanoseconds.
BOUND_MUST_BE = (": the bound must be a number of milliseconds > 0, at least 1e-06 (a "
                 "nanosecond, LoadGen's unit), or left out for LoadGen's 100 ms")


def bound_in_nanoseconds(ms):
    """Whether a bound is a number of milliseconds LoadGen can take: finite
    and at least a nanosecond (lib/serve/serve.h BoundInNanoseconds)."""
    return math.isfinite(ms) and ms * 1e6 >= 1


def bound_nanoseconds(ms):
    """A bound in LoadGen's whole nanoseconds, rounded (BoundNanoseconds)."""
    return int(round(ms * 1e6))


def offline_query_samples(target_qps, min_s, min_queries):
    """The samples of Offline's one query as LoadGen sizes it: the minimum
    count, or 1.1 x the expected rate x the minimum duration in whole
    milliseconds, whichever is more (lib/family/spec.cc OfflineQuerySamples)."""
    seconds = int(min_s * 1000) / 1000
    return max(int(min_queries), int(1.1 * seconds * target_qps))


# The longest minimum duration in seconds, and the most samples Offline's
# one query may hold (lib/serve/serve.h kMaxServeSeconds, kMaxOfflineSamples).
MAX_SERVE_SECONDS = 1e6
MAX_OFFLINE_SAMPLES = 1e9

# The most queries SingleStream's and MultiStream's expected latency lets
# LoadGen generate before a test (lib/serve/serve.h kMaxGeneratedQueries).
MAX_GENERATED_QUERIES = 1e6


def set_expected_latency(settings, scenario, query_s, min_s):
    """SingleStream's and MultiStream's expected latency from query_s, one
    query's best measured seconds, no shorter than keeps the queries LoadGen
    generates (at that interval, for twice min_s) to MAX_GENERATED_QUERIES
    (lib/serve/serve.cc SetExpectedLatency); else, or with no time, unchanged."""
    if query_s is None or not query_s > 0:
        return
    ns = max(query_s * 1e9, 2 * min_s * 1e9 / MAX_GENERATED_QUERIES)
    if scenario == "SingleStream":
        settings.single_stream_expected_latency_ns = ns
    elif scenario == "MultiStream":
        settings.multi_stream_expected_latency_ns = ns


def peak_search_decimals(target_qps):
    """The fewest decimals whose step is at most 1% of the starting rate
    (lib/serve/serve.cc PeakSearchDecimals)."""
    decimals = 0
    while decimals < 6 and 10.0 ** -decimals > 0.01 * target_qps + 1e-12:
        decimals += 1
    return decimals


def run_test(lg, settings, log_dir, worker, issue, load, unload, warm=None):
    """One LoadGen test of `settings` over SAMPLES samples, its logs in
    log_dir: warm() first runs on the worker's thread, then issue(query_samples)
    hands a query to `worker` (a Worker), which is drained and closed
    whatever happens; its error is raised. The detail log's text."""
    output = lg.LogOutputSettings()
    output.outdir = log_dir
    log = lg.LogSettings()
    log.log_output = output
    log.enable_trace = False
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(SAMPLES, SAMPLES, load, unload)
    ended, failed = threading.Event(), []

    def test():
        try:
            lg.StartTestWithLogSettings(sut, qsl, settings, log)
        except BaseException as e:  # noqa: BLE001 - raised on the waiting thread
            failed.append(e)
        finally:
            ended.set()

    # LoadGen runs on a thread of its own and calls back on its threads, so
    # that a signal raises here, in the waiting, never inside a callback,
    # where it would end the process from within LoadGen's C++.
    tester = threading.Thread(target=test, daemon=True)
    abandoned = False
    try:
        if warm is not None:
            worker.call(warm)
        tester.start()
        while not ended.wait(0.02):
            pass
        worker.drain()
    except BaseException:
        # As bench's Wait(): a test still running finishes alone, unrun, and
        # keeps its LoadGen objects.
        abandoned = worker.abandoned = tester.is_alive()
        if abandoned:
            ABANDONED.append(tester)
        raise
    finally:
        if not abandoned:
            worker.close()
            lg.DestroyQSL(qsl)
            lg.DestroySUT(sut)
    if failed:
        raise failed[0]
    if worker.error is not None:
        raise worker.error
    with open(os.path.join(log_dir, "mlperf_log_detail.txt")) as f:
        return f.read()


def serve(forward, batch_inputs, scenario, log_dir, *, target_qps=10, latency_bound_ms=0,
          samples_per_query=0, min_s=1, min_queries=32, max_batch=8, batch_timeout_us=2000,
          tokens_per_sample=0, synchronize=lambda: None, find_peak=False):
    """One LoadGen test of forward over samples made like batch_inputs (B, ...):
    (counters, label, seconds per sample). LoadGen's logs stay in log_dir.
    find_peak (Server): LoadGen's FindPeakPerformance from target_qps, as
    bench's --find_peak."""
    import mlperf_loadgen as lg
    import torch

    settings = loadgen_settings(lg, scenario, target_qps=target_qps, min_s=min_s,
                                min_queries=min_queries, find_peak=find_peak,
                                samples_per_query=samples_per_query)
    if latency_bound_ms > 0:
        settings.server_target_latency_ns = bound_nanoseconds(latency_bound_ms)
    os.makedirs(log_dir, exist_ok=True)
    samples = [None] * SAMPLES
    shape = (max_batch, *batch_inputs.shape[1:])
    staging = torch.empty_like(batch_inputs[:1].expand(shape).contiguous(
        memory_format=torch.channels_last if batch_inputs.dim() == 4
        and batch_inputs.is_contiguous(memory_format=torch.channels_last)
        and not batch_inputs.is_contiguous() else torch.contiguous_format))

    def run(batch):
        try:
            if batcher.abandoned:
                return
            with torch.inference_mode():
                for i, (_, index, _) in enumerate(batch):
                    staging[i].copy_(samples[index])
                forward(staging[:len(batch)])
                synchronize()
        finally:  # completed whatever happens, so that LoadGen ends its test
            lg.QuerySamplesComplete([lg.QuerySampleResponse(r[0], 0, 0) for r in batch])

    batcher = Batcher(max_batch, 0 if scenario == "SingleStream" else batch_timeout_us, run)

    def warm():
        # Each batch size the test can form, once, on the batcher's thread;
        # then SingleStream's or MultiStream's query timed, the best of three,
        # for its expected latency (as bench's LoadGenTest::WarmBatches).
        with torch.inference_mode():
            for b in range(1, max_batch + 1):
                staging[b - 1].copy_(make_sample(batch_inputs, b - 1))
                forward(staging[:b])
            synchronize()
            if scenario not in ("SingleStream", "MultiStream"):
                return
            per_query = (1 if scenario == "SingleStream"
                         else settings.multi_stream_samples_per_query)
            query = [make_sample(batch_inputs, i) for i in range(per_query)]
            best = None
            for _ in range(3):
                start = time.perf_counter()
                for first in range(0, per_query, max_batch):
                    part = query[first:first + max_batch]
                    for i, sample in enumerate(part):
                        staging[i].copy_(sample)
                    forward(staging[:len(part)])
                    synchronize()
                seconds = time.perf_counter() - start
                best = seconds if best is None else min(best, seconds)
        set_expected_latency(settings, scenario, best, min_s)

    def issue(query_samples):
        now = time.monotonic()
        batcher.submit([(q.id, q.index, now) for q in query_samples])

    def load(indices):
        with torch.inference_mode():
            for i in indices:
                samples[i] = make_sample(batch_inputs, i)

    def unload(indices):
        for i in indices:
            samples[i] = None

    text = run_test(lg, settings, log_dir, batcher, issue, load, unload, warm)
    counters, label, seconds = counters_from_log(text, scenario, tokens_per_sample,
                                                 find_peak, target_qps)
    counters["max_batch"] = max_batch
    if find_peak:  # the batcher served every test of the search
        label += "; " + FIND_PEAK_BATCHES
    else:
        counters["batches"] = batcher.batches
    return counters, label, seconds
