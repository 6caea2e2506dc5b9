"""GPT2's forward under MLPerf LoadGen: Server at a fixed rate, and Offline;
a rate the device cannot hold is LoadGen's INVALID, a result, not a failure."""
from ltb.gpu.check.results import counters, fmt, short

# The serve step's counters (LoadGen's results), and its load: Server at a
# fixed rate for about 10 s on a GPU and Offline (a second of each in the
# rehearsal).
SERVE_COUNTERS = ("samples/s", "p50_ms", "p99_ms", "valid")
SERVE_GPU = ["--target_qps=100", "--serve_min_s=10", "--serve_min_queries=100"]
SERVE_REHEARSAL = ["--target_qps=20", "--serve_min_s=1", "--serve_min_queries=16"]


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
