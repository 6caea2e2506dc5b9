"""Generation's prefill and decode counters (ttft, tpot, pp and tg tokens/s)."""
from ltb.gpu.check.results import counters, fmt, short


GENERATION_COUNTERS = ("ttft_ms", "tpot_ms", "pp_tok/s", "tg_tok/s")


def run(r):
    r.section("generation")
    c = r.check("generation: prefill and decode counters")
    gpt2, llama, whisper = r.sizes["GPT2"], r.sizes["Llama"], r.sizes["Whisper"]
    doc = r.bench_run(c, "generation", [
        f"--devices={','.join(r.step_devices)}", "--steps=3", "--warmup_s=0.1", *r.shape,
        f"--benchmark_filter=^(GPT2/{gpt2}|Llama/{llama}|Whisper/{whisper})/{r.step_re}"
        "/generate/"])
    for e in counters(c, "generation", doc, "/generate/", GENERATION_COUNTERS):
        c.notes.append(f"{short(e['name'])}: " + ", ".join(
            f"{k} {fmt(e[k])}" for k in GENERATION_COUNTERS + ("tokens/s",) if k in e))
