"""The memory guard refuses a model that cannot fit."""
import re

from ltb.gpu.check.results import error_of, iterations, short


def run(r):
    r.section("memory guard")
    c = r.check("memory guard refuses a model that cannot fit")
    device = r.gpus[0] if r.gpu else r.devices[0]
    doc = r.bench_run(c, "memory_guard", [
        f"--devices={device}", "--batch=64", "--seq=2048", "--steps=1", "--warmup_s=0",
        f"--benchmark_filter=^Transformer/2.7B/{re.escape(device)}/train_step/"],
                      expected=[r"does not fit"])
    for e in iterations(doc or {}):
        err = error_of(e)
        if not err:
            c.fail(f"memory_guard: {short(e['name'])} ran instead of being refused")
        elif re.search("does not fit", err):
            c.notes.append(f"{short(e['name'])}: {err}")
