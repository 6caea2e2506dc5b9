"""The GPU acceptance in one command: everything a first run on a GPU must
show, on the first GPU, in a few minutes.

    tools/gpu-check [--quick] [--pack] [--budget=SECONDS] [--devices=LIST]
                    [--bench=PATH] [--build=DIR] [--no-ctest | --ctest]
                    [--ctest-args=ARGS] [--timeout=SECONDS] OUTDIR

Runs, each as its own bench process (or command):

  default       the default suite on the CPU and the GPU, with bench's device
                speedup summary and tools/speedup on its JSON
  roofline      the bf16 and fp32 matmul at 8192 and a 2 GiB copy: each rate
                and its utilisation of the peak (neither above 1); torch.sum
                over 4 GiB, which must not read faster than the bandwidth peak
  precision     every family and phase at its small size in fp32, bf16, fp16
  tf32, graphs  the same with --tf32 / --cuda_graphs, when bench offers them
  generation    GPT2 and Whisper generation: ttft, tpot, prefill and decode
  train_epoch   from memory and from disk (--data=disk), with gpu_util_%
  profile       --profile: traces, operator tables and gpu_busy_%
  transfers     Ops h2d/d2h pinned and pageable, and d2d
  sync          --sync=false against --sync=true on a small model
  memory guard  Transformer/2.7B train_step at batch 64 x 2048 refused
  oom           a real out-of-memory error caught while the run goes on
  data-parallel one rank through tools/launch (NCCL on a GPU)
  ctest         every test of the build directory

and writes into OUTDIR: one JSON per bench run (<check>.json), console.log
(every command and its output) and summary.md (each check: ran, skipped or
FAILED, and what it showed), rewritten after every step.

--quick sizes the same checks for a short lease of a GPU (about five minutes
on an H100 after the build): no Llama/8B (Llama/1B's generation stands for
it), precision over every family and phase at its small size on the GPU
alone, TF32 and CUDA graphs over a handful of cheap benchmarks, the other
checks on the GPU alone, and no ctest unless --ctest. It implies --pack.

--pack leaves OUTDIR with three plain files and no folder: summary.md,
console.log and results.tar.gz, which holds every JSON and the profiler's
files (rewritten after every step, like the summary).

--budget=SECONDS: a step that would start with less time left than it needs
is skipped as "out of time" rather than started and killed; a command is
stopped at the budget's end.

On SIGINT or SIGTERM the running command's processes are stopped (bench
writes what it measured), and the summary and the archive are written with
the interrupted step named; the exit status is then 128 + the signal.

--devices=cpu is the rehearsal: the same list on the CPU at nano sizes; what
needs a GPU (NCCL, TF32, CUDA graphs, gpu_util_%, gpu_busy_%, transfers, the
speedup over the CPU, out of memory on the GPU) is listed as skipped with
the reason.

Exit 0 when everything that ran passed, 1 when anything failed (a command
that failed, a benchmark that errored other than as expected, a counter or a
benchmark that is missing) or was skipped as out of time, listing what; 2 on
bad usage. Standard library only: the GPU machine may lack the tools' Python
packages. The tools it runs (tools/speedup) and the packages it checks use
the first Python that has them: this one, the project's virtual environment
(tools/setup's), LTB_PYTHON, or python3 on the PATH.
"""
import argparse
import json
import math
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

from ltb.base import REPO, SMALL_SIZES, Signalled, raise_on_signals, venv_dir

TOOLS = os.path.join(REPO, "tools")

# Every family's size in the default suite, and the rehearsal's.
SMALL = SMALL_SIZES
NANO = {family: "nano" for family in SMALL}
SUITE_OPS = "Ops/(matmul/2048x2048|copy/256MiB|noop/empty)/"
TRANSFERS = ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d")
GENERATION_COUNTERS = ("ttft_ms", "tpot_ms", "pp_tok/s", "tg_tok/s")
# The serve step's counters (LoadGen's results), and its load: Server at a
# fixed rate for about 10 s on a GPU and Offline (a second of each in the
# rehearsal).
SERVE_COUNTERS = ("samples/s", "p50_ms", "p99_ms", "valid")
SERVE_GPU = ["--target_qps=100", "--serve_min_s=10", "--serve_min_queries=100"]
SERVE_REHEARSAL = ["--target_qps=20", "--serve_min_s=1", "--serve_min_queries=16"]
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
# bench's --dataset_samples default, and the most the gpu_util_% run uses.
DEFAULT_DATASET_SAMPLES = 128
MAX_UTIL_SAMPLES = 1 << 18
REHEARSAL_SHAPE = ["--batch=2", "--seq=64", "--dataset_samples=16", "--new_tokens=20"]
# and its Ops: the smallest matmul (a CPU without bf16 or fp16 arithmetic
# takes a minute over a 2048x2048 one in those dtypes).
REHEARSAL_OPS = "Ops/(matmul/256x256|copy/256MiB|noop/empty)/"
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
# The host out-of-memory check's address-space limit: what bench maps before
# it allocates (its own file and every shared library it loads, the CUDA
# ones included), plus OOM_HEADROOM for its heap, thread stacks and
# GPT2/nano; Transformer/medium's training step needs 6.8 GB more.
OOM_HEADROOM = 3 << 30
COMMAND_TIMEOUT = 600  # seconds: one bench run
CTEST_TIMEOUT = 1800
RAN, SKIPPED, FAILED, MISSING = "ran", "skipped", "FAILED", "not offered"
OUT_OF_TIME, INTERRUPTED = "out of time", "INTERRUPTED"
ARCHIVE = "results.tar.gz"
GRAPH_TOKEN_SLACK = 25  # token_match_% points
# The Python modules the tools that gpu-check and ctest run import.
TOOL_MODULES = {"scipy": "tools/gate, tools/compare and compare.py",
                "matplotlib": "tools/plot", "yaml": "the workflow tests"}
