"""A whole visit to a GPU machine in one command, inside one time budget:
probe the machine, build bench (tools/setup --offline from the kit), run
tools/gpu-check --quick, and leave a few plain files in OUTDIR.

    tools/gpu-run [--budget=SECONDS] [--kit=DIR] [--setup=offline|online|none]
                  [--bench=PATH | --prebuilt=PATH] [--devices=LIST] OUTDIR

OUTDIR gets summary.md, console.log, results.tar.gz, setup.log and
visit.md. The visit ends inside --budget + 60 s. --devices: by default cuda
where nvidia-smi lists a GPU, else cpu (the rehearsal). Exit status:
gpu-check's; 1 when the set-up failed; 128 + the signal when interrupted;
2 on bad usage. The rest: docs/devices.md ("First run on a GPU")."""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

from ltb.base import REPO, Signalled, raise_on_signals

TOOLS = os.path.join(REPO, "tools")
DEFAULT_BUDGET = 540
# Kept from gpu-check's share for its summary and archive.
RESERVE = 20
# gpu-check --quick does not start with less than this.
LEAST_CHECK = 60
# What a visit (or gpu-check) leaves in OUTDIR: emptied of these alone.
OURS = {"summary.md", "console.log", "results.tar.gz", "visit.md", "setup.log", "profile",
        "summary.md.tmp", "visit.md.tmp", "results.tar.gz.tmp"}


