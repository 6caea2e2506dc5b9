"""Data-parallel runs through tools/launch: one rank (NCCL on a GPU, Gloo
on the CPU), two where there are two GPUs, and a failing rank."""
import json
import os
import re
import shutil
import time

from ltb.gpu.check.results import error_of, fmt, iterations, read_results, short
from ltb.gpu.check.runner import REHEARSAL_PEAKS, REHEARSAL_THREADS, TOOLS


def run(r):
    """A one-rank group forced through the data-parallel path (the
    collectives, the Reducer, the data-parallel counters): NCCL on the GPU,
    Gloo on the CPU; and two ranks where there are two GPUs."""
    r.section("data-parallel")
    size = r.sizes["EncDec"]
    if r.gpu:
        c = r.check("one-rank NCCL data-parallel run through tools/launch")
        device, collectives = "cuda", "nccl"
    else:
        c = r.check("one-rank data-parallel run through tools/launch (Gloo on the CPU)")
        n = r.check("one-rank NCCL data-parallel run through tools/launch")
        n.skip("needs a CUDA GPU; the launch path was rehearsed with Gloo on the CPU")
        device, collectives = "cpu", "gloo"
    launched(r, c, 1, device, collectives, size)
    two_gpus = r.gpu and len(visible_gpus(r)) >= 2
    if r.gpu:
        two = r.check("two-rank NCCL data-parallel run through tools/launch")
        if not two_gpus:
            two.skip("needs two GPUs")
        else:
            launched(r, two, 2, device, collectives, size)
    f = r.check("a failing rank stops the others, which write what they measured")
    failing_rank(r, f, "cpu")
    if two_gpus:
        failing_rank(r, f, device)


def failing_rank(r, c, device):
    """Selftest/rank1_fails: rank 1 fails at its fifth step while rank 0
    waits for it in a collective. Rank 1 aborts its group, so rank 0's
    wait ends at once rather than after --dist_timeout_s; the launcher
    names the rank that failed first and rank 0 writes its results."""
    path = os.path.join(r.data, f"failing_rank_{device}.json")
    if os.path.exists(path):
        os.remove(path)
    start = time.monotonic()
    rc, out = r.command([os.path.join(TOOLS, "launch"), "--nproc_per_node=2",
                         r.bench, f"--devices={device}", "--threads=1",
                         "--steps=20", "--warmup_s=0", "--dist_timeout_s=300",
                         f"--benchmark_filter=^Selftest/(ok|rank1_fails)/{device}/",
                         f"--benchmark_out={path}", "--benchmark_out_format=json"],
                        env={"LTB_SELFTEST": "1"})
    seconds = time.monotonic() - start
    if rc != 1:
        c.fail(f"failing_rank {device}: tools/launch exited with status {rc}, not 1")
    if seconds > 60:
        c.fail(f"failing_rank {device}: the run took {seconds:.0f} s: rank 0 waited for "
               "the rank that failed instead of stopping")
    named = re.search(r"launch: rank \d+ exited with status \d+", out)
    if not named:
        c.fail(f"failing_rank {device}: the launcher did not name the rank that failed")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        c.fail(f"failing_rank {device}: rank 0 wrote no results ({e})")
        return
    kinds = {short(e["name"]).split("/")[1]: e for e in iterations(doc)}
    if "ok" not in kinds or error_of(kinds["ok"]):
        c.fail(f"failing_rank {device}: what rank 0 measured first is missing")
    if "rank1_fails" not in kinds or not error_of(kinds["rank1_fails"]):
        c.fail(f"failing_rank {device}: the failed benchmark is not reported as an error")
    else:
        c.notes.append(f"{device}: stopped in {seconds:.1f} s; {named.group(0) if named else ''}"
                       f"; rank 0: {error_of(kinds['rank1_fails'])[:160]}")


def visible_gpus(r):
    rc, out = r.command(["nvidia-smi", "-L"]) if shutil.which("nvidia-smi") else (1, "")
    return [line for line in out.splitlines() if line.startswith("GPU ")] if rc == 0 else []


def launched(r, c, ranks, device, collectives, size):
    forced = ["--force_process_group=true"] if r.has_flag("force_process_group") else []
    if not forced and ranks == 1:
        c.fail(f"bench has no --force_process_group: a one-rank run creates no process "
               f"group, so {collectives} is not exercised")
    path = os.path.join(r.data, f"data_parallel_{ranks}.json")
    if os.path.exists(path):
        os.remove(path)
    rc, _ = r.command([os.path.join(TOOLS, "launch"), f"--nproc_per_node={ranks}",
                       r.bench, f"--devices={device}", "--steps=5", "--warmup_s=0.1",
                       *forced, *r.shape,
                       *([] if r.gpu else REHEARSAL_PEAKS + REHEARSAL_THREADS),
                       f"--benchmark_filter=^EncDec/{size}/{device}/train_step/",
                       f"--benchmark_out={path}", "--benchmark_out_format=json"])
    if rc != 0:
        c.fail(f"tools/launch exited with status {rc}")
    doc = read_results(c, "data_parallel", path, rc)
    if doc is None:
        return
    context = doc.get("context", {})
    world = context.get("world_size")
    if str(world) != str(ranks):
        c.fail(f"data_parallel: context world_size is {world!r}, not {ranks}")
    group = context.get("process_group", "")
    if not group.startswith(collectives + ","):
        c.fail(f"data_parallel: context process_group is {group!r}, not {collectives}")
    entries = iterations(doc)
    if not entries:
        c.fail("data_parallel: no benchmark ran")
    for e in entries:
        err = error_of(e)
        if err:
            c.fail(f"data_parallel: {short(e['name'])}: {err}")
        elif "grad_buckets" not in e:
            c.fail(f"data_parallel: {short(e['name'])} lacks grad_buckets: the gradients "
                   "were not averaged through the group")
        else:
            c.notes.append(f"{short(e['name'])}: process_group {group}, grad_buckets "
                           f"{fmt(e['grad_buckets'])}, tokens/s {fmt(e.get('tokens/s'))}")
