"""GPT2 under MLPerf LoadGen: its forward in Server at a fixed rate and
Offline, its generation (continuous batching) in Server at a fixed rate,
with LoadGen's time to first token and time per output token, and the same
requests in Offline, eager and with CUDA graphs of the decode steps (and
Llama's in bf16, whose attention runs through cuDNN on a Hopper GPU); a
rate the device cannot hold is LoadGen's INVALID, a result, not a
failure."""
import re

from ltb.gpu.check.results import counters, error_of, fmt, iterations, short

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
TEXT_LENGTHS_GPU = ["--max_batch=8", "--prompt_len=32:128", "--output_len=16:64"]
TEXT_LENGTHS_REHEARSAL = ["--max_batch=4", "--prompt_len=4:16", "--output_len=2:8"]
TEXT_GPU = ["--target_qps=8", "--serve_min_s=10", "--serve_min_queries=64", *TEXT_LENGTHS_GPU,
            "--ttft_bound_ms=200", "--tpot_bound_ms=50"]
TEXT_REHEARSAL = ["--target_qps=10", "--serve_min_s=1", "--serve_min_queries=8",
                  *TEXT_LENGTHS_REHEARSAL]
# Graphed against eager serving: the same lengths' first 64 requests (8 in
# the rehearsal) at once in Offline, eager and with --cuda_graphs (a few
# seconds each on a GPU; the rehearsal's CPU has no graphs and runs the
# eager one alone). Both decode the same requests in the same steps.
GRAPH_COUNTERS = ("tokens/s", "tpot_p50_ms", "tpot_p99_ms", "decode_steps",
                  "mean_active_slots")
# (Without a minimum duration, Offline's query holds the minimum count
# whatever its expected rate: /samples:64, or 8 rehearsing, in the names.)
GRAPHS_GPU = ["--serve_min_s=0", "--serve_min_queries=64", *TEXT_LENGTHS_GPU]
GRAPHS_REHEARSAL = ["--serve_min_s=0", "--serve_min_queries=8", *TEXT_LENGTHS_REHEARSAL]


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
    doc = r.bench_run(c, "serve_graphs", graph_serve_args(r))
    graphed_serving(c, r, doc)
    doc = r.bench_run(c, "serve_graphs_bf16", graph_serve_args(r, "Llama", "bf16"))
    graphed_serving(c, r, doc, "serve_graphs_bf16")


def graphed_serving(c, r, doc, stem="serve_graphs"):
    """Each graphed Offline serve beside its eager twin: tokens/s and TPOT
    of both, and the same decode steps (the same requests decoded to the
    end); on a GPU, a graphed serve must have run."""
    # A serve benchmark is one LoadGen test: its name ends /iterations:1.
    ran = {re.sub(r"/iterations:\d+$", "", short(e["name"])): e
           for e in iterations(doc or {}) if not error_of(e)}
    for n, e in sorted(ran.items()):
        missing = [k for k in ("tokens/s", "decode_steps") if k not in e]
        if missing:
            c.fail(f"{stem}: {n} lacks {', '.join(missing)}")
    graphed = [n for n in sorted(ran) if n.endswith("/graph")]
    if doc is not None and r.gpu and not graphed:
        c.fail(f"{stem}: no graphed serve of generation ran")
    if not graphed:
        c.notes.append(f"{stem}: eager alone (no device with CUDA graphs): "
                       + "; ".join(f"{n}: tokens/s {fmt(e.get('tokens/s'))}"
                                   for n, e in sorted(ran.items())))
    for n in graphed:
        e, twin = ran[n], ran.get(n[: -len("/graph")])
        if not twin:
            c.fail(f"{stem}: {n} has no eager twin")
            continue
        if e.get("decode_steps") != twin.get("decode_steps"):
            c.fail(f"{stem}: {n} ran {fmt(e.get('decode_steps'))} decode steps, "
                   f"eager {fmt(twin.get('decode_steps'))}: not the same requests served")
        ratio = (f" ({fmt(e['tokens/s'] / twin['tokens/s'])}x)"
                 if twin.get("tokens/s") else "")
        c.notes.append(f"{n} against eager: " + ", ".join(
            f"{k} {fmt(e.get(k))} against {fmt(twin.get(k))}" for k in GRAPH_COUNTERS
            if k in e or k in twin) + ratio)


def graph_serve_args(r, family="GPT2", dtype="fp32"):
    """bench's arguments for a family's generation served in Offline, eager
    and graphed, on the GPUs (the rehearsal: eager, on its devices)."""
    devices = r.gpus if r.gpu else r.step_devices
    return [f"--devices={','.join(devices)}", "--warmup_s=0.1", "--scenario=Offline",
            f"--dtype={dtype}", "--cuda_graphs=false,true",
            *(GRAPHS_GPU if r.gpu else GRAPHS_REHEARSAL),
            f"--benchmark_filter=^{family}/{r.sizes[family]}/"
            f"({'|'.join(re.escape(d) for d in devices)})/serve/"]


def text_serve_args(r):
    """bench's arguments for GPT2's generation served in Server."""
    return [f"--devices={','.join(r.step_devices)}", "--warmup_s=0.1", "--scenario=Server",
            *(TEXT_GPU if r.gpu else TEXT_REHEARSAL),
            f"--benchmark_filter=^GPT2/{r.sizes['GPT2']}/{r.step_re}/serve/"]
