"""The default suite on every device, and bench's CPU/GPU speedup summary."""
import os

from ltb.gpu.check.results import expect_names, families_phases
from ltb.gpu.check.runner import TOOLS


def run(r):
    r.section("default suite")
    c = r.check("default suite")
    s = r.check("CPU/GPU speedup summary")
    if r.gpu:
        devices = ",".join(dict.fromkeys(["cpu", *r.gpus]))
        args = [f"--devices={devices}", *r.fast]
        if r.quick:  # the default suite without Llama/8B
            if r.has_flag("suite_skip"):
                args.append("--suite_skip=Llama/8B")
            else:
                args.append(f"--benchmark_filter={r.suite_filter(r.dev_re[:-1] + '|cpu)')}")
        doc = r.bench_run(c, "default", args, peaks=False)
        bench_output = r.last_output
        rc, out = r.command([r.tools_python, os.path.join(TOOLS, "speedup"),
                             os.path.join(r.data, "default.json")])
        printed = "Speedup:" in bench_output
        if rc != 0:
            s.fail(f"tools/speedup default.json exited with status {rc}")
        if not printed:
            s.fail("bench printed no 'Speedup:' summary")
        s.notes += [line.strip() for line in out.splitlines() if "Speedup" in line][:12]
    else:
        doc = r.bench_run(c, "default", ["--devices=cpu", *r.fast, *r.shape,
                                         f"--benchmark_filter={r.suite_filter()}"])
        s.skip("needs a GPU: the summary compares each benchmark on the CPU and the GPU")
    expect_names(c, "default", doc, [f"^{f}/{z}/" for f, z in r.sizes.items()]
                 + ["^Ops/matmul/", "^Ops/copy/", "^Ops/noop/"])
    seen, _ = families_phases(doc)
    c.notes += [f"{k}: {', '.join(sorted(v))}" for k, v in seen.items()]
