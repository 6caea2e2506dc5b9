"""A real out-of-memory error, on the host and on the GPU, caught while the
run goes on."""
import os
import re
import subprocess

from ltb.gpu.check.results import error_of, iterations, short
from ltb.gpu.check.runner import REHEARSAL_THREADS


# The host out-of-memory check's address-space limit: what bench maps before
# it allocates (its own file and every shared library it loads, the CUDA
# ones included), plus OOM_HEADROOM for its heap, thread stacks and
# GPT2/nano; Transformer/medium's training step needs 6.8 GB more.
OOM_HEADROOM = 3 << 30


def run(r):
    r.section("out of memory")
    c = r.check("host out-of-memory error caught, the run goes on")
    g = r.check("CUDA out-of-memory error caught, the run goes on")
    # Under an address-space limit of what bench maps plus 3 GiB,
    # Transformer/medium's training step (6.8 GB of weights, gradients
    # and AdamW state) runs out of host memory while it is built, though
    # the machine's free memory passed the memory guard; GPT2/nano then
    # runs. No GPU is touched, one thread computes, and glibc keeps two
    # malloc arenas (each thread's own arena reserves 64 MB of addresses).
    medium = "Transformer/medium/cpu/train_step/"
    limit = mapped_bytes(r.bench) + OOM_HEADROOM
    c.notes.append(f"address-space limit {limit / 2**30:.1f} GiB "
                   f"({mapped_bytes(r.bench) / 2**30:.1f} GiB of files mapped)")
    doc = r.bench_run(c, "oom_host", [
        "--devices=cpu", "--batch=1", "--seq=32", "--steps=2", "--warmup_s=0",
        *(REHEARSAL_THREADS if r.gpu else []),  # (the rehearsal's runs have it)
        f"--benchmark_filter=^({medium}|GPT2/nano/cpu/forward/)"],
                      expected=[r"out of host memory", r"does not fit"],
                      env={"CUDA_VISIBLE_DEVICES": "", "MALLOC_ARENA_MAX": "2"}, limit_as=limit)
    entries = iterations(doc or {})
    hit = [i for i, e in enumerate(entries) if medium in e["name"]]
    if doc is not None and not hit:
        c.fail(f"oom_host: no {medium} result")
    for i in hit:
        err = error_of(entries[i]) or ""
        if "does not fit" in err:
            c.skip("the memory guard refused it first (too little free host memory for "
                   "a real out-of-memory error): " + err)
        elif "out of host memory" not in err:
            c.fail(f"oom_host: {short(entries[i]['name'])} did not run out of host memory")
        else:
            c.notes.append(f"{short(entries[i]['name'])}: {err}")
        ran_after(c, "oom_host", entries, i)
    if not r.gpu:
        g.skip("needs a CUDA GPU")
        return
    # With the memory guard off, Transformer/2.7B's training step at batch
    # 64 x 1024 (about 620 GiB by the estimate) runs into CUDA's own
    # out-of-memory error; GPT2/nano, registered after it, then runs on
    # the same GPU (at most 1024 positions: seq 2048 it refuses).
    gpu = re.escape(r.gpus[0])
    doc = r.bench_run(g, "oom_cuda", [
        f"--devices={r.gpus[0]}", "--memory_guard=false", "--batch=64", "--seq=1024",
        "--steps=1", "--warmup_s=0",
        f"--benchmark_filter=^(Transformer/2.7B/{gpu}/train_step/|GPT2/nano/{gpu}/forward/)"],
                      expected=[r"out of memory on"])
    entries = iterations(doc or {})
    hit = [i for i, e in enumerate(entries) if e["name"].startswith("Transformer/2.7B/")]
    if doc is not None and not hit:
        g.fail("oom_cuda: no Transformer/2.7B result")
    for i in hit:
        err = error_of(entries[i]) or ""
        if "does not fit" in err:
            g.fail("oom_cuda: the memory guard refused it though --memory_guard=false")
        elif "out of memory on" not in err or "estimate was" not in err:
            g.fail(f"oom_cuda: {short(entries[i]['name'])} did not report a CUDA "
                   f"out-of-memory error with its estimate: {err or 'it ran'}")
        else:
            g.notes.append(f"{short(entries[i]['name'])}: {err}")
        ran_after(g, "oom_cuda", entries, i)


def ran_after(check, what, entries, i):
    """A benchmark ran, without an error, after the i-th entry's error."""
    after = [e for e in entries[i + 1:] if not error_of(e)]
    if not after:
        check.fail(f"{what}: nothing ran after the out-of-memory error")
    else:
        check.notes.append(f"then {short(after[0]['name'])} ran")


def mapped_bytes(binary):
    """The bytes of the files a program maps when it starts: itself and the
    shared libraries ldd resolves for it (LibTorch's CUDA libraries among
    them, loaded whether or not a GPU is used)."""
    total = os.path.getsize(binary)
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for path in dict.fromkeys(re.findall(r"=> (/\S+)", out)):
        try:
            total += os.path.getsize(os.path.realpath(path))
        except OSError:
            pass
    return total