def first_line(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def last_line(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class Visit:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.outdir)
        self.started = time.monotonic()
        self.phases = []  # [name, status, seconds, what it showed]
        self.probe = []  # (what, value)
        self.current = None
        self.child = None
        self.interrupted = None

    def elapsed(self):
        return time.monotonic() - self.started

    def say(self, text):
        print(f"[gpu-run] {text}", flush=True)

    # --- the record ------------------------------------------------------

    def visit_md(self):
        lines = ["## The visit (tools/gpu-run)", "",
                 f"budget: {self.args.budget:.0f} s; elapsed: {self.elapsed():.0f} s"
                 + (f"; INTERRUPTED by {self.interrupted} during '{self.current}'"
                    if self.interrupted else ""), "",
                 "| phase | status | seconds | what it showed |", "|---|---|---|---|"]
        for name, status, seconds, note in self.phases:
            lines.append(f"| {name} | {status} | {'' if seconds is None else f'{seconds:.0f}'} "
                         f"| {note} |")
        if self.probe:
            lines += ["", "| probe | value |", "|---|---|"]
            lines += [f"| {what} | {value.replace('|', '/')} |" for what, value in self.probe]
        return "\n".join(lines) + "\n"

    def write_visit(self):
        path = os.path.join(self.out, "visit.md")
        with open(path + ".tmp", "w") as f:
            f.write(self.visit_md())
        os.replace(path + ".tmp", path)

    def append_to_summary(self):
        path = os.path.join(self.out, "summary.md")
        text = ""
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
        marker = "## The visit (tools/gpu-run)"
        if marker in text:
            text = text[:text.index(marker)].rstrip("\n") + "\n"
        with open(path + ".tmp", "w") as f:
            f.write((text + "\n" if text else "") + self.visit_md())
        os.replace(path + ".tmp", path)

    # --- running ---------------------------------------------------------

    def run(self, cmd, log=None, env=None, timeout=120):
        """cmd's exit status and output; its output also goes to log (a
        file) or to the console. Stopped with SIGTERM on a signal or past
        timeout (status 124)."""
        self.say("$ " + " ".join(shlex.quote(c) for c in cmd))
        try:
            self.child = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                errors="replace", env=dict(os.environ, **(env or {})), cwd=REPO)
        except OSError as e:
            return 127, str(e)
        deadline = time.monotonic() + timeout
        lines = []
        try:
            for line in self.child.stdout:
                lines.append(line)
                if log:
                    log.write(line)
                    log.flush()
                else:
                    print(line, end="", flush=True)
                if time.monotonic() > deadline:
                    self.stop()
                    return 124, "".join(lines) + f"\nstopped after {timeout:.0f} s"
            return self.child.wait(), "".join(lines)
        except Signalled:
            self.stop()
            raise
        finally:
            self.child = None

    def stop(self):
        child = self.child
        if child is None or child.poll() is not None:
            return
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            child.terminate()  # gpu-check stops its own children and writes its summary
            try:
                child.wait(timeout=40)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def phase(self, name, fn):
        self.current = name
        t0 = time.monotonic()
        entry = [name, "running", None, ""]
        self.phases.append(entry)
        self.write_visit()
        try:
            status, note = fn()
        finally:
            entry[2] = time.monotonic() - t0
        entry[1], entry[3] = status, note
        self.current = None
        self.write_visit()
        return status

    # --- the phases ------------------------------------------------------

    def do_probe(self):
        def ask(what, cmd, pick=first_line):
            if not shutil.which(cmd[0]) and not os.path.isfile(cmd[0]):
                self.probe.append((what, f"no {cmd[0]}"))
                return ""
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                value = pick(proc.stdout + proc.stderr) if proc.returncode == 0 else \
                    f"{cmd[0]} exited with status {proc.returncode}: {last_line(proc.stderr)}"
            except (OSError, subprocess.SubprocessError) as e:
                value = f"{cmd[0]}: {e}"
            self.probe.append((what, value))
            return value
        gpus = ask("GPU", ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                           "--format=csv,noheader"], pick=lambda t: "; ".join(
                               line.strip() for line in t.strip().splitlines()))
        ask("nvcc", [os.environ.get("NVCC", "nvcc"), "--version"], pick=last_line)
        ask("cmake", ["cmake", "--version"])
        ask("compiler", ["c++", "--version"])
        python = os.environ.get("LTB_PYTHON", "python3")
        ask("Python and torch", [python, "-c",
            "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, "
            "'CUDA', torch.version.cuda, 'GPU' if torch.cuda.is_available() else 'no GPU')"])
        self.probe.append(("cores", str(os.cpu_count())))
        try:
            with open("/proc/meminfo") as f:
                total = next(line for line in f if line.startswith("MemTotal:"))
            self.probe.append(("memory", f"{int(total.split()[1]) / 2**20:.0f} GiB"))
        except (OSError, StopIteration, ValueError):
            pass
        self.gpu_found = bool(gpus) and not gpus.startswith(("no ", "nvidia-smi"))
        return "ran", "; ".join(f"{w}: {v}" for w, v in self.probe[:1])

    def kit(self):
        return os.path.abspath(self.args.kit or os.path.join(REPO, ".kit"))

    def source_commit(self):
        if os.environ.get("LTB_SOURCE_COMMIT"):
            return os.environ["LTB_SOURCE_COMMIT"]
        try:
            with open(os.path.join(self.kit(), "source-commit")) as f:
                recorded = re.sub(r"[^A-Za-z0-9._-]", "", f.read())
            return recorded + " (recorded by tools/offline-kit)" if recorded else ""
        except OSError:
            return ""

    def library_path(self):
        """LD_LIBRARY_PATH for a bench built elsewhere: the Python's
        torch/lib and the nvidia packages' lib folders beside it, then the
        kit's libraries (Abseil, Google Benchmark)."""
        python = os.environ.get("LTB_PYTHON", "python3")
        dirs = []
        try:
            proc = subprocess.run([python, "-c", (
                "import glob, os, torch; t = os.path.dirname(torch.__file__); "
                "print('\\n'.join([os.path.join(t, 'lib')] + sorted(glob.glob("
                "os.path.join(os.path.dirname(t), 'nvidia', '*', 'lib')))))")],
                capture_output=True, text=True, timeout=120)
            if proc.returncode == 0:
                dirs = [d for d in proc.stdout.split("\n") if d.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
        dirs += [os.path.join(self.kit(), "usr", "lib", "x86_64-linux-gnu"),
                 os.path.join(self.kit(), "usr", "lib")]
        old = os.environ.get("LD_LIBRARY_PATH", "")
        return ":".join(dict.fromkeys(dirs + ([old] if old else [])))

    def try_prebuilt(self):
        """The prebuilt bench, if it starts here; else None (and why)."""
        path = os.path.abspath(self.args.prebuilt)
        env = {"LD_LIBRARY_PATH": self.library_path()}
        with open(os.devnull, "w") as quiet:
            rc, out = self.run([path, "--help"], env=env, timeout=120, log=quiet)
        if rc != 0:
            return None, f"{path} --help exited with status {rc}: {last_line(out)[:200]}"
        os.environ["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"]  # gpu-check's and bench's
        return path, ""

    def do_setup(self):
        mode = self.args.setup
        if self.args.bench:
            return "skipped", f"--bench {self.args.bench}"
        why_not = ""
        if self.args.prebuilt:
            self.prebuilt, why_not = self.try_prebuilt()
            if self.prebuilt:
                return "skipped", f"--prebuilt {self.prebuilt} starts here: no build"
            self.say(f"--prebuilt: {why_not}; building bench")
            why_not = f"--prebuilt did not start ({why_not}); "
        if mode == "none":
            return "skipped", f"{why_not}--setup=none"
        cmd = [os.path.join(TOOLS, "setup")]
        if mode == "offline":
            cmd += ["--offline", self.kit()]
        env = {"LTB_TARGETS": "bench", "LTB_JOBS": str(os.cpu_count() or 2)}
        commit = "" if os.path.isdir(os.path.join(REPO, ".git")) else self.source_commit()
        if commit:
            env["LTB_SOURCE_COMMIT"] = commit
        left = self.args.budget - self.elapsed() - LEAST_CHECK - RESERVE
        with open(os.path.join(self.out, "setup.log"), "w") as log:
            rc, out = self.run(cmd, log=log, env=env, timeout=max(left, 30))
        if rc != 0:
            return "FAILED", (f"{why_not}tools/setup exited with status {rc}: "
                              f"{last_line(out)[:300]}")
        return "ran", f"{why_not}{mode}; bench built" + (f"; commit {commit}" if commit else "")

    def do_check(self):
        left = self.args.budget - self.elapsed() - RESERVE
        if left < LEAST_CHECK:
            return "out of time", f"{left:.0f} s left"
        devices = self.args.devices or ("cuda" if self.gpu_found else "cpu")
        build = os.environ.get("LTB_BUILD_DIR") or os.path.join(REPO, "build")
        bench = self.args.bench or self.prebuilt or os.path.join(build, "bench", "bench")
        cmd = [sys.executable, os.path.join(TOOLS, "gpu-check"), "--quick",
               f"--budget={left:.0f}", f"--devices={devices}", f"--bench={bench}", self.out]
        self.check_rc, out = self.run(cmd, timeout=left + RESERVE + 30)
        status = {0: "ran"}.get(self.check_rc, "FAILED")
        return status, f"--devices={devices}: {last_line(out)[:300]}"

    def main(self):
        os.makedirs(self.out, exist_ok=True)
        for name in os.listdir(self.out):  # an earlier visit's files (main checked)
            path = os.path.join(self.out, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        self.gpu_found, self.check_rc, self.prebuilt = False, 1, None
        handlers = raise_on_signals()
        rc = 0
        try:
            self.phase("probe", self.do_probe)
            if self.phase("setup", self.do_setup) == "FAILED":
                rc = 1
            else:
                self.phase("gpu-check", self.do_check)
                rc = self.check_rc
        except Signalled as e:
            for s in handlers:
                signal.signal(s, signal.SIG_IGN)
            self.interrupted = e
            if self.phases and self.phases[-1][1] == "running":
                self.phases[-1][1] = "INTERRUPTED"
            self.say(f"{e} during '{self.current}': stopped")
            rc = 128 + e.signum
        finally:
            self.write_visit()
            self.append_to_summary()
            for s, h in handlers.items():
                signal.signal(s, h)
        self.say(f"{self.elapsed():.0f} s; " + ", ".join(
            f"{n} {s} {'' if t is None else f'{t:.0f} s'}".strip() for n, s, t, _ in self.phases)
            + f"; files in {self.out}: {', '.join(sorted(os.listdir(self.out)))}")
        return rc


def main():
    parser = argparse.ArgumentParser(
        prog="gpu-run", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("outdir", help="where the visit's files go (emptied first)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                        help=f"seconds for the whole visit (default {DEFAULT_BUDGET})")
    parser.add_argument("--kit", default=None, help="the offline kit (default <repo>/.kit)")
    parser.add_argument("--setup", choices=("offline", "online", "none"), default=None,
                        help="how bench is built (default: offline where the kit is, else online)")
    parser.add_argument("--bench", default=None, help="check this bench; no set-up")
    parser.add_argument("--prebuilt", default=None,
                        help="a bench built elsewhere: checked if it starts here, else built")
    parser.add_argument("--devices", default=None, help="gpu-check's --devices")
    args = parser.parse_args()
    if not args.budget > LEAST_CHECK + RESERVE:
        parser.error(f"--budget: {args.budget:g}: at least {LEAST_CHECK + RESERVE + 1} s")
    kit = os.path.abspath(args.kit or os.path.join(REPO, ".kit"))
    if args.setup is None:
        args.setup = "offline" if os.path.isfile(os.path.join(kit, ".ltb-kit")) else "online"
    if args.setup == "offline" and not os.path.isfile(os.path.join(kit, ".ltb-kit")):
        parser.error(f"--setup=offline: {kit} is not a kit made by tools/offline-kit")
    if os.path.isdir(args.outdir):
        other = [n for n in os.listdir(args.outdir) if n not in OURS and not n.endswith(".json")]
        if other:
            parser.error(f"{args.outdir} holds other files than a visit's ({', '.join(other[:5])}): "
                         "name an empty or new folder")
    for flag in ("bench", "prebuilt"):
        path = getattr(args, flag)
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            parser.error(f"--{flag}: {path} is not an executable file")
    if args.bench and args.prebuilt:
        parser.error("--bench and --prebuilt: name one (--bench skips the set-up, "
                     "--prebuilt builds when it does not start)")
    sys.exit(Visit(args).main())

