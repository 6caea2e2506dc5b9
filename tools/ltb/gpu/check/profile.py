"""--profile: operator tables, traces and gpu_busy_%."""
import os
import shutil

from ltb.gpu.check.results import counters, fmt, short


def run(r):
    r.section("profile")
    c = r.check("--profile")
    busy = r.check("gpu_busy_% from --profile")
    directory = os.path.join(r.data, "profile")
    shutil.rmtree(directory, ignore_errors=True)
    t, cnn = r.sizes["Transformer"], r.sizes["CNN"]
    doc = r.bench_run(c, "profile", [
        f"--devices={','.join(r.step_devices)}", *r.fast, *r.shape, f"--profile={directory}",
        "--profile_steps=3",
        f"--benchmark_filter=^(Transformer/{t}/{r.step_re}/forward/|CNN/{cnn}/{r.step_re}/train_step/)"])
    files = os.listdir(directory) if os.path.isdir(directory) else []
    ops = [f for f in files if f.endswith(".ops.txt")]
    traces = [f for f in files if f.endswith(".trace.json")]
    if doc is not None and not ops:
        c.fail(f"no operator table (*.ops.txt) in {directory}")
    c.notes.append(f"{len(ops)} operator tables, {len(traces)} traces in profile/")
    if not r.gpu:
        busy.skip("needs a CUDA GPU (the profiler's kernel events)")
        return
    for e in counters(busy, "profile", doc, "/cuda", ("gpu_busy_%",)):
        busy.notes.append(f"{short(e['name'])}: gpu_busy_% {fmt(e['gpu_busy_%'])}")
