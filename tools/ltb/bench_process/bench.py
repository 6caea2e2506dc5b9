"""Running bench: one benchmark in its own bench process (sweep, abtest,
bisect), what its exit status means, and stopping it on a signal."""

import json
import re
import os
import signal
import subprocess
import time

from ltb.base import REPO, BadInput


REGEX_SPECIAL = set(".[]{}()*+?^$|\\")


# bench's report of the devices it found, printed first by every process.
DEVICE_LINE = re.compile(r"^(cpu|cuda|mps)(:\d+)?: ")


class Interrupted(Exception):
    """SIGTERM, once raise_on_sigterm() is in place: handled like Ctrl-C."""


def raise_on_sigterm():
    def handler(signum, frame):
        raise Interrupted()
    signal.signal(signal.SIGTERM, handler)


def default_bench():
    """build/bench/bench, in $LTB_BUILD_DIR when set."""
    build = os.environ.get("LTB_BUILD_DIR") or os.path.join(REPO, "build")
    return os.path.join(build, "bench", "bench")


def check_bench(path, option):
    if not os.access(path, os.X_OK):
        raise BadInput(f"{path}: no bench binary there (build it with tools/setup, or give "
                       f"{option})")


def split_bench_args(parser, argv, own_flags):
    """parser's options and the rest of argv, which goes to bench; own_flags
    maps the bench flags the tool sets itself to what to use instead."""
    args, bench_args = parser.parse_known_args(argv)
    if bench_args[:1] == ["--"]:
        bench_args = bench_args[1:]
    for arg in bench_args:
        flag = arg.split("=", 1)[0]
        if flag in own_flags:
            parser.error(f"{flag} is the {parser.prog}'s own: {own_flags[flag]}")
    return args, bench_args


def gives_filter(bench_args):
    """Whether the bench arguments give a --benchmark_filter: bench takes the
    last, and without one (or with an empty one) runs its default suite."""
    filters = [a.split("=", 1)[1] for a in bench_args if a.startswith("--benchmark_filter=")]
    return bool(filters and filters[-1])


def exact_filter(name):
    """A --benchmark_filter that selects exactly this benchmark."""
    return "^" + "".join("\\" + c if c in REGEX_SPECIAL else c for c in name) + "$"


def bench_stdout(bench, bench_args, flag):
    """What `bench ARGS FLAG` (a listing: --benchmark_list_tests,
    --list_families) prints; bad input where it cannot run or refuses."""
    cmd = [bench, *bench_args, flag]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except OSError as e:
        raise BadInput(f"cannot run {bench}: {e.strerror}")
    if proc.returncode != 0:
        raise BadInput(f"bench refused the arguments (exit {proc.returncode}): "
                       + last_lines(proc.stderr, 3))
    return proc.stdout


def list_benchmarks(bench, bench_args):
    """The names the bench arguments select (`bench ARGS --benchmark_list_tests`)."""
    stdout = bench_stdout(bench, bench_args, "--benchmark_list_tests")
    names = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not names:
        raise BadInput("the bench arguments select no benchmark")
    return names


def last_lines(text, n):
    """The last n lines bench wrote to stderr, without its device report."""
    lines = [line for line in (text or "").splitlines()
             if line.strip() and not DEVICE_LINE.match(line)]
    return " / ".join(lines[-n:])


def describe_exit(code):
    if code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = f"signal {-code}"
        hint = " (out of memory?)" if signame == "SIGKILL" else ""
        return f"bench was killed by {signame}{hint}"
    return f"bench exited with code {code}"


def run_process(cmd, timeout):
    """Runs a bench command in its own session, killed with its children
    after timeout seconds: (why it failed or None, stdout, stderr, seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        error = None if proc.returncode == 0 else describe_exit(proc.returncode)
    except subprocess.TimeoutExpired:
        kill(proc)
        out, err = proc.communicate()
        error = f"timed out after {timeout:g} s"
    except BaseException:
        kill(proc)
        proc.wait()
        raise
    return error, out, err, round(time.monotonic() - start, 3)


def failed_record(name, seconds, error, err):
    """The record of a benchmark that did not report: why, with bench's last
    words on stderr."""
    tail = last_lines(err, 1)
    return {"name": name, "seconds": seconds, "status": "failed",
            "error": error + (f": {tail}" if tail else ""), "stderr": last_lines(err, 20)}


def run_benchmark(bench, bench_args, name, timeout):
    """Runs one benchmark in its own bench process: bench_args without their
    filter, and a filter naming only it. Returns a record: name, seconds, and
    either status 'ok', the run's context and its benchmarks, or status
    'failed', error (why, with bench's last words) and stderr."""
    cmd = [bench, *[a for a in bench_args if not a.startswith("--benchmark_filter=")],
           f"--benchmark_filter={exact_filter(name)}", "--benchmark_format=json"]
    error, out, err, seconds = run_process(cmd, timeout)
    record = {"name": name, "seconds": seconds}
    if error is None:
        try:
            doc = json.loads(out)
            record.update(status="ok", context=doc.get("context", {}),
                          benchmarks=doc["benchmarks"])
            if not record["benchmarks"]:
                error = "bench ran no benchmark"
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError):
            error = "bench printed no valid JSON"
    if error is not None:
        record.update(failed_record(name, seconds, error, err))
    return record


def kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
