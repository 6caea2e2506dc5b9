"""What every tool shares, below every other room: bad input and the exit
codes, running a tool's main, the project's venv (tools start themselves
again in it when this Python lacks a package), and writing files whole.

Every tool exits 0 on success, 1 on a negative verdict (a regression) and 2
on bad input (an unreadable file, not a benchmark JSON, nothing to compare),
with a message on stderr. Standard library only: tools/gpu-check runs where
the tools' packages may be missing.
"""

import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import sys


EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each family's small size: the default suite's, which a GPU visit checks
# every phase of (tools/gpu-check) and its results page tabulates.
SMALL_SIZES = {"Transformer": "small", "GPT2": "small", "Llama": "1B", "ResNet": "resnet18",
               "CNN": "default", "Encoder": "default", "Whisper": "tiny", "EncDec": "tiny"}


class BadInput(Exception):
    """Input a tool cannot use; tools exit 2 with its message."""


def venv_dir():
    """The project's virtual environment, where tools/setup puts it."""
    if os.environ.get("LTB_VENV"):
        return os.environ["LTB_VENV"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "libtorch-bench", "venv")


def require(*modules):
    """Makes sure the modules a tool imports are there: when this Python
    lacks one, the tool is started again with the project's venv Python
    (which tools/setup makes); when that fails too, exit 2 saying so."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    python = os.path.join(venv_dir(), "bin", "python")
    here = os.path.realpath(sys.prefix) == os.path.realpath(venv_dir())
    if os.path.exists(python) and not here and not os.environ.get("LTB_REEXEC"):
        os.environ["LTB_REEXEC"] = "1"
        os.execv(python, [python, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
    fail(f"needs the Python packages {', '.join(missing)}: run tools/setup, which "
         f"installs tools/requirements.txt into {venv_dir()}")


def fail(message):
    print(f"{os.path.basename(sys.argv[0])}: {message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def run(main):
    """Runs a tool's main(), turning BadInput into exit 2 with its message,
    and a Ctrl-C that main() does not handle itself (one that comes before
    anything is measured) into exit 130 with one line, not a traceback."""
    try:
        code = main()
    except BadInput as e:
        fail(str(e))
    except KeyboardInterrupt:
        print(f"{os.path.basename(sys.argv[0])}: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader (head, less) stopped reading
        silence_stdout()
        code = EXIT_OK
    else:
        # What main() returned stands (a gate's regression is exit 1) though
        # the reader stopped reading before the rest of its text was flushed.
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            silence_stdout()
    sys.exit(code or EXIT_OK)


@contextlib.contextmanager
def reader_may_stop():
    """Output written and flushed inside it may find its reader gone (head,
    a closed pipe): the rest of the text is lost, and the caller's verdict,
    computed before, stands."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


def silence_stdout():
    """After a reader closed standard output (head, a closed pipe): what is
    still printed, and the flush at exit, go nowhere instead of failing."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def write_json(path, doc):
    """Writes a result file whole or not at all."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def read_bytes(path, aftermath=""):
    """A file's bytes, or BadInput in one sentence naming it and why it could
    not be read (then `aftermath`, e.g. "; nothing was added")."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}{aftermath}")


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Signalled(Exception):
    """SIGINT or SIGTERM arrived (raise_on_signals): the command stops what
    it runs and writes what it has."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_ARRIVED = []  # the signals raise_on_signals' handler has raised


def raise_on_signals():
    """SIGINT and SIGTERM raise Signalled from here on; returns the handlers
    they had. A handler runs in whatever Python code the main thread runs,
    a finaliser included, where Python reports the exception as unraisable
    and goes on: such a signal stays arrived, without the report, and
    raise_if_signalled raises it where the command next looks."""
    def handler(signum, _frame):
        _ARRIVED.append(signum)
        raise Signalled(signum)
    _ARRIVED.clear()
    if not getattr(sys.unraisablehook, "keeps_signals", False):
        others = sys.unraisablehook

        def unraisable(report):
            if not isinstance(report.exc_value, Signalled):
                others(report)
        unraisable.keeps_signals = True
        sys.unraisablehook = unraisable
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def raise_if_signalled():
    """Raises Signalled for a signal that arrived under raise_on_signals,
    whether or not its raise reached the command."""
    if _ARRIVED:
        raise Signalled(_ARRIVED[0])
