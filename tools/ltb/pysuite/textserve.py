"""Serve of generation in Python: the decoder twins under MLPerf LoadGen's
load with continuous batching, the design of bench's lib/serve/text_serve:
a fixed number of slots share one key/value cache, a region per slot;
between decode steps finished requests leave (the last active slot moves
into the freed one) and waiting requests are prefilled one at a time and
join; one decode step runs every active slot at its own position
(Decoder.forward_slots) over the smallest of a few key buckets that holds
its longest row, and every shape a test can meet runs once before it
(warm_up). LoadGen hears of each first token
(FirstTokenComplete: TTFT) and of each end with its token count
(QuerySamplesComplete: TPOT). Requests are drawn as bench draws them
(request_draw), so both serve the same prompts and lengths."""
import collections
import os
import threading
import time

from ltb.pysuite import serve as batch_serve

MASK64 = (1 << 64) - 1
SEED = 55  # lib/serve/text_serve.h kTextServeSeed
SAMPLES = batch_serve.SAMPLES
LEAST_KEY_BUCKET = 16  # lib/serve/slot_buckets.h kLeastKeyBucket


def request_draw(seed, i, k):
    """splitmix64 of seed + i * 2^32 + k (lib/serve RequestDraw)."""
    z = (seed + (i << 32) + k + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def draw_length(seed, i, k, lo, hi):
    return lo + request_draw(seed, i, k) % (hi - lo + 1)


def draw_request(i, prompt, output, vocab, seed=SEED):
    """Request i: (prompt ids, output length); prompt and output are
    (min, max) ranges."""
    p = draw_length(seed, i, 0, *prompt)
    return [draw_length(seed, i, 2 + j, 0, vocab - 1) for j in range(p)], \
        draw_length(seed, i, 1, *output)


def key_buckets(least, context):
    """The key counts decode steps attend over (lib/serve KeyBuckets):
    powers of two from LEAST_KEY_BUCKET below the context, from the one
    that holds `least` up, then the context."""
    out, b = [], LEAST_KEY_BUCKET
    while b < context:
        if b >= least:
            out.append(b)
        b *= 2
    return out + [context]


class Request:
    __slots__ = ("id", "prompt", "output_len", "arrived", "tokens", "position")

    def __init__(self, id, prompt, output_len, arrived=0.0):
        self.id, self.prompt, self.output_len, self.arrived = id, prompt, output_len, arrived
        self.tokens, self.position = [], 0


class ContinuousBatcher:
    """Continuous batching over a decoder and a cache of `slots` rows,
    driven one step at a time; first(request, token) and done(request,
    tokens) are called as lib/serve's ContinuousBatcher calls them, and
    prefill_chunk bounds the prompt tokens a step as there (0: whole).
    buckets: the key counts decode steps attend over (key_buckets; None:
    each step's exact keys)."""

    def __init__(self, model, cache, first, done, prefill_chunk=0, buckets=None):
        self.model, self.cache, self.first, self.done = model, cache, first, done
        self.prefill_chunk, self.buckets = prefill_chunk, buckets
        self.slots = cache[0][0].shape[0]
        self.waiting = collections.deque()
        self.active = []  # active[i] holds slot i
        self.prefilling = None  # part-way through its prompt, in slot len(active)
        self.prefills = self.prefill_runs = self.decode_steps = self.active_slot_steps = 0
        self.prefill_s = self.decode_s = 0.0

    def add(self, request):
        self.waiting.append(request)

    def _move(self, src, dst, length):
        for keys, values in self.cache:
            for t in (keys, values):
                t[dst, :, :length] = t[src, :, :length]

    def _leave(self, i):
        r = self.active[i]
        self.done(r, r.tokens)
        last = len(self.active) - 1
        if i != last:
            self._move(last, i, self.active[last].position)
            self.active[i] = self.active[last]
        self.active.pop()
        if self.prefilling is not None:  # follows the active rows down
            self._move(last + 1, last, self.prefilling.position)

    def _prefill_whole(self):
        import torch

        # The waiting requests at the front whose prompts are of one length
        # join together, one forward over their rows (lib/serve's PrefillWhole).
        while self.waiting and len(self.active) < self.slots:
            length, first_row = self.waiting[0].prompt.shape[1], len(self.active)
            while (self.waiting and len(self.active) < self.slots
                   and self.waiting[0].prompt.shape[1] == length):
                r = self.waiting.popleft()
                r.position = length
                self.active.append(r)
            joined = self.active[first_row:]
            start = time.perf_counter()
            rows = [(k[first_row:len(self.active)], v[first_row:len(self.active)])
                    for k, v in self.cache]
            batch = torch.cat([r.prompt for r in joined]) if len(joined) > 1 else joined[0].prompt
            tokens = self.model.forward_cached(batch, 0, rows).argmax(-1).tolist()
            self.prefill_s += time.perf_counter() - start
            self.prefill_runs += 1
            for r, token in zip(joined, tokens):
                r.tokens = [token]
                self.prefills += 1
                self.first(r, token)
            for i in range(len(self.active) - 1, first_row - 1, -1):
                if self.active[i].output_len <= 1:
                    self._leave(i)

    def step(self):
        import torch

        if not self.prefill_chunk:
            self._prefill_whole()
        budget = self.prefill_chunk
        while budget > 0:
            if self.prefilling is None:
                if not self.waiting or len(self.active) >= self.slots:
                    break
                self.prefilling = self.waiting.popleft()
                self.prefilling.position = 0
            r, slot = self.prefilling, len(self.active)
            prompt = r.prompt.shape[1]
            n = int(min(budget, prompt - r.position))
            start = time.perf_counter()
            rows = [(k[slot:slot + 1], v[slot:slot + 1]) for k, v in self.cache]
            logits = self.model.forward_cached(r.prompt[:, r.position:r.position + n],
                                               r.position, rows)
            r.position += n
            budget -= n
            # Read on every chunk: its time is the time the device took, not
            # a launch whose work would land in the next decode step.
            token = int(logits.argmax(-1))
            token = token if r.position == prompt else None
            self.prefill_s += time.perf_counter() - start
            self.prefill_runs += 1
            if token is None:
                continue
            self.prefills += 1
            r.tokens = [token]
            self.prefilling = None
            self.first(r, token)
            self.active.append(r)
            if r.output_len <= 1:
                self._leave(len(self.active) - 1)
        if not self.active:
            return bool(self.waiting) or self.prefilling is not None
        device = self.active[0].prompt.device
        start = time.perf_counter()
        tokens = torch.tensor([r.tokens[-1] for r in self.active], device=device)[:, None]
        positions = [r.position for r in self.active]
        keys = None
        if self.buckets:
            keys = next((b for b in self.buckets if b > max(positions)), None)
            if keys is None:
                raise ValueError(f"position {max(positions)} is beyond the cache's "
                                 f"{self.buckets[-1]} positions")
        nxt = self.model.forward_slots(tokens, positions, self.cache,
                                       keys).argmax(-1).tolist()  # waits
        self.decode_s += time.perf_counter() - start
        self.decode_steps += 1
        self.active_slot_steps += len(self.active)
        for r, t in zip(self.active, nxt):
            r.tokens.append(t)
            r.position += 1
        for i in range(len(self.active) - 1, -1, -1):
            if len(self.active[i].tokens) >= self.active[i].output_len:
                self._leave(i)
        return bool(self.active or self.waiting) or self.prefilling is not None

    def abandon(self):
        while self.active:
            r = self.active.pop()
            self.done(r, r.tokens)
        if self.prefilling is not None:
            self.done(self.prefilling, [])
            self.prefilling = None
        while self.waiting:
            r = self.waiting.popleft()
            self.done(r, [])

    def stats(self):
        busy = self.prefill_s + self.decode_s
        out = {"prefills": self.prefills, "decode_steps": self.decode_steps}
        if self.decode_steps:
            out["mean_active_slots"] = self.active_slot_steps / self.decode_steps
        if busy > 0:
            out["prefill_share"] = self.prefill_s / busy
            out["decode_share"] = self.decode_s / busy
        return out


def warm_up(model, cache, requests, buckets, max_batch, prefill_chunk=0):
    """Runs, outside a LoadGen test, every shape the test can meet (as
    bench's RunTextServe): each active-slot count's decode step over each
    key bucket; with whole prompts, each prompt length of `requests` (a list
    of (prompt, output length)) in as many rows as that many prompts of it
    can join, up to the slots; then the first max_batch requests served to
    their end. Clears the cache after."""
    import torch

    slots = cache[0][0].shape[0]
    device = requests[0][0].device
    with torch.inference_mode():
        for s in range(1, slots + 1):
            tokens = torch.zeros(s, 1, dtype=torch.long, device=device)
            for keys in buckets:
                model.forward_slots(tokens, [0] * s, cache, keys)
        if not prefill_chunk:
            by_length = collections.defaultdict(list)
            for prompt, _ in requests:
                by_length[prompt.shape[1]].append(prompt)
            for prompts in by_length.values():
                for rows in range(1, min(len(prompts), slots) + 1):
                    model.forward_cached(torch.cat(prompts[:rows]), 0,
                                         [(k[:rows], v[:rows]) for k, v in cache])
        warm = ContinuousBatcher(model, cache, lambda r, t: None, lambda r, tokens: None,
                                 prefill_chunk, buckets)
        for i, (prompt, n) in enumerate(requests[:max_batch]):
            warm.add(Request(i, prompt, n))
        while warm.step():
            pass
        for k, v in cache:
            k.zero_()
            v.zero_()


def time_query(model, cache, requests, buckets, per_query, prefill_chunk=0):
    """The fastest of three queries of per_query requests (of `requests`,
    (prompt, output length) each, from the first on) served together to
    their end, in seconds (bench's RunTextServe); clears the cache after."""
    import torch

    best = None
    with torch.inference_mode():
        for trial in range(3):
            batcher = ContinuousBatcher(model, cache, lambda r, t: None,
                                        lambda r, tokens: None, prefill_chunk, buckets)
            start = time.perf_counter()
            for j in range(per_query):
                prompt, n = requests[(trial * per_query + j) % len(requests)]
                batcher.add(Request(j, prompt, n))
            while batcher.step():
                pass
            seconds = time.perf_counter() - start
            best = seconds if best is None else min(best, seconds)
        for k, v in cache:
            k.zero_()
            v.zero_()
    return best


class Server(batch_serve.Worker):
    """A ContinuousBatcher on a worker thread, in inference mode."""

    def __init__(self, batcher):
        super().__init__()
        self.batcher = batcher
        self.incoming, self.busy = [], False
        self.start()

    def submit(self, requests):
        with self.cv:
            self.incoming.extend(requests)
            self.cv.notify_all()

    def drain(self):
        with self.cv:
            self.cv.wait_for(lambda: not self.incoming and not self.busy)

    def _work(self):
        import torch

        with torch.inference_mode(), self.cv:
            while True:
                self.cv.wait_for(lambda: self.stop or self.busy or self.incoming
                                 or self._handed())
                if self._handed():
                    self._run_handed()
                    continue
                if self.stop and not self.busy and not self.incoming:
                    return
                for r in self.incoming:
                    self.batcher.add(r)
                self.incoming = []
                self.cv.release()
                more = False
                try:
                    if self.error is not None or self.stop or self.abandoned:
                        self.batcher.abandon()
                    else:
                        more = self.batcher.step()
                except Exception as e:  # noqa: BLE001 - reported after the test
                    self.error = self.error or e
                    self.batcher.abandon()
                finally:
                    self.cv.acquire()
                    self.busy = more
                    self.cv.notify_all()


def counters_from_detail(detail, scenario, stats, good, ttft_bound_ms, tpot_bound_ms,
                         tokens_per_sample=None):
    """lib/serve's TextCountersFromDetail: MultiStream's tokens/s is its
    samples/s times the completed requests' mean output (`tokens_per_sample`),
    over the same span."""
    out, label, seconds = batch_serve.counters_from_detail(detail, scenario)
    out.pop("goodput", None)
    out.pop("bound_ms", None)
    number = batch_serve._number
    key = "result_tokens_per_second" if scenario == "Offline" else \
        "result_completed_tokens_per_second"
    if scenario == "MultiStream":
        if "samples/s" in out and tokens_per_sample:
            out["tokens/s"] = out["samples/s"] * tokens_per_sample
    elif number(detail, key) is not None:
        out["tokens/s"] = number(detail, key)
    for p in ("50.00", "90.00", "99.00"):
        for name, k in ((f"ttft_p{p[:2]}_ms", f"result_first_token_{p}_percentile_latency_ns"),
                        (f"tpot_p{p[:2]}_ms", f"result_time_per_output_token_{p}_percentile_ns")):
            if number(detail, k) is not None:
                out[name] = number(detail, k) * 1e-6
    if scenario == "Server":
        out["ttft_bound_ms"], out["tpot_bound_ms"] = ttft_bound_ms, tpot_bound_ms
        if "samples/s" in out and good is not None:
            out["goodput"] = out["samples/s"] * good
    out.update(stats)
    return out, label, seconds


def serve_text(model, scenario, log_dir, *, prompt, output, max_batch=8, target_qps=10,
               min_s=1, min_queries=32, ttft_bound_ms=100, tpot_bound_ms=100,
               device="cpu", find_peak=False, prefill_chunk=0, samples_per_query=0):
    """One LoadGen test of `model` (a Decoder twin) generating for requests
    of prompt and output lengths in the (min, max) ranges `prompt` and
    `output`: (counters, label, seconds per sample). find_peak (Server):
    LoadGen's FindPeakPerformance from target_qps within both bounds.
    prefill_chunk: prompt tokens a step at most (0: whole prompts)."""
    import mlperf_loadgen as lg
    import torch

    settings = batch_serve.loadgen_settings(lg, scenario, target_qps=target_qps, min_s=min_s,
                                            min_queries=min_queries, find_peak=find_peak,
                                            samples_per_query=samples_per_query)
    settings.use_token_latencies = True
    settings.ttft_latency = batch_serve.bound_nanoseconds(ttft_bound_ms)
    settings.tpot_latency = batch_serve.bound_nanoseconds(tpot_bound_ms)
    if output[0] < 2 or output[1] < output[0] or prompt[0] < 1 or prompt[1] < prompt[0]:
        raise ValueError("output lengths must be 2 <= MIN <= MAX (LoadGen times the tokens "
                         "after the first) and prompt lengths 1 <= MIN <= MAX")
    context = prompt[1] + output[1]
    if context > model.options.max_positions:
        raise ValueError(f"prompt {prompt[1]} + output {output[1]} = {context} positions, "
                         f"but the model has {model.options.max_positions}")
    os.makedirs(log_dir, exist_ok=True)
    vocab = model.options.vocab_size
    with torch.inference_mode():
        cache = model.make_cache(max_batch, context)
        for k, v in cache:
            k.zero_()
            v.zero_()
    samples = [None] * SAMPLES
    lock = threading.Lock()
    first_at, tally = {}, {"done": 0, "within": 0, "tokens": 0}

    def first(r, token):
        with lock:
            first_at[r.id] = time.monotonic()
        lg.FirstTokenComplete([lg.QuerySampleResponse(r.id, 0, 0, 1)])

    def done(r, tokens):
        now = time.monotonic()
        with lock:
            at = first_at.pop(r.id, None)
            if at is not None:
                tpot = (now - at) / (len(tokens) - 1) if len(tokens) > 1 else 0
                if at - r.arrived <= ttft_bound_ms / 1e3 and tpot <= tpot_bound_ms / 1e3:
                    tally["within"] += 1
            tally["done"] += 1
            tally["tokens"] += max(len(tokens), 2)
        lg.QuerySamplesComplete([lg.QuerySampleResponse(r.id, 0, 0, max(len(tokens), 2))])

    buckets = key_buckets(prompt[0] + 1, context)
    server = Server(ContinuousBatcher(model, cache, first, done, prefill_chunk, buckets))

    def issue(query_samples):
        now = time.monotonic()
        server.submit([Request(q.id, samples[q.index][0], samples[q.index][1], now)
                       for q in query_samples])

    def load(indices):
        for i in indices:
            ids, n = draw_request(i, prompt, output, vocab)
            samples[i] = (torch.tensor([ids], dtype=torch.long, device=device), n)

    def unload(indices):
        for i in indices:
            samples[i] = None

    def warm():
        # Every shape the test can meet, run first on the server's thread
        # (warm_up), as bench does; then SingleStream's or MultiStream's
        # query timed for its expected latency (time_query).
        load(range(SAMPLES))
        warm_up(model, cache, samples, buckets, max_batch, prefill_chunk)
        if scenario in ("SingleStream", "MultiStream"):
            per_query = 1 if scenario == "SingleStream" else settings.multi_stream_samples_per_query
            batch_serve.set_expected_latency(
                settings, scenario,
                time_query(model, cache, samples, buckets, per_query, prefill_chunk), min_s)
        unload(range(SAMPLES))

    text = batch_serve.run_test(lg, settings, log_dir, server, issue, load, unload, warm)
    # A peak search's requests span every rate it tried: no one goodput.
    good = tally["within"] / tally["done"] if tally["done"] and not find_peak else None
    per_sample = tally["tokens"] / tally["done"] if tally["done"] else None
    counters, label, seconds = batch_serve.with_peak(
        counters_from_detail(batch_serve.parse_detail(text), scenario, server.batcher.stats(),
                             good, ttft_bound_ms, tpot_bound_ms, per_sample),
        text, find_peak, target_qps)
    counters["max_batch"] = max_batch
    return counters, label, seconds
