"""Every family and phase at its small size in fp32, bf16 and fp16."""
from ltb.gpu.check.results import error_of, expect_names, families_phases, fmt, iterations, short


def run(r):
    r.section("precision")
    c = r.check("every family and phase in fp32, bf16, fp16")
    # On the GPU alone where there is one (the default suite measured the CPU).
    devices = r.gpus if r.gpu else r.devices
    args = [f"--devices={','.join(devices)}", "--dtype=fp32,bf16,fp16", *r.fast, *r.shape,
            f"--benchmark_filter={r.suite_filter(every_phase=True)}"]
    if not r.gpu:  # one epoch, no warm-up one (EncDec's fp16 epoch: 1.5 s on 2 cores)
        args += ["--epochs=1", "--warmup_epochs=0"]
    doc = r.bench_run(c, "precision", args)
    seen, dtypes = families_phases(doc)
    for dtype in ("fp32", "bf16", "fp16"):
        expect_names(c, "precision", doc,
                     [f"^{f}/{z}/.*/{dtype}(/|$)" for f, z in r.sizes.items()])
    c.notes.append("dtypes: " + ", ".join(sorted(dtypes)))
    c.notes += [f"{k}: {', '.join(sorted(v))}" for k, v in seen.items()]
    if r.gpu and doc:
        # fp32 means fp32 on the GPU: TF32 off for matmuls and convolutions.
        tf32 = doc.get("context", {}).get("cuda_tf32")
        if tf32 != "matmul off, convolution off":
            c.fail(f"precision: context cuda_tf32 is {tf32!r}, not "
                   "'matmul off, convolution off'")
        else:
            c.notes.append(f"cuda_tf32: {tf32}")
    drift = [(short(e["name"]), e["rel_err"]) for e in iterations(doc or {})
             if "rel_err" in e and not error_of(e)]
    if drift:
        worst = max(drift, key=lambda x: x[1])
        c.notes.append(f"largest rel_err: {fmt(worst[1])} ({worst[0]})")
