"""--sync=false against --sync=true on a small model."""
from ltb.gpu.check.results import error_of, fmt, iterations, short
from ltb.gpu.check.summary import FAILED


def run(r):
    r.section("sync")
    c = r.check("--sync=false against --sync=true")
    t = r.sizes["Transformer"]
    sel = f"--benchmark_filter=^Transformer/{t}/{r.step_re}/forward/"
    times = {}
    for sync in ("true", "false"):
        doc = r.bench_run(c, f"sync_{sync}", [f"--devices={','.join(r.step_devices)}",
                                              "--steps=10", "--warmup_s=0.1", sel, *r.shape,
                                              f"--sync={sync}"])
        for e in iterations(doc or {}):
            if not error_of(e):
                times[(sync, short(e["name"]).replace("/nosync", ""))] = e
    for (sync, name), e in sorted(times.items()):
        if sync != "true":
            continue
        other = times.get(("false", name))
        if other is None:
            c.fail(f"sync_false: no --sync=false result for {name}")
            continue
        ratio = e["real_time"] / other["real_time"] if other["real_time"] else float("inf")
        c.notes.append(f"{name}: synced {fmt(e['real_time'])} {e['time_unit']}, "
                       f"not synced {fmt(other['real_time'])} {other['time_unit']} "
                       f"({ratio:.2f}x)")
        if "/nosync" not in other["name"]:
            c.fail(f"sync_false: {short(other['name'])} does not end in /nosync")
    if not times and c.status != FAILED:
        c.fail("sync: nothing ran")