# --quick on a GPU: the cheap benchmarks TF32 and CUDA graphs are shown on
# (the graphs check runs in bf16, so that token_match_% against an eager fp32
# reference shows the graphed tokens are right).
QUICK_TF32 = "^(Transformer/small/{d}/forward/|ResNet/resnet18/{d}/forward/|Ops/matmul/2048x2048/{d}/)"
QUICK_GRAPHS = "^(Transformer/small/{d}/forward/|GPT2/small/{d}/generate/|Llama/1B/{d}/generate/)"
# The least time each step needs on a GPU with --quick (seconds, after the
# build): a step is not started with less than this left of --budget. The
# rehearsal on a CPU uses a tenth of these.
STEP_SECONDS = {"bench": 5, "default suite": 60, "roofline": 10, "precision": 60, "tf32 and graphs": 30,
                "generation": 20, "serve": 30, "train_epoch": 30, "profile": 15, "transfers": 10,
                "sync": 10, "memory guard": 5, "out of memory": 20, "data-parallel": 30,
                "ctest": 120}


def has_modules(python, modules):
    try:
        probe = subprocess.run([python, "-c", "import " + ", ".join(modules)],
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def read_results(check, name, path, rc):
    """The JSON document a command wrote at path, or None; a command that
    exited 0 without one fails the check."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        if rc == 0:
            check.fail(f"{name}: no JSON results ({e})")
        return None


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


def venv_python():
    return os.path.join(venv_dir(), "bin", "python")


def tools_python(modules=tuple(TOOL_MODULES)):
    """The first Python that has the modules: this one, the project's venv,
    LTB_PYTHON (the offline machine's Python with torch), python3 on the
    PATH; (python, []) or (this Python, the candidates tried) when none has."""
    candidates = [sys.executable, venv_python(), os.environ.get("LTB_PYTHON"),
                  shutil.which("python3")]
    tried = []
    for python in dict.fromkeys(c for c in candidates if c):
        if not (os.path.isfile(python) or shutil.which(python)):
            continue
        tried.append(python)
        if has_modules(python, modules):
            return python, []
    return sys.executable, tried


def short(name):
    return name.replace("/manual_time", "")


def iterations(doc):
    return [e for e in doc.get("benchmarks", []) if e.get("run_type", "iteration") == "iteration"]


def error_of(entry):
    if entry.get("error_occurred") or entry.get("error_message"):
        return entry.get("error_message") or "error"
    return None


def fmt(value):
    if value is None:
        return "-"
    if abs(value) >= 1e4:
        return f"{value:.3g}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


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


class GpuCheck:
    def __init__(self, args):
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
        # The rehearsal's shapes: small enough for a 2-core CPU.
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

    # --- output ----------------------------------------------------------

    def say(self, text=""):
        print(text, flush=True)
        if self.log:
            self.log.write(text + "\n")
            self.log.flush()

    def check(self, title):
        c = Check(title)
        self.checks.append(c)
        return c

    # --- running ---------------------------------------------------------

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

    # --- helpers over results ----------------------------------------------

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

    def expect_names(self, check, name, doc, patterns):
        """Every pattern matches at least one benchmark that ran without error."""
        if doc is None:
            return
        ok = [short(e["name"]) for e in iterations(doc) if not error_of(e)]
        for p in patterns:
            if not any(re.search(p, n) for n in ok):
                check.fail(f"{name}: no benchmark matching {p} ran")

    def counters(self, check, name, doc, selector, counters):
        """Every error-free benchmark matching selector has the counters;
        returns those benchmarks."""
        found = []
        for e in iterations(doc or {}):
            if error_of(e) or not re.search(selector, e["name"]):
                continue
            found.append(e)
            missing = [c for c in counters if c not in e]
            if missing:
                check.fail(f"{name}: {short(e['name'])} lacks {', '.join(missing)}")
        if doc is not None and not found:
            check.fail(f"{name}: no benchmark matching {selector} ran")
        return found

    def families_phases(self, doc):
        """family/size -> phases that ran, and the dtypes seen."""
        seen, dtypes = {}, set()
        for e in iterations(doc or {}):
            if error_of(e):
                continue
            parts = short(e["name"]).split("/")
            if parts[0] == "Ops":
                seen.setdefault("Ops", set()).add(parts[1])
                dtypes.add(parts[4] if len(parts) > 4 else "?")
                continue
            seen.setdefault(f"{parts[0]}/{parts[1]}", set()).add(parts[3])
            dtypes.update(p for p in parts if p in ("fp32", "bf16", "fp16"))
        return seen, dtypes

    # --- the checks ---------------------------------------------------------

    STEPS = (("bench", "sanity"), ("default suite", "default_suite"), ("roofline", "roofline"),
             ("precision", "precision"), ("tf32 and graphs", "tf32_and_graphs"),
             ("generation", "generation"), ("serve", "serve"), ("train_epoch", "train_epoch"),
             ("profile", "profile"), ("transfers", "transfers"), ("sync", "sync"),
             ("memory guard", "memory_guard"), ("out of memory", "oom"),
             ("data-parallel", "data_parallel"), ("ctest", "ctest"))

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
                    for label, method in self.STEPS:
                        self.step(label, getattr(self, method))
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

    def step(self, label, method):
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
        method()
        if len(self.checks) > before:  # the step's time, on its first check
            self.checks[before].seconds = time.monotonic() - t0
        self.current = None
        self.progress()

    def progress(self):
        self.elapsed = self.since_start()
        self.write_summary(final=False)
        self.write_archive()

    def finish(self):
        self.elapsed = self.since_start()
        self.write_archive()
        self.write_summary(final=True)

    def write_archive(self):
        """With --pack: OUTDIR/results.tar.gz, every JSON and profiler file
        so far, under gpu-check/ (written beside, then renamed over)."""
        if not self.pack:
            return
        path = os.path.join(self.out, ARCHIVE)
        with tarfile.open(path + ".tmp", "w:gz") as tar:
            for root, _, files in os.walk(self.data):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    tar.add(full, arcname=os.path.join(
                        "gpu-check", os.path.relpath(full, self.data)))
        os.replace(path + ".tmp", path)

    def section(self, title):
        self.say("")
        self.say(f"=== {title} ===")

    def sanity(self):
        """bench runs and lists its benchmarks; its --help says which flags it has."""
        self.section("bench")
        c = self.check("bench runs and lists the suite")
        rc, out = self.command([self.bench, f"--devices={','.join(self.devices)}",
                                "--benchmark_list_tests"])
        if rc != 0:
            c.fail(f"bench --benchmark_list_tests exited with status {rc}")
        elif not out.strip():
            c.fail("bench --benchmark_list_tests listed nothing")
        else:
            c.notes.append(f"{len(out.split())} benchmarks in the default suite")
        self.say("$ " + self.bench + " --help  (output in console.log only)")
        try:
            proc = subprocess.run([self.bench, "--help"], capture_output=True, text=True,
                                  errors="replace", timeout=min(120, self.args.timeout))
            self.help_text = proc.stdout + proc.stderr
        except (OSError, subprocess.SubprocessError) as e:
            self.help_text = ""
            c.fail(f"bench --help: {e}")
        self.log.write(self.help_text)
        self.python_packages()

    def python_packages(self):
        """The tools this check and ctest run import what tools/requirements.txt
        pins; an offline machine's Python may lack some. The first Python that
        has them runs them (tools_python); named before anything else runs,
        rather than as a traceback in the middle."""
        p = self.check("the tools' Python packages")
        if not self.python_tried:
            p.notes.append(f"{self.tools_python} has {', '.join(TOOL_MODULES)}")
            return
        missing = [f"{m} ({who})" for m, who in TOOL_MODULES.items()
                   if not has_modules(sys.executable, [m])]
        p.fail(f"no Python has {', '.join(TOOL_MODULES)} (tried {', '.join(self.python_tried)}); "
               f"{sys.executable} lacks {', '.join(missing) or 'none of them alone'}: run "
               "tools/setup, or pip install -r tools/requirements.txt into one of them "
               "(offline: the wheels, as docs/setup.md says)")

    def default_suite(self):
        self.section("default suite")
        c = self.check("default suite")
        s = self.check("CPU/GPU speedup summary")
        if self.gpu:
            devices = ",".join(dict.fromkeys(["cpu", *self.gpus]))
            args = [f"--devices={devices}", *self.fast]
            if self.quick:  # the default suite without Llama/8B
                if self.has_flag("suite_skip"):
                    args.append("--suite_skip=Llama/8B")
                else:
                    args.append(f"--benchmark_filter={self.suite_filter(self.dev_re[:-1] + '|cpu)')}")
            doc = self.bench_run(c, "default", args, peaks=False)
            bench_output = self.last_output
            rc, out = self.command([self.tools_python, os.path.join(TOOLS, "speedup"),
                                    os.path.join(self.data, "default.json")])
            printed = "Speedup:" in bench_output
            if rc != 0:
                s.fail(f"tools/speedup default.json exited with status {rc}")
            if not printed:
                s.fail("bench printed no 'Speedup:' summary")
            s.notes += [line.strip() for line in out.splitlines() if "Speedup" in line][:12]
        else:
            doc = self.bench_run(c, "default", ["--devices=cpu", *self.fast, *self.shape,
                                                f"--benchmark_filter={self.suite_filter()}"])
            s.skip("needs a GPU: the summary compares each benchmark on the CPU and the GPU")
        self.expect_names(c, "default", doc, [f"^{f}/{z}/" for f, z in self.sizes.items()]
                          + ["^Ops/matmul/", "^Ops/copy/", "^Ops/noop/"])
        seen, _ = self.families_phases(doc)
        c.notes += [f"{k}: {', '.join(sorted(v))}" for k, v in seen.items()]

    def roofline(self):
        """The two ceilings every mfu and mbu is judged against: the matrix
        product at the datasheet's size and a copy of HBM far past the L2,
        each with its rate and its utilisation (neither above 1)."""
        self.section("roofline")
        c = self.check("the matrix rate and the memory bandwidth against the peaks")
        devices = self.gpus if self.gpu else self.devices
        ops = ROOFLINE_OPS if self.gpu else REHEARSAL_ROOFLINE_OPS
        doc = self.bench_run(c, "roofline", [f"--devices={','.join(devices)}",
                                             "--dtype=bf16,fp32", *self.fast,
                                             f"--benchmark_filter=^{ops}{self.dev_re}/"])
        self.expect_names(c, "roofline", doc, ["^Ops/matmul/.*/bf16", "^Ops/copy/.*/bf16"])
        for e in self.counters(c, "roofline", doc, "^Ops/matmul/", ["FLOP/s", "mfu"]):
            c.notes.append(f"{short(e['name'])}: {e['FLOP/s'] / 1e12:.4g} TFLOP/s, "
                           f"mfu {fmt(e['mfu'])}")
        for e in self.counters(c, "roofline", doc, "^Ops/copy/", ["bytes/s", "mbu"]):
            c.notes.append(f"{short(e['name'])}: {e['bytes/s'] / 1e12:.4g} TB/s "
                           f"(read + written), mbu {fmt(e['mbu'])}")
        if doc:
            for device in devices:
                self.torch_sum(c, device, doc.get("context", {}))

    def torch_sum(self, c, device, context):
        """torch.sum over a large tensor on `device`, through the first Python
        with torch: a bandwidth peak it beats is a wrong peak."""
        key = f"peak_bandwidth_{device.split(':')[0]}"
        peak = re.match(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)", str(context.get(key, "")))
        if self.torch_python is None:  # looked for once: each look imports torch
            self.torch_python = tools_python(("torch",))
        python, tried = self.torch_python  # tried: none of them has torch
        if not peak or tried:
            c.notes.append(f"torch.sum on {device}: not compared ("
                           + ("no Python with torch" if peak else f"no {key} in the context")
                           + ")")
            return
        gib = TORCH_SUM_GIB if self.gpu else REHEARSAL_TORCH_SUM_GIB
        rc, output = self.command([python, "-c", TORCH_SUM, device, str(gib)])
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

    def precision(self):
        self.section("precision")
        c = self.check("every family and phase in fp32, bf16, fp16")
        # On the GPU alone where there is one (the default suite measured the CPU).
        devices = self.gpus if self.gpu else self.devices
        args = [f"--devices={','.join(devices)}", "--dtype=fp32,bf16,fp16", *self.fast, *self.shape,
                f"--benchmark_filter={self.suite_filter(every_phase=True)}"]
        if not self.gpu:  # one epoch, no warm-up one (EncDec's fp16 epoch: 1.5 s on 2 cores)
            args += ["--epochs=1", "--warmup_epochs=0"]
        doc = self.bench_run(c, "precision", args)
        seen, dtypes = self.families_phases(doc)
        for dtype in ("fp32", "bf16", "fp16"):
            self.expect_names(c, "precision", doc,
                              [f"^{f}/{z}/.*/{dtype}(/|$)" for f, z in self.sizes.items()])
        c.notes.append("dtypes: " + ", ".join(sorted(dtypes)))
        c.notes += [f"{k}: {', '.join(sorted(v))}" for k, v in seen.items()]
        if self.gpu and doc:
            # fp32 means fp32 on the GPU: TF32 off for matmuls and convolutions.
            tf32 = doc.get("context", {}).get("cuda_tf32")
            if tf32 != "matmul off, convolution off":
                c.fail(f"precision: context cuda_tf32 is {tf32!r}, not "
                       "'matmul off, convolution off'")
            else:
                c.notes.append(f"cuda_tf32: {tf32}")
        drift = [(short(e["name"]), e["rel_err"]) for e in iterations(doc or {})
                 if "rel_err" in e and not error_of(e)]
        if drift:
            worst = max(drift, key=lambda x: x[1])
            c.notes.append(f"largest rel_err: {fmt(worst[1])} ({worst[0]})")

    def tf32_and_graphs(self):
        for flag, title, name in (("tf32", "TF32 (--tf32=true)", "tf32"),
                                  ("cuda_graphs", "CUDA graphs (--cuda_graphs=true)", "cuda_graphs")):
            c = self.check(title)
            if not self.has_flag(flag):
                c.skip(f"not offered by this bench: no --{flag} in bench --help", MISSING)
                continue
            if not self.gpu:
                c.skip("needs a CUDA GPU")
                continue
            self.section(title)
            args = [f"--devices={','.join(self.gpus)}", f"--{flag}=false,true", *self.fast]
            if flag == "cuda_graphs":
                # Generation's decode steps, graphed and not, in bf16: each
                # reports token_match_% against an eager fp32 reference, so
                # the graphed tokens are checked, not only timed.
                args += ["--new_tokens=32", "--dtype=bf16"]
            if self.quick:
                args.append("--benchmark_filter="
                            + (QUICK_GRAPHS if flag == "cuda_graphs" else QUICK_TF32).format(
                                d=self.dev_re))
            doc = self.bench_run(c, name, args)
            if self.quick:
                self.expect_names(c, name, doc, [f"^{p}/" for p in (
                    ("Transformer/small", "GPT2/small", "Llama/1B") if flag == "cuda_graphs"
                    else ("Transformer/small", "ResNet/resnet18", "Ops/matmul"))])
            else:
                self.expect_names(c, name, doc, [f"^{f}/{z}/" for f, z in self.sizes.items()])
            if flag == "cuda_graphs":
                self.graphed_tokens(c, doc)
            suffix = "/fp32/tf32" if flag == "tf32" else "/graph"
            self.expect_names(c, name, doc, [re.escape(suffix) + "$"])
            # Each axis beside its plain twin: the speed-up it gives.
            ran = {short(e["name"]): e for e in iterations(doc or {}) if not error_of(e)}
            for n, e in sorted(ran.items()):
                if not n.endswith(suffix):
                    continue
                twin = ran.get(n[: -len("/tf32")] if flag == "tf32" else n[: -len("/graph")])
                key = "tpot_ms" if "tpot_ms" in e else "real_time"
                if twin and key in twin and e.get(key):
                    c.notes.append(f"{n}: {key} {fmt(e[key])} against {fmt(twin[key])}"
                                   f" ({fmt(twin[key] / e[key])}x)"
                                   + (f", mfu {fmt(e['mfu'])}" if "mfu" in e else "")
                                   + (f", mbu {fmt(e['mbu'])}" if "mbu" in e else ""))
            # Sub-millisecond GPU steps are timed several to a sample, and
            # the board's energy counter is read around the measured steps.
            launches = [e for e in ran.values() if e.get("launches_per_sample", 1) > 1]
            c.notes.append(f"{len(launches)} benchmarks timed several steps a sample")
            energy = [e for e in ran.values() if "energy_J" in e]
            c.notes.append(f"{len(energy)} of {len(ran)} benchmarks with energy_J"
                           + (f" (e.g. {short(energy[0]['name'])}: {fmt(energy[0]['energy_J'])} J)"
                              if energy else ""))

    def graphed_tokens(self, c, doc):
        """Graphed generation makes the tokens eager generation makes: each
        graphed bf16 generate has token_match_% (against the eager fp32
        reference), within GRAPH_TOKEN_SLACK points of its eager twin's (the
        decode kernels of a graph may round otherwise; a graph that replays
        stale inputs matches far fewer)."""
        ran = {short(e["name"]): e for e in iterations(doc or {}) if not error_of(e)}
        graphed = [n for n in ran if "/generate/" in n and n.endswith("/graph")]
        if doc is not None and not graphed:
            c.fail("cuda_graphs: no graphed generation ran")
        for n in graphed:
            e, twin = ran[n], ran.get(n[: -len("/graph")])
            if "token_match_%" not in e:
                c.fail(f"cuda_graphs: {n} has no token_match_% (no eager fp32 reference)")
                continue
            note = f"{n}: token_match_% {fmt(e['token_match_%'])}"
            if twin and "token_match_%" in twin:
                note += f" (eager {fmt(twin['token_match_%'])})"
                if e["token_match_%"] < twin["token_match_%"] - GRAPH_TOKEN_SLACK:
                    c.fail(f"cuda_graphs: {n} matches fewer fp32 tokens than eager: "
                           f"{fmt(e['token_match_%'])} against {fmt(twin['token_match_%'])}")
            c.notes.append(note)

    def generation(self):
        self.section("generation")
        c = self.check("generation: prefill and decode counters")
        gpt2, llama, whisper = self.sizes["GPT2"], self.sizes["Llama"], self.sizes["Whisper"]
        doc = self.bench_run(c, "generation", [
            f"--devices={','.join(self.step_devices)}", "--steps=3", "--warmup_s=0.1", *self.shape,
            f"--benchmark_filter=^(GPT2/{gpt2}|Llama/{llama}|Whisper/{whisper})/{self.step_re}"
            "/generate/"])
        for e in self.counters(c, "generation", doc, "/generate/", GENERATION_COUNTERS):
            c.notes.append(f"{short(e['name'])}: " + ", ".join(
                f"{k} {fmt(e[k])}" for k in GENERATION_COUNTERS + ("tokens/s",) if k in e))

    def serve(self):
        """GPT2's forward under MLPerf LoadGen: Server at a fixed rate, and
        Offline; a rate the device cannot hold is LoadGen's INVALID, a
        result, not a failure."""
        self.section("serve")
        c = self.check("serve: Server and Offline under MLPerf LoadGen")
        doc = self.bench_run(c, "serve", [
            f"--devices={','.join(self.step_devices)}", "--warmup_s=0.1", *self.shape,
            "--scenario=Server,Offline", *(SERVE_GPU if self.gpu else SERVE_REHEARSAL),
            f"--benchmark_filter=^GPT2/{self.sizes['GPT2']}/{self.step_re}/serve/"])
        for e in self.counters(c, "serve", doc, "/serve/", SERVE_COUNTERS):
            c.notes.append(f"{short(e['name'])}: " + ", ".join(
                f"{k} {fmt(e[k])}" for k in SERVE_COUNTERS[:-1] if k in e)
                + f"; {e.get('label', '')}")

    def train_epoch(self):
        self.section("train_epoch")
        sel = (f"--benchmark_filter=^(EncDec/{self.sizes['EncDec']}|"
               f"Transformer/{self.sizes['Transformer']})/{self.step_re}/train_epoch/")
        # The rehearsal: one epoch, no warm-up (an epoch that also writes the
        # dataset to disk takes seconds on a 2-core CPU).
        epochs = ["--epochs=2", "--warmup_epochs=1"] if self.gpu else ["--epochs=1",
                                                                      "--warmup_epochs=0"]
        common = [f"--devices={','.join(self.step_devices)}", *epochs, sel, *self.shape]
        util = self.check("gpu_util_% during train_epoch")
        if not self.gpu:
            util.skip("needs a CUDA GPU and NVML")
        data = tempfile.mkdtemp(prefix="gpu-check-data-")
        encdec_epoch_s = None
        try:
            for source in ("memory", "disk"):
                c = self.check(f"train_epoch from {source}")
                extra = ["--data=memory"] if source == "memory" else [f"--data_dir={data}"]
                doc = self.bench_run(c, f"train_epoch_{source}", [*common, *extra])
                for e in self.counters(c, f"train_epoch_{source}", doc, "/train_epoch/",
                                       ("epoch_s", "samples/s")):
                    c.notes.append(f"{short(e['name'])}: epoch_s {fmt(e['epoch_s'])}, "
                                   f"samples/s {fmt(e['samples/s'])}")
                    if source == "memory" and "/cuda" in e["name"] and \
                            e["name"].startswith("EncDec/"):
                        encdec_epoch_s = e["epoch_s"]
                if source == "disk" and doc is not None:
                    shards = [f for _, _, fs in os.walk(data) for f in fs if f.startswith("shard_")]
                    if not shards:
                        c.fail(f"--data_dir={data}: no shards were written")
                    else:
                        c.notes.append(f"{len(shards)} shards written and read")
        finally:
            shutil.rmtree(data, ignore_errors=True)
        if self.gpu:
            self.gpu_util(util, encdec_epoch_s)

    def gpu_util(self, util, epoch_s):
        """gpu_util_% averages NVML's utilisation, sampled every 100 ms, and
        needs 10 samples: on a GPU an epoch of the default 128 samples takes
        milliseconds, so the dataset is sized from the epoch just measured
        until each of the two measured epochs takes about a second."""
        if not epoch_s or epoch_s <= 0:
            util.fail("gpu_util: no EncDec epoch_s on the GPU to size the dataset from")
            return
        samples = min(DEFAULT_DATASET_SAMPLES * math.ceil(1.2 / epoch_s), MAX_UTIL_SAMPLES)
        doc = self.bench_run(util, "train_epoch_util", [
            f"--devices={self.gpus[0]}", "--epochs=2", "--warmup_epochs=1", "--data=memory",
            f"--dataset_samples={samples}",
            f"--benchmark_filter=^EncDec/{self.sizes['EncDec']}/{re.escape(self.gpus[0])}/"
            "train_epoch/"])
        for e in self.counters(util, "train_epoch_util", doc, "/train_epoch/",
                               ("epoch_s", "gpu_util_%")):
            util.notes.append(f"{short(e['name'])} over {samples} samples: epoch_s "
                              f"{fmt(e['epoch_s'])}, gpu_util_% {fmt(e['gpu_util_%'])}")

    def profile(self):
        self.section("profile")
        c = self.check("--profile")
        busy = self.check("gpu_busy_% from --profile")
        directory = os.path.join(self.data, "profile")
        shutil.rmtree(directory, ignore_errors=True)
        t, cnn = self.sizes["Transformer"], self.sizes["CNN"]
        doc = self.bench_run(c, "profile", [
            f"--devices={','.join(self.step_devices)}", *self.fast, *self.shape, f"--profile={directory}",
            "--profile_steps=3",
            f"--benchmark_filter=^(Transformer/{t}/{self.step_re}/forward/|CNN/{cnn}/{self.step_re}/train_step/)"])
        files = os.listdir(directory) if os.path.isdir(directory) else []
        ops = [f for f in files if f.endswith(".ops.txt")]
        traces = [f for f in files if f.endswith(".trace.json")]
        if doc is not None and not ops:
            c.fail(f"no operator table (*.ops.txt) in {directory}")
        c.notes.append(f"{len(ops)} operator tables, {len(traces)} traces in profile/")
        if not self.gpu:
            busy.skip("needs a CUDA GPU (the profiler's kernel events)")
            return
        for e in self.counters(busy, "profile", doc, "/cuda", ("gpu_busy_%",)):
            busy.notes.append(f"{short(e['name'])}: gpu_busy_% {fmt(e['gpu_busy_%'])}")

    def transfers(self):
        c = self.check("transfer ops: pinned and pageable, both directions")
        if not self.gpu:
            c.skip("needs a CUDA GPU (the transfer ops are CUDA only)")
            return
        self.section("transfers")
        doc = self.bench_run(c, "transfers", [
            f"--devices={','.join(self.gpus)}", *self.fast,
            f"--benchmark_filter=^Ops/({'|'.join(TRANSFERS)})/"])
        self.expect_names(c, "transfers", doc, [f"^Ops/{op}/" for op in TRANSFERS])
        for e in self.counters(c, "transfers", doc, "^Ops/", ("bytes/s",)):
            c.notes.append(f"{short(e['name'])}: {e['bytes/s'] / 1e9:.1f} GB/s")

    def sync(self):
        self.section("sync")
        c = self.check("--sync=false against --sync=true")
        t = self.sizes["Transformer"]
        sel = f"--benchmark_filter=^Transformer/{t}/{self.step_re}/forward/"
        times = {}
        for sync in ("true", "false"):
            doc = self.bench_run(c, f"sync_{sync}", [f"--devices={','.join(self.step_devices)}",
                                                     "--steps=10", "--warmup_s=0.1", sel, *self.shape,
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

    def memory_guard(self):
        self.section("memory guard")
        c = self.check("memory guard refuses a model that cannot fit")
        device = self.gpus[0] if self.gpu else self.devices[0]
        doc = self.bench_run(c, "memory_guard", [
            f"--devices={device}", "--batch=64", "--seq=2048", "--steps=1", "--warmup_s=0",
            f"--benchmark_filter=^Transformer/2.7B/{re.escape(device)}/train_step/"],
            expected=[r"does not fit"])
        for e in iterations(doc or {}):
            err = error_of(e)
            if not err:
                c.fail(f"memory_guard: {short(e['name'])} ran instead of being refused")
            elif re.search("does not fit", err):
                c.notes.append(f"{short(e['name'])}: {err}")

    def oom(self):
        self.section("out of memory")
        c = self.check("host out-of-memory error caught, the run goes on")
        g = self.check("CUDA out-of-memory error caught, the run goes on")
        # Under an address-space limit of what bench maps plus 3 GiB,
        # Transformer/medium's training step (6.8 GB of weights, gradients
        # and AdamW state) runs out of host memory while it is built, though
        # the machine's free memory passed the memory guard; GPT2/nano then
        # runs. No GPU is touched, one thread computes, and glibc keeps two
        # malloc arenas (each thread's own arena reserves 64 MB of addresses).
        medium = "Transformer/medium/cpu/train_step/"
        limit = mapped_bytes(self.bench) + OOM_HEADROOM
        c.notes.append(f"address-space limit {limit / 2**30:.1f} GiB "
                       f"({mapped_bytes(self.bench) / 2**30:.1f} GiB of files mapped)")
        doc = self.bench_run(c, "oom_host", [
            "--devices=cpu", "--batch=1", "--seq=32", "--steps=2", "--warmup_s=0",
            *(REHEARSAL_THREADS if self.gpu else []),  # (the rehearsal's runs have it)
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
        if not self.gpu:
            g.skip("needs a CUDA GPU")
            return
        # With the memory guard off, Transformer/2.7B's training step at batch
        # 64 x 1024 (about 620 GiB by the estimate) runs into CUDA's own
        # out-of-memory error; GPT2/nano, registered after it, then runs on
        # the same GPU (at most 1024 positions: seq 2048 it refuses).
        gpu = re.escape(self.gpus[0])
        doc = self.bench_run(g, "oom_cuda", [
            f"--devices={self.gpus[0]}", "--memory_guard=false", "--batch=64", "--seq=1024",
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

    def data_parallel(self):
        """A one-rank group forced through the data-parallel path (the
        collectives, the Reducer, the data-parallel counters): NCCL on the GPU,
        Gloo on the CPU; and two ranks where there are two GPUs."""
        self.section("data-parallel")
        size = self.sizes["EncDec"]
        if self.gpu:
            c = self.check("one-rank NCCL data-parallel run through tools/launch")
            device, collectives = "cuda", "nccl"
        else:
            c = self.check("one-rank data-parallel run through tools/launch (Gloo on the CPU)")
            n = self.check("one-rank NCCL data-parallel run through tools/launch")
            n.skip("needs a CUDA GPU; the launch path was rehearsed with Gloo on the CPU")
            device, collectives = "cpu", "gloo"
        self.launched(c, 1, device, collectives, size)
        two_gpus = self.gpu and len(self.visible_gpus()) >= 2
        if self.gpu:
            two = self.check("two-rank NCCL data-parallel run through tools/launch")
            if not two_gpus:
                two.skip("needs two GPUs")
            else:
                self.launched(two, 2, device, collectives, size)
        f = self.check("a failing rank stops the others, which write what they measured")
        self.failing_rank(f, "cpu")
        if two_gpus:
            self.failing_rank(f, device)

    def failing_rank(self, c, device):
        """Selftest/rank1_fails: rank 1 fails at its fifth step while rank 0
        waits for it in a collective. Rank 1 aborts its group, so rank 0's
        wait ends at once rather than after --dist_timeout_s; the launcher
        names the rank that failed first and rank 0 writes its results."""
        path = os.path.join(self.data, f"failing_rank_{device}.json")
        if os.path.exists(path):
            os.remove(path)
        start = time.monotonic()
        rc, out = self.command([os.path.join(TOOLS, "launch"), "--nproc_per_node=2",
                                self.bench, f"--devices={device}", "--threads=1",
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

    def visible_gpus(self):
        rc, out = self.command(["nvidia-smi", "-L"]) if shutil.which("nvidia-smi") else (1, "")
        return [line for line in out.splitlines() if line.startswith("GPU ")] if rc == 0 else []

    def launched(self, c, ranks, device, collectives, size):
        forced = ["--force_process_group=true"] if self.has_flag("force_process_group") else []
        if not forced and ranks == 1:
            c.fail(f"bench has no --force_process_group: a one-rank run creates no process "
                   f"group, so {collectives} is not exercised")
        path = os.path.join(self.data, f"data_parallel_{ranks}.json")
        if os.path.exists(path):
            os.remove(path)
        rc, _ = self.command([os.path.join(TOOLS, "launch"), f"--nproc_per_node={ranks}",
                              self.bench, f"--devices={device}", "--steps=5", "--warmup_s=0.1",
                              *forced, *self.shape,
                              *([] if self.gpu else REHEARSAL_PEAKS + REHEARSAL_THREADS),
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

    def runs_ctest(self):
        return self.args.ctest if self.quick else not self.args.no_ctest

    def ctest(self):
        c = self.check("ctest")
        if not self.runs_ctest():
            c.skip("--quick (--ctest runs it)" if self.quick else "--no-ctest")
            return
        build = os.path.abspath(self.args.build)
        if not os.path.exists(os.path.join(build, "CTestTestfile.cmake")):
            c.skip(f"no build directory with tests at {build}")
            return
        if shutil.which("ctest") is None:
            c.fail("ctest is not installed")
            return
        self.section("ctest")
        # The tools' tests include this command's rehearsal: not again inside it.
        jobs = f"-j{min(os.cpu_count() or 1, 8)}"
        rc, out = self.command(["ctest", "--output-on-failure", jobs,
                                *shlex.split(self.args.ctest_args)],
                               cwd=build, timeout=CTEST_TIMEOUT,
                               env={"LTB_IN_GPU_CHECK": "1"})
        summary = [line for line in out.splitlines() if "tests passed" in line]
        c.notes += summary
        if rc != 0:
            failed = [line.strip() for line in out.splitlines()
                      if re.search(r"\(Failed\)|\(Timeout\)|\*\*\*", line)]
            c.fail("ctest exited with status " + str(rc)
                   + (": " + "; ".join(failed[:10]) if failed else ""))

    # --- the summary -------------------------------------------------------

    def write_summary(self, final):
        failed = [c for c in self.checks if c.status in (FAILED, OUT_OF_TIME)]
        mode = ("on " + ",".join(self.gpus)) if self.gpu else \
            f"rehearsal on {','.join(self.devices)} (nano sizes; what needs a GPU is skipped)"
        if self.interrupted:
            result = f"INTERRUPTED by {self.interrupted} during '{self.interrupted_step}'"
        elif not final:
            result = "running" + (f": now '{self.current}'" if self.current else "")
        else:
            result = f"FAILED ({len(failed)} checks)" if failed else "passed"
        lines = [f"# gpu-check {mode}{' --quick' if self.quick else ''}", "",
                 f"bench: `{self.bench}`  ", f"wall time: {self.elapsed:.0f} s  "]
        if self.budget is not None:
            lines.append(f"budget: {self.budget:.0f} s  ")
        if self.pack:
            lines.append(f"results: `{ARCHIVE}` (every JSON and the profiler's files)  ")
        lines += [f"result: {result}", "", "| check | status | seconds |", "|---|---|---|"]
        for c in self.checks:
            seconds = "" if c.seconds is None else f"{c.seconds:.0f}"
            lines.append(f"| {c.title} | {c.status} | {seconds} |")
        for c in self.checks:
            lines += ["", f"## {c.title}: {c.status}", ""]
            lines += [f"- FAILED: {f}" for f in c.failures]
            lines += [f"- {n}" for n in c.notes]
        path = os.path.join(self.out, "summary.md")
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(path + ".tmp", path)
        if not final:
            return
        self.say("")
        self.say("=== summary ===")
        width = max(len(c.title) for c in self.checks)
        for c in self.checks:
            why = "" if c.status in (RAN, FAILED) else f"  ({'; '.join(c.notes)})"
            self.say(f"{c.title:<{width}}  {c.status}{why}")
        if failed:
            self.say("")
            self.say(f"gpu-check: FAILED ({len(failed)} checks):")
            for c in failed:
                for what in c.failures or c.notes:
                    self.say(f"  {c.title}: {what}")
        if self.interrupted:
            self.say(f"gpu-check: {result}")
        self.say(f"gpu-check: {self.elapsed:.0f} s; summary in {path}"
                 + (f", results in {os.path.join(self.out, ARCHIVE)}" if self.pack else ""))


def main():
    parser = argparse.ArgumentParser(
        prog="gpu-check", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    parser.add_argument("outdir", help="where the JSON results, console.log and summary.md go")
    parser.add_argument("--devices", default="cuda",
                        help="devices to check (default cuda, the first GPU); cpu is the rehearsal")
    build = os.environ.get("LTB_BUILD_DIR") or os.path.join(REPO, "build")
    parser.add_argument("--build", default=build, help=f"build directory for ctest (default {build})")
    parser.add_argument("--bench", default=None, help="the bench binary (default BUILD/bench/bench)")
    parser.add_argument("--quick", action="store_true",
                        help="the checks sized for a short GPU lease (implies --pack; no ctest)")
    parser.add_argument("--pack", action="store_true",
                        help="OUTDIR holds summary.md, console.log and results.tar.gz alone")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole check: a step that would start past it "
                             "is skipped as out of time")
    ctest = parser.add_mutually_exclusive_group()
    ctest.add_argument("--no-ctest", action="store_true", help="do not run ctest")
    ctest.add_argument("--ctest", action="store_true", help="with --quick: run ctest too")
    parser.add_argument("--timeout", type=float, default=COMMAND_TIMEOUT,
                        help=f"seconds before one bench run is stopped as failed "
                             f"(default {COMMAND_TIMEOUT}; ctest: {CTEST_TIMEOUT})")
    parser.add_argument("--ctest-args", default="",
                        help="more arguments for ctest, one string (e.g. '-E bench_e2e_older_cpu')")
    args = parser.parse_args()
    if args.bench is None:
        args.bench = os.path.join(args.build, "bench", "bench")
    devices = [d for d in args.devices.split(",") if d]
    bad = [d for d in devices if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", d)]
    if not devices or bad:
        parser.error(f"--devices: {','.join(bad) or 'empty'}: valid: cpu, cuda, cuda:N, mps")
    if args.budget is not None and not args.budget > 0:
        parser.error(f"--budget: {args.budget:g}: give a number of seconds above 0")
    if args.ctest and not args.quick:
        parser.error("--ctest goes with --quick (without it, ctest runs unless --no-ctest)")
    if not os.access(args.bench, os.X_OK):
        parser.error(f"--bench: {args.bench} is not an executable file (build it, or name it)")
    sys.exit(GpuCheck(args).run_all())

