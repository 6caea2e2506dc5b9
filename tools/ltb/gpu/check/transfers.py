"""The transfer ops: host to device and back, pinned and pageable, and d2d."""
from ltb.gpu.check.results import counters, expect_names, short


TRANSFERS = ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d")


def run(r):
    c = r.check("transfer ops: pinned and pageable, both directions")
    if not r.gpu:
        c.skip("needs a CUDA GPU (the transfer ops are CUDA only)")
        return
    r.section("transfers")
    doc = r.bench_run(c, "transfers", [
        f"--devices={','.join(r.gpus)}", *r.fast,
        f"--benchmark_filter=^Ops/({'|'.join(TRANSFERS)})/"])
    expect_names(c, "transfers", doc, [f"^Ops/{op}/" for op in TRANSFERS])
    for e in counters(c, "transfers", doc, "^Ops/", ("bytes/s",)):
        c.notes.append(f"{short(e['name'])}: {e['bytes/s'] / 1e9:.1f} GB/s")
