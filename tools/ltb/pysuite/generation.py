"""Generation (lib/workloads/generation.cc): a prefill, then decode steps,
each timed by the device's clock (CUDA events on a GPU, which do not
stall the host between steps), the per-phase times summed into
generation's counters (ttft_ms, tpot_*, pp_tok/s, tg_tok/s, the bytes read
and their rates, tpot_growth_%). A kind sets a workload's prefill, decode
and cache; the decoders' come from setup_decoder."""
import torch

from ltb.pysuite import facts, families
from ltb.pysuite.device import DTYPES, grad_context
from ltb.pysuite.family import FAMILIES

# tpot_growth_%'s window: the first and last decode steps compared.
GROWTH_WINDOW = facts.load()["measurement"]["growth_window"]


def setup_decoder(w, model):
    """A decoder's generation (lib/models/decoder_family.cc
    MakeDecodeWorkload). At a depth: the cache
    holds depth + prompt + new positions, its first `depth` filled once
    here from random tokens in chunks of the family's depth_chunk; every
    step's prompt then starts at the depth."""
    s, vocab = w.spec, w.vocab
    w.prompt = torch.randint(0, vocab, (s.batch, s.prompt), device=s.device)
    cache = model.make_cache(s.batch, s.depth + s.prompt + s.new_tokens)
    with torch.inference_mode():
        chunk = int(FAMILIES[s.family]["depth_chunk"])
        for at in range(0, s.depth, chunk):
            n = min(chunk, s.depth - at)
            model.forward_cached(torch.randint(0, vocab, (s.batch, n), device=s.device),
                                 at, cache)
    cached = (torch.compile(model.forward_cached) if s.runtime == "compile"
              else model.forward_cached)
    w.prefill = lambda: cached(w.prompt, s.depth, cache)
    w.decode = lambda token, at: cached(token, at, cache)
    w.cache = [t for kv in cache for t in kv]
    # A decode step reads every cached position's
    # keys and values, (B, heads, positions, hs) in every layer.
    w.cache_per_position = sum(t.nbytes / t.shape[2] for t in w.cache)
    w.cache_fixed = 0.0
    ready(w)


def weight_bytes(w):
    """What a decode step (or a decoder's forward) reads of the weights:
    the packed bytes where they are quantised."""
    s = w.spec
    element = torch.finfo(DTYPES[s.dtype]).bits // 8
    return families.decode_weight_elements(s.family, s.size) * element + w.weight_change


def ready(w):
    w.weight_bytes = weight_bytes(w)
    w.reset_stats()


def step(w):
    """One generation, its prefill and each decode step timed."""
    s = w.spec
    timeline = w.timeline  # the device's clock: CUDA events on a GPU, as bench's
    with grad_context(w.grad_mode):
        timeline.clear()
        timeline.mark()
        token = w.prefill().argmax(-1, keepdim=True)
        timeline.mark()
        for i in range(1, s.new_tokens):
            token = w.decode(token, s.depth + s.prompt + i - 1).argmax(-1, keepdim=True)
            timeline.mark()
    t = timeline.intervals()
    w.prefill_s += t[0]
    decodes = len(t) - 1
    window = min(GROWTH_WINDOW, decodes // 2)
    for i, x in enumerate(t[1:]):
        w.decode_s += x
        w.decode_steps.append(x)
        if i < window:
            w.early_s += x
        if i >= decodes - window:
            w.late_s += x
    w.steps += 1


def evaluate(w):
    """GenerateWorkload::Evaluate: one generation's new tokens (B, N)."""
    s = w.spec
    with torch.inference_mode():
        tokens = [w.prefill().argmax(-1, keepdim=True)]
        for i in range(1, s.new_tokens):
            tokens.append(w.decode(tokens[-1], s.depth + s.prompt + i - 1)
                          .argmax(-1, keepdim=True))
    return torch.cat(tokens, 1)


def counters(w):
    """GenerateWorkload's counters over the generations since the last reset."""
    s = w.spec
    if w.steps == 0:
        return {}
    prefill = w.prefill_s / w.steps
    c = {"ttft_ms": prefill * 1e3, "pp_tok/s": s.batch * s.prompt / prefill,
         "kv_cache_bytes": float(sum(t.nbytes for t in w.cache)),
         "weight_bytes": float(w.weight_bytes)}
    if s.new_tokens > 1:
        decode = w.decode_s / w.steps
        decodes = s.new_tokens - 1
        c["tpot_ms"] = decode / decodes * 1e3
        for name, q in (("tpot_p50_ms", 0.5), ("tpot_p90_ms", 0.9), ("tpot_p99_ms", 0.99)):
            c[name] = quantile(w.decode_steps, q) * 1e3
        c["tg_tok/s"] = s.batch * decodes / decode
        c["weight_GB/s"] = w.weight_bytes * decodes / decode / 1e9
        # Step i (1..N-1) feeds the token at depth + prompt + i - 1,
        # which attends to depth + prompt + i positions.
        if w.cache_per_position is not None:  # as bench: where the cache is counted
            cache = sum(w.cache_per_position * (s.depth + s.prompt + i) + w.cache_fixed
                        for i in range(1, s.new_tokens))
            c["read_GB/s"] = (w.weight_bytes * decodes + cache) / decode / 1e9
        if w.early_s > 0 and w.late_s > 0:
            c["tpot_growth_%"] = (w.late_s / w.early_s - 1) * 100
    return c


def quantile(values, q):
    """generation.cc Quantile: linear between the two nearest ranks (numpy's default)."""
    if not values:
        return 0.0
    v = sorted(values)
    rank = q * (len(v) - 1)
    lo = int(rank)
    if lo + 1 >= len(v):
        return v[lo]
    return v[lo] + (rank - lo) * (v[lo + 1] - v[lo])

