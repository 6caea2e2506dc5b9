"""The shared runner of gpu-check's steps: one command at a time with its
output on the console and in console.log, bench runs read back into a
Check (one row of the summary), and the budget each step must fit in."""
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from ltb.base import REPO, SMALL_SIZES, Signalled, raise_on_signals
from ltb.gpu.check.pythons import tools_python
from ltb.gpu.check.results import error_of, fmt, iterations, read_results, short
from ltb.gpu.check.summary import (FAILED, INTERRUPTED, OUT_OF_TIME, Check, write_archive,
                                   write_summary)

TOOLS = os.path.join(REPO, "tools")
# Every family's size in the default suite, and the rehearsal's.
SMALL = SMALL_SIZES
NANO = {family: "nano" for family in SMALL}
SUITE_OPS = "Ops/(matmul/2048x2048|copy/256MiB|noop/empty)/"
FAST = ["--benchmark_min_time=0.05", "--warmup_s=0.1"]
# The rehearsal's: a step or a few of each, after the one warm-up step that
# bench always takes (its precision check alone runs 76 benchmarks, a third
# of a second each with FAST on two cores).
REHEARSAL_FAST = ["--benchmark_min_time=0.01", "--warmup_s=0"]
# Peaks given to every run of the rehearsal, so that none spends half a
# minute measuring the CPU's (mfu there is not what is checked; the e2e
# tests check the measured peaks).
REHEARSAL_PEAKS = ["--peak_flops=1e13", "--peak_bandwidth=1e12"]
# One thread: on a small machine that others share, two OpenMP threads that
# wait on each other can run a nano model ten times slower.
REHEARSAL_THREADS = ["--threads=1"]
# The rehearsal's shapes: small enough for a 2-core CPU.
REHEARSAL_SHAPE = ["--batch=2", "--seq=64", "--dataset_samples=16", "--new_tokens=20"]
# The rehearsal's Ops: the smallest matmul (a CPU without bf16 or fp16
# arithmetic takes a minute over a 2048x2048 one in those dtypes).
REHEARSAL_OPS = "Ops/(matmul/256x256|copy/256MiB|noop/empty)/"
COMMAND_TIMEOUT = 600  # seconds: one bench run
# The least time each step needs on a GPU with --quick (seconds, after the
# build): a step is not started with less than this left of --budget. The
# rehearsal on a CPU uses a tenth of these.
STEP_SECONDS = {"bench": 5, "default suite": 60, "roofline": 10, "precision": 60, "tf32 and graphs": 30,
                "generation": 20, "serve": 60, "train_epoch": 30, "profile": 15, "transfers": 10,
                "sync": 10, "memory guard": 5, "out of memory": 20, "data-parallel": 30,
                "ctest": 120}


class ignoring_signals:
    """SIGINT and SIGTERM wait while the block runs (stopping the children,
    writing the summary), then the first one that came is raised."""

    def __enter__(self):
        self.came = []
        self.old = {sig: signal.signal(sig, lambda n, _f: self.came.append(n))
                    for sig in (signal.SIGINT, signal.SIGTERM)}

    def __exit__(self, *exc):
        for sig, handler in self.old.items():
            signal.signal(sig, handler)
        if self.came and exc[0] is None:
            raise Signalled(self.came[0])


