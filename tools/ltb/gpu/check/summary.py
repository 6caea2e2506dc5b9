"""What gpu-check leaves in OUTDIR as it goes: summary.md, rewritten after
every step, the console's closing list, and with --pack results.tar.gz."""
import os
import tarfile

RAN, SKIPPED, FAILED, MISSING = "ran", "skipped", "FAILED", "not offered"
OUT_OF_TIME, INTERRUPTED = "out of time", "INTERRUPTED"
ARCHIVE = "results.tar.gz"


class Check:
    """One row of the summary: a status, what it showed, what failed."""

    def __init__(self, title):
        self.title, self.status, self.notes, self.failures = title, RAN, [], []
        self.seconds = None

    def fail(self, what):
        self.status = FAILED
        self.failures.append(what)

    def skip(self, why, status=SKIPPED):
        if self.status != FAILED:
            self.status = status
        self.notes.append(why)


def write_summary(r, final):
    """summary.md as it stands (final: with the result, and the closing list
    on the console)."""
    failed = [c for c in r.checks if c.status in (FAILED, OUT_OF_TIME)]
    mode = ("on " + ",".join(r.gpus)) if r.gpu else \
        f"rehearsal on {','.join(r.devices)} (nano sizes; what needs a GPU is skipped)"
    if r.interrupted:
        result = f"INTERRUPTED by {r.interrupted} during '{r.interrupted_step}'"
    elif not final:
        result = "running" + (f": now '{r.current}'" if r.current else "")
    else:
        result = f"FAILED ({len(failed)} checks)" if failed else "passed"
    lines = [f"# gpu-check {mode}{' --quick' if r.quick else ''}", "",
             f"bench: `{r.bench}`  ", f"wall time: {r.elapsed:.0f} s  "]
    if r.budget is not None:
        lines.append(f"budget: {r.budget:.0f} s  ")
    if r.pack:
        lines.append(f"results: `{ARCHIVE}` (every JSON and the profiler's files)  ")
    lines += [f"result: {result}", "", "| check | status | seconds |", "|---|---|---|"]
    for c in r.checks:
        seconds = "" if c.seconds is None else f"{c.seconds:.0f}"
        lines.append(f"| {c.title} | {c.status} | {seconds} |")
    for c in r.checks:
        lines += ["", f"## {c.title}: {c.status}", ""]
        lines += [f"- FAILED: {f}" for f in c.failures]
        lines += [f"- {n}" for n in c.notes]
    path = os.path.join(r.out, "summary.md")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    if not final:
        return
    r.say("")
    r.say("=== summary ===")
    width = max(len(c.title) for c in r.checks)
    for c in r.checks:
        why = "" if c.status in (RAN, FAILED) else f"  ({'; '.join(c.notes)})"
        r.say(f"{c.title:<{width}}  {c.status}{why}")
    if failed:
        r.say("")
        r.say(f"gpu-check: FAILED ({len(failed)} checks):")
        for c in failed:
            for what in c.failures or c.notes:
                r.say(f"  {c.title}: {what}")
    if r.interrupted:
        r.say(f"gpu-check: {result}")
    r.say(f"gpu-check: {r.elapsed:.0f} s; summary in {path}"
          + (f", results in {os.path.join(r.out, ARCHIVE)}" if r.pack else ""))


def write_archive(r):
    """With --pack: OUTDIR/results.tar.gz, every JSON and profiler file
    so far, under gpu-check/ (written beside, then renamed over)."""
    if not r.pack:
        return
    path = os.path.join(r.out, ARCHIVE)
    with tarfile.open(path + ".tmp", "w:gz") as tar:
        for root, _, files in os.walk(r.data):
            for name in sorted(files):
                full = os.path.join(root, name)
                tar.add(full, arcname=os.path.join(
                    "gpu-check", os.path.relpath(full, r.data)))
    os.replace(path + ".tmp", path)

