"""The matrix rate and the memory bandwidth against the peaks every mfu and
mbu divides by, and torch.sum, which must not read faster than that peak."""
import re

from ltb.gpu.check.pythons import tools_python
from ltb.gpu.check.results import counters, expect_names, fmt, short


# The hardware's two ceilings: the matrix product the datasheet's rate is
# quoted at and a copy far larger than any cache, in bf16 and fp32 (the
# rehearsal's CPU takes the smallest of each).
ROOFLINE_OPS = "Ops/(matmul/8192x8192|copy/2048MiB)/"
REHEARSAL_ROOFLINE_OPS = "Ops/(matmul/256x256|copy/256MiB)/"
# A program any user runs, which must not read faster than the bandwidth
# peak mbu divides by: torch.sum over a tensor far past the device's caches
# (GiB on a GPU; the rehearsal's CPU a quarter of one), its fastest of ten.
TORCH_SUM_GIB = 4
REHEARSAL_TORCH_SUM_GIB = 0.25
TORCH_SUM = """
import sys, time, torch
device, gib = sys.argv[1], float(sys.argv[2])
x = torch.ones(int(gib * (1 << 30)) // 4, device=device)
def sync():
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
x.sum(); sync()
best = 0.0
for _ in range(10):
    sync(); t = time.perf_counter(); x.sum(); sync()
    best = max(best, x.nbytes / (time.perf_counter() - t))
print("torch.sum bytes/s", best)
"""


def run(r):
    """The two ceilings every mfu and mbu is judged against: the matrix
    product at the datasheet's size and a copy of HBM far past the L2,
    each with its rate and its utilisation (neither above 1)."""
    r.section("roofline")
    c = r.check("the matrix rate and the memory bandwidth against the peaks")
    devices = r.gpus if r.gpu else r.devices
    ops = ROOFLINE_OPS if r.gpu else REHEARSAL_ROOFLINE_OPS
    doc = r.bench_run(c, "roofline", [f"--devices={','.join(devices)}",
                                      "--dtype=bf16,fp32", *r.fast,
                                      f"--benchmark_filter=^{ops}{r.dev_re}/"])
    expect_names(c, "roofline", doc, ["^Ops/matmul/.*/bf16", "^Ops/copy/.*/bf16"])
    for e in counters(c, "roofline", doc, "^Ops/matmul/", ["FLOP/s", "mfu"]):
        c.notes.append(f"{short(e['name'])}: {e['FLOP/s'] / 1e12:.4g} TFLOP/s, "
                       f"mfu {fmt(e['mfu'])}")
    for e in counters(c, "roofline", doc, "^Ops/copy/", ["bytes/s", "mbu"]):
        c.notes.append(f"{short(e['name'])}: {e['bytes/s'] / 1e12:.4g} TB/s "
                       f"(read + written), mbu {fmt(e['mbu'])}")
    if doc:
        for device in devices:
            torch_sum(r, c, device, doc.get("context", {}))


def torch_sum(r, c, device, context):
    """torch.sum over a large tensor on `device`, through the first Python
    with torch: a bandwidth peak it beats is a wrong peak."""
    key = f"peak_bandwidth_{device.split(':')[0]}"
    peak = re.match(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)", str(context.get(key, "")))
    if r.torch_python is None:  # looked for once: each look imports torch
        r.torch_python = tools_python(("torch",))
    python, tried = r.torch_python  # tried: none of them has torch
    if not peak or tried:
        c.notes.append(f"torch.sum on {device}: not compared ("
                       + ("no Python with torch" if peak else f"no {key} in the context")
                       + ")")
        return
    gib = TORCH_SUM_GIB if r.gpu else REHEARSAL_TORCH_SUM_GIB
    rc, output = r.command([python, "-c", TORCH_SUM, device, str(gib)])
    rate = re.search(r"torch.sum bytes/s ([0-9.eE+-]+)", output)
    if rc != 0 or not rate:
        c.fail(f"torch.sum on {device}: exited with status {rc}")
        return
    rate, peak = float(rate[1]), float(peak[1])
    if rate > peak:
        c.fail(f"torch.sum over {gib:g} GiB on {device} read {rate / 1e12:.4g} TB/s, "
               f"above the bandwidth peak {peak / 1e12:.4g} TB/s ({context[key]}): "
               "a wrong peak")
    else:
        c.notes.append(f"torch.sum over {gib:g} GiB on {device}: {rate / 1e12:.4g} TB/s, "
                       f"{rate / peak:.2f} of the bandwidth peak {peak / 1e12:.4g} TB/s")
