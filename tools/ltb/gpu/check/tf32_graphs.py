"""--tf32 and --cuda_graphs beside their plain twins, and graphed
generation's tokens against eager generation's."""
import re

from ltb.gpu.check.results import error_of, expect_names, fmt, iterations, short
from ltb.gpu.check.summary import MISSING


# --quick on a GPU: the cheap benchmarks TF32 and CUDA graphs are shown on
# (the graphs check runs in bf16, so that token_match_% against an eager fp32
# reference shows the graphed tokens are right).
QUICK_TF32 = "^(Transformer/small/{d}/forward/|ResNet/resnet18/{d}/forward/|Ops/matmul/2048x2048/{d}/)"
QUICK_GRAPHS = "^(Transformer/small/{d}/forward/|GPT2/small/{d}/generate/|Llama/1B/{d}/generate/)"
GRAPH_TOKEN_SLACK = 25  # token_match_% points


def run(r):
    for flag, title, name in (("tf32", "TF32 (--tf32=true)", "tf32"),
                              ("cuda_graphs", "CUDA graphs (--cuda_graphs=true)", "cuda_graphs")):
        c = r.check(title)
        if not r.has_flag(flag):
            c.skip(f"not offered by this bench: no --{flag} in bench --help", MISSING)
            continue
        if not r.gpu:
            c.skip("needs a CUDA GPU")
            continue
        r.section(title)
        args = [f"--devices={','.join(r.gpus)}", f"--{flag}=false,true", *r.fast]
        if flag == "cuda_graphs":
            # Generation's decode steps, graphed and not, in bf16: each
            # reports token_match_% against an eager fp32 reference, so
            # the graphed tokens are checked, not only timed.
            args += ["--new_tokens=32", "--dtype=bf16"]
        if r.quick:
            args.append("--benchmark_filter="
                        + (QUICK_GRAPHS if flag == "cuda_graphs" else QUICK_TF32).format(
                            d=r.dev_re))
        doc = r.bench_run(c, name, args)
        if r.quick:
            expect_names(c, name, doc, [f"^{p}/" for p in (
                ("Transformer/small", "GPT2/small", "Llama/1B") if flag == "cuda_graphs"
                else ("Transformer/small", "ResNet/resnet18", "Ops/matmul"))])
        else:
            expect_names(c, name, doc, [f"^{f}/{z}/" for f, z in r.sizes.items()])
        if flag == "cuda_graphs":
            graphed_tokens(c, doc)
        suffix = "/fp32/tf32" if flag == "tf32" else "/graph"
        expect_names(c, name, doc, [re.escape(suffix) + "$"])
        # Each axis beside its plain twin: the speed-up it gives.
        ran = {short(e["name"]): e for e in iterations(doc or {}) if not error_of(e)}
        for n, e in sorted(ran.items()):
            if not n.endswith(suffix):
                continue
            twin = ran.get(n[: -len("/tf32")] if flag == "tf32" else n[: -len("/graph")])
            key = "tpot_ms" if "tpot_ms" in e else "real_time"
            if twin and key in twin and e.get(key):
                c.notes.append(f"{n}: {key} {fmt(e[key])} against {fmt(twin[key])}"
                               f" ({fmt(twin[key] / e[key])}x)"
                               + (f", mfu {fmt(e['mfu'])}" if "mfu" in e else "")
                               + (f", mbu {fmt(e['mbu'])}" if "mbu" in e else ""))
        # Sub-millisecond GPU steps are timed several to a sample, and
        # the board's energy counter is read around the measured steps.
        launches = [e for e in ran.values() if e.get("launches_per_sample", 1) > 1]
        c.notes.append(f"{len(launches)} benchmarks timed several steps a sample")
        energy = [e for e in ran.values() if "energy_J" in e]
        c.notes.append(f"{len(energy)} of {len(ran)} benchmarks with energy_J"
                       + (f" (e.g. {short(energy[0]['name'])}: {fmt(energy[0]['energy_J'])} J)"
                          if energy else ""))


def graphed_tokens(c, doc):
    """Graphed generation makes the tokens eager generation makes: each
    graphed bf16 generate has token_match_% (against the eager fp32
    reference), within GRAPH_TOKEN_SLACK points of its eager twin's (the
    decode kernels of a graph may round otherwise; a graph that replays
    stale inputs matches far fewer)."""
    ran = {short(e["name"]): e for e in iterations(doc or {}) if not error_of(e)}
    graphed = [n for n in ran if "/generate/" in n and n.endswith("/graph")]
    if doc is not None and not graphed:
        c.fail("cuda_graphs: no graphed generation ran")
    for n in graphed:
        e, twin = ran[n], ran.get(n[: -len("/graph")])
        if "token_match_%" not in e:
            c.fail(f"cuda_graphs: {n} has no token_match_% (no eager fp32 reference)")
            continue
        note = f"{n}: token_match_% {fmt(e['token_match_%'])}"
        if twin and "token_match_%" in twin:
            note += f" (eager {fmt(twin['token_match_%'])})"
            if e["token_match_%"] < twin["token_match_%"] - GRAPH_TOKEN_SLACK:
                c.fail(f"cuda_graphs: {n} matches fewer fp32 tokens than eager: "
                       f"{fmt(e['token_match_%'])} against {fmt(twin['token_match_%'])}")
        c.notes.append(note)
