"""GPT2 under MLPerf LoadGen: its forward in Server at a fixed rate and
Offline, and its generation (continuous batching) in Server at a fixed rate,
with LoadGen's time to first token and time per output token; a rate the
device cannot hold is LoadGen's INVALID, a result, not a failure."""
from ltb.gpu.check.results import counters, fmt, short

# The serve step's counters (LoadGen's results), and its load: Server at a
# fixed rate for about 10 s on a GPU and Offline (a second of each in the
# rehearsal).
SERVE_COUNTERS = ("samples/s", "p50_ms", "p99_ms", "valid")
SERVE_GPU = ["--target_qps=100", "--serve_min_s=10", "--serve_min_queries=100"]
SERVE_REHEARSAL = ["--target_qps=20", "--serve_min_s=1", "--serve_min_queries=16"]
# Generation under load: requests of 32 to 128 prompt tokens and 16 to 64
# output tokens in 8 slots at a fixed rate (GPU: about 10 s; the rehearsal
# a second, nano, of shorter requests).
TEXT_COUNTERS = ("tokens/s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                 "mean_active_slots", "goodput", "valid")
TEXT_GPU = ["--target_qps=8", "--serve_min_s=10", "--serve_min_queries=64", "--max_batch=8",
            "--prompt_len=32:128", "--output_len=16:64", "--ttft_bound_ms=200",
            "--tpot_bound_ms=50"]
TEXT_REHEARSAL = ["--target_qps=10", "--serve_min_s=1", "--serve_min_queries=8",
                  "--max_batch=4", "--prompt_len=4:16", "--output_len=2:8"]


def run(r):
    r.section("serve")
    c = r.check("serve: Server and Offline under MLPerf LoadGen")
    doc = r.bench_run(c, "serve", [
        f"--devices={','.join(r.step_devices)}", "--warmup_s=0.1", *r.shape,
        "--scenario=Server,Offline", *(SERVE_GPU if r.gpu else SERVE_REHEARSAL),
        f"--benchmark_filter=^GPT2/{r.sizes['GPT2']}/{r.step_re}/serve/"])
    for e in counters(c, "serve", doc, "/serve/", SERVE_COUNTERS):
        c.notes.append(f"{short(e['name'])}: " + ", ".join(
            f"{k} {fmt(e[k])}" for k in SERVE_COUNTERS[:-1] if k in e)
            + f"; {e.get('label', '')}")
    doc = r.bench_run(c, "serve_generate", text_serve_args(r))
    for e in counters(c, "serve_generate", doc, "/serve/", TEXT_COUNTERS[:-1]):
        c.notes.append(f"{short(e['name'])}: " + ", ".join(
            f"{k} {fmt(e[k])}" for k in TEXT_COUNTERS[:-1] if k in e)
            + f"; {e.get('label', '')}")


def text_serve_args(r):
    """bench's arguments for GPT2's generation served in Server."""
    return [f"--devices={','.join(r.step_devices)}", "--warmup_s=0.1", "--scenario=Server",
            *(TEXT_GPU if r.gpu else TEXT_REHEARSAL),
            f"--benchmark_filter=^GPT2/{r.sizes['GPT2']}/{r.step_re}/serve/"]