class Runner:
    """One gpu-check: runs its steps, each a function of this runner, in
    order, and keeps the summary and the archive written after each."""

    def __init__(self, args, steps):
        self.steps = steps  # (label, function of the runner), in order
        self.args = args
        self.quick = args.quick
        self.pack = args.pack or args.quick
        self.budget = args.budget
        self.started = time.monotonic()
        # Where the JSON and the profiler's files go: OUTDIR itself, or with
        # --pack a scratch folder whose files OUTDIR's archive holds.
        self.out = os.path.abspath(args.outdir)
        self.data = tempfile.mkdtemp(prefix="gpu-check-") if self.pack else self.out
        self.current = None  # the step running
        self.interrupted = self.interrupted_step = None
        self.elapsed = 0.0
        self.tools_python, self.python_tried = tools_python()
        self.torch_python = None  # (python, tried) of the first with torch, when asked
        self.bench = os.path.abspath(args.bench)
        self.devices = [d for d in args.devices.split(",") if d]
        self.gpus = [d for d in self.devices if d.startswith("cuda")]
        self.gpu = bool(self.gpus)
        self.sizes = SMALL if self.gpu else NANO
        self.shape = [] if self.gpu else REHEARSAL_SHAPE
        self.fast = FAST if self.gpu else REHEARSAL_FAST
        self.encoder_seq = "128" if self.gpu else "64"
        self.dev_re = "(" + "|".join(re.escape(d) for d in self.devices) + ")"
        # The devices of the checks after the default suite: with --quick on a
        # GPU, the GPUs alone (the default suite measured the CPU).
        self.step_devices = self.gpus if self.gpu and self.quick else self.devices
        self.step_re = "(" + "|".join(re.escape(d) for d in self.step_devices) + ")"
        self.checks = []
        self.log = None
        self.help_text = ""
        self.last_output = ""

    def say(self, text=""):
        print(text, flush=True)
        if self.log:
            self.log.write(text + "\n")
            self.log.flush()

    def check(self, title):
        c = Check(title)
        self.checks.append(c)
        return c

    def command(self, cmd, env=None, limit_as=None, cwd=None, timeout=None):
        """Runs cmd with its output on the console and in console.log;
        returns (exit status, output). A command that cannot start reads as
        status 127; one still running after timeout seconds is stopped
        (SIGTERM, then SIGKILL: bench writes what it measured on SIGTERM)
        and reads as 124."""
        self.say("$ " + " ".join(shlex.quote(c) for c in cmd))
        timeout = timeout or self.args.timeout
        if self.budget is not None:  # stopped at the budget's end
            timeout = max(1.0, min(timeout, self.budget - self.since_start()))

        def preexec():
            os.setsid()  # its own process group: the ranks and tests it starts stop with it
            if limit_as:
                resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", cwd=cwd, preexec_fn=preexec,
                                    env=dict(os.environ, **(env or {})))
        except OSError as e:
            self.say(f"gpu-check: cannot run {cmd[0]}: {e}")
            return 127, str(e)
        expired = threading.Event()

        def stop(sig):
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass

        def expire():
            expired.set()
            stop(signal.SIGTERM)
            if proc.poll() is None:
                threading.Timer(20, stop, (signal.SIGKILL,)).start()
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                self.say(line.rstrip("\n"))
            rc = proc.wait()
        except (Signalled, KeyboardInterrupt):
            # Its processes are in a session of their own: a signal to this
            # one does not reach them. SIGTERM first, so that bench writes
            # what it measured; SIGKILL for what is left after 20 s.
            timer.cancel()
            with ignoring_signals():
                stop(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
                stop(signal.SIGKILL)
                proc.wait()
            self.say(f"gpu-check: {' '.join(cmd[:1])} stopped by the signal")
            raise
        finally:
            timer.cancel()
        if expired.is_set():
            self.say(f"gpu-check: stopped after {timeout} s")
            return 124, "".join(lines) + f"\nstopped after {timeout} s"
        if rc != 0:
            self.say(f"gpu-check: exit status {rc}")
        return rc, "".join(lines)

    def bench_run(self, check, name, args, expected=(), env=None, limit_as=None, peaks=True):
        """bench ARGS writing OUTDIR/NAME.json; the document, or None with the
        check failed. Errored benchmarks whose message matches none of the
        expected patterns fail the check."""
        path = os.path.join(self.data, name + ".json")
        if os.path.exists(path):
            os.remove(path)
        extra = [] if self.gpu else list(REHEARSAL_THREADS)
        if peaks and not self.gpu:
            extra += REHEARSAL_PEAKS
        rc, output = self.command([self.bench, *args, *extra, f"--benchmark_out={path}",
                                   "--benchmark_out_format=json"], env=env, limit_as=limit_as)
        self.last_output = output
        doc = read_results(check, name, path, rc)
        if rc != 0:
            tail = [line for line in output.strip().splitlines() if line.strip()][-1:]
            check.fail(f"{name}: bench exited with status {rc}"
                       + (f": {tail[0][:300]}" if tail else ""))
        if doc is not None:
            entries = iterations(doc)
            if not entries:
                check.fail(f"{name}: no benchmark ran")
            for e in entries:
                err = error_of(e)
                if err and not any(re.search(p, err) for p in expected):
                    check.fail(f"{name}: {short(e['name'])}: {err}")
                for u in ("mfu", "mbu"):  # a peak a benchmark beats is a wrong peak
                    if not err and e.get(u, 0) > 1:
                        check.fail(f"{name}: {short(e['name'])}: {u} {fmt(e[u])} above 1")
        return doc

    def has_flag(self, flag):
        return re.search(r"^\s*--" + re.escape(flag) + r"(=|\s|$)", self.help_text,
                         re.MULTILINE) is not None

    def suite_filter(self, devices_re=None, every_phase=False):
        """The default suite's families, phases and Ops at this run's sizes
        (Llama's generation alone, as the default suite has it, unless
        every_phase)."""
        d = devices_re or self.dev_re
        parts = []
        for family, size in self.sizes.items():
            if family == "Encoder":
                parts.append(f"Encoder/{size}/{d}/[^/]+/batch:[0-9]+/seq:{self.encoder_seq}/")
            elif family == "Transformer":
                parts.append(f"Transformer/{size}/{d}/(forward|forward_backward|train_step)/")
            elif family == "Llama" and not every_phase:
                parts.append(f"Llama/{size}/{d}/generate/")
            else:
                parts.append(f"{family}/{size}/{d}/")
        parts.append(f"{SUITE_OPS if self.gpu else REHEARSAL_OPS}{d}/")
        return "^(" + "|".join(parts) + ")"

    def since_start(self):
        return time.monotonic() - self.started

    def run_all(self):
        os.makedirs(self.out, exist_ok=True)
        if self.pack:  # OUTDIR ends with the plain files alone
            shutil.rmtree(os.path.join(self.out, "profile"), ignore_errors=True)
            for name in os.listdir(self.out):
                if name.endswith(".json"):
                    os.remove(os.path.join(self.out, name))
        handlers = raise_on_signals()
        try:
            with open(os.path.join(self.out, "console.log"), "w") as self.log:
                mode = ("on " + ",".join(self.gpus)) if self.gpu else \
                    "rehearsal on " + ",".join(self.devices) + " at nano sizes"
                self.say(f"gpu-check: {mode}{' (--quick)' if self.quick else ''}; bench "
                         f"{self.bench}; results in {self.out}"
                         + (f"; budget {self.budget:.0f} s" if self.budget is not None else ""))
                try:
                    for label, run in self.steps:
                        self.step(label, run)
                except Signalled as e:
                    for sig in handlers:  # a second signal does not stop the summary
                        signal.signal(sig, signal.SIG_IGN)
                    self.interrupted, self.interrupted_step = e, self.current
                    self.say(f"gpu-check: {e} during the step '{self.current}': stopped")
                    c = self.check(f"{self.current} (interrupted)")
                    c.status = INTERRUPTED
                    c.notes.append(f"{e} arrived during this step; the steps after it did not run")
                self.current = None
                self.finish()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            if self.pack:
                shutil.rmtree(self.data, ignore_errors=True)
        if self.interrupted:
            return 128 + self.interrupted.signum
        return 1 if any(c.status in (FAILED, OUT_OF_TIME) for c in self.checks) else 0

    def step(self, label, run):
        """Runs one step unless the budget cannot hold it; its time goes on
        its first check; the summary and the archive are written after it."""
        need = STEP_SECONDS.get(label, 0) * (1 if self.gpu else 0.1)
        left = None if self.budget is None else self.budget - self.since_start()
        quiet = label == "ctest" and not self.runs_ctest()  # only says why it is skipped
        if left is not None and not quiet and (left < need or left <= 0):
            c = self.check(label)
            c.skip(f"{max(left, 0):.0f} s of the {self.budget:g} s budget left, and this step "
                   f"needs about {need:.0f} s", OUT_OF_TIME)
            self.say(f"gpu-check: {label}: out of time ({left:.0f} s left)")
            self.progress()
            return
        self.current = label
        t0, before = time.monotonic(), len(self.checks)
        self.progress()
        run(self)
        if len(self.checks) > before:  # the step's time, on its first check
            self.checks[before].seconds = time.monotonic() - t0
        self.current = None
        self.progress()

    def progress(self):
        self.elapsed = self.since_start()
        write_summary(self, final=False)
        write_archive(self)

    def finish(self):
        self.elapsed = self.since_start()
        write_archive(self)
        write_summary(self, final=True)

    def section(self, title):
        self.say("")
        self.say(f"=== {title} ===")

    def runs_ctest(self):
        return self.args.ctest if self.quick else not self.args.no_ctest
