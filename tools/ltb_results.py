"""What every tool shares: loading bench's Google Benchmark JSON, parsing the
suite's names, per-benchmark medians and counters, formatting, cost, the
device speedup summary, the gate's options, running one benchmark in its own
bench process (sweep, abtest), and the exit codes.

Names are Family/size/device/phase/settings.../dtype (Ops/op/shape/device/
dtype), optionally ending in /nosync, with Google Benchmark's own suffixes
(/manual_time, /repeats:N, aggregates such as _median) after them.

Every tool exits 0 on success, 1 on a negative verdict (a regression) and 2
on bad input (an unreadable file, not a benchmark JSON, nothing to compare),
with a message on stderr.
"""
import argparse
import collections
import hashlib
import importlib.util
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time

THROUGHPUT_COUNTERS = ("tokens/s", "samples/s", "FLOP/s", "bytes/s")
# Counters compare.py ignores that the gate checks, and which way is better.
BIGGER_IS_BETTER = ("tokens/s", "samples/s", "pp_tok/s", "tg_tok/s")
SMALLER_IS_BETTER = ("peak_mem", "ttft_ms", "tpot_ms")
# Columns of report, in order, when any result has them.
REPORT_COUNTERS = THROUGHPUT_COUNTERS + ("ttft_ms", "tpot_ms")
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
SIZE_ORDER = ("nano", "tiny", "small", "base", "medium", "large", "xl")
_TIME_SUFFIX = re.compile(r"/(manual_time|real_time|repeats:\d+|threads:\d+|iterations:\d+)")

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BadInput(Exception):
    """Input a tool cannot use; tools exit 2 with its message."""


# --- running ---------------------------------------------------------------

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
    """Runs a tool's main(), turning BadInput into exit 2 with its message."""
    try:
        code = main()
        sys.stdout.flush()
    except BadInput as e:
        fail(str(e))
    except BrokenPipeError:  # the reader (head, less) stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    sys.exit(code or EXIT_OK)


# --- loading ---------------------------------------------------------------

def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not JSON: {e}")
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f"{path}: not a Google Benchmark JSON (no 'benchmarks' list)")
    for entry in doc["benchmarks"]:
        if not isinstance(entry, dict) or "name" not in entry:
            raise BadInput(f"{path}: not a Google Benchmark JSON (an entry without a name)")
    doc.setdefault("context", {})
    return doc


def load_all(paths):
    return [load(path) for path in paths]


def file_labels(paths):
    """Short names of result files for tables and legends: the file name
    without .json, or the whole path where two files share a name."""
    stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    return [stem if stems.count(stem) == 1 else path for stem, path in zip(stems, paths)]


# --- names -----------------------------------------------------------------

def base_name(entry):
    """The suite's own name of an entry, without Google Benchmark's suffixes."""
    name = entry.get("run_name") or entry["name"]
    return _TIME_SUFFIX.sub("", name)


_DEVICE = re.compile(r"(cpu|cuda(:\d+)?|mps)")


def device_field(parts):
    """Where the device stands: third (Family/size/device/...), or fourth in
    families that name the phase first (Ops/op/shape/device/...)."""
    def is_device(i):
        return len(parts) > i and _DEVICE.fullmatch(parts[i]) is not None
    return 3 if not is_device(2) and is_device(3) else 2


def split_device(name):
    """('GPT2/small/generate/...', 'cuda') from 'GPT2/small/cuda/generate/...'."""
    parts = name.split("/")
    i = device_field(parts)
    if len(parts) <= i:
        return name, ""
    device = parts.pop(i)
    return "/".join(parts), device


def parse_name(name):
    """The fields of a suite name: family, size, device, phase, settings
    (batch, seq, prompt, new ... as numbers where they are), dtype, nosync.
    For Ops the operation stands as size and its shape as phase."""
    parts = name.split("/")
    fields = {"family": parts[0], "size": "", "device": "", "phase": "",
              "settings": {}, "dtype": "", "nosync": False}
    keys = ("size", "phase", "device") if device_field(parts) == 3 else ("size", "device", "phase")
    for key, value in zip(keys, parts[1:4]):
        fields[key] = value
    for part in parts[4:]:
        if part == "nosync":
            fields["nosync"] = True
        elif ":" in part:
            key, value = part.split(":", 1)
            fields["settings"][key] = int(value) if value.isdigit() else value
        elif not fields["dtype"]:
            fields["dtype"] = part
    return fields


def name_without(name, field):
    """The name with one field (size, device, or a setting such as seq)
    replaced by '*': the key of a series that varies in that field."""
    parts = name.split("/")
    if field in ("size", "device"):
        i = 1 if field == "size" else device_field(parts)
        if len(parts) > i:
            parts[i] = "*"
    else:
        parts = [f"{field}:*" if p.startswith(field + ":") else p for p in parts]
    return "/".join(parts)


def size_rank(size):
    """Sort key of model sizes: nano < tiny < small < ... < xl < 2.7B."""
    if size in SIZE_ORDER:
        return (0, SIZE_ORDER.index(size), size)
    match = re.fullmatch(r"([\d.]+)([KMB])", size)
    if match:
        return (1, float(match[1]) * {"K": 1e3, "M": 1e6, "B": 1e9}[match[2]], size)
    return (2, 0, size)


# --- entries and their medians ----------------------------------------------

def iterations(doc):
    """Entries that are measurements (not aggregates) and did not fail."""
    return [b for b in doc["benchmarks"]
            if b.get("run_type", "iteration") == "iteration" and not b.get("error_occurred")]


def seconds(entry):
    """An entry's (manual, real) time per iteration in seconds."""
    unit = entry.get("time_unit", "ns")
    if unit not in TIME_UNITS:
        raise BadInput(f"{entry['name']}: unknown time unit {unit!r}")
    return float(entry["real_time"]) * TIME_UNITS[unit]


def throughput_counter(entry):
    for name in THROUGHPUT_COUNTERS:
        if name in entry:
            return name
    return None


class Benchmark:
    """One benchmark's measured repetitions in one result file."""

    def __init__(self, name):
        self.name = name
        self.fields = parse_name(name)
        self.entries = []

    @property
    def repetitions(self):
        return len(self.entries)

    @property
    def times(self):
        return [seconds(e) for e in self.entries]

    def values(self, counter):
        return [float(e[counter]) for e in self.entries
                if isinstance(e.get(counter), (int, float)) and math.isfinite(e[counter])]

    def has(self, counter):
        return bool(self.values(counter))

    @property
    def median_time(self):
        return statistics.median(self.times)

    def median(self, counter):
        values = self.values(counter)
        return statistics.median(values) if values else None

    @property
    def world_size(self):
        """Ranks of this benchmark's run where its entries say (a file of
        several world sizes, from tools/scaling), else 1."""
        return int(self.entries[0].get("world_size", 1)) if self.entries else 1

    def rate(self):
        """(tokens/s or samples/s median, 'tokens' or 'samples'), or (None, None)."""
        for counter in ("tokens/s", "samples/s"):
            if self.has(counter):
                return self.median(counter), counter.split("/")[0]
        return None, None


def collect(doc):
    """Benchmark name -> Benchmark, in file order, from measured entries."""
    found = collections.OrderedDict()
    for entry in iterations(doc):
        name = base_name(entry)
        found.setdefault(name, Benchmark(name)).entries.append(entry)
    return found


def errors(doc):
    """Benchmark name -> error message of every errored entry, in file order."""
    found = collections.OrderedDict()
    for entry in doc["benchmarks"]:
        if entry.get("error_occurred"):
            found.setdefault(base_name(entry), entry.get("error_message") or "error")
    return found


def all_names(doc):
    """Every benchmark the file mentions, measured or errored."""
    return list(collections.OrderedDict.fromkeys(base_name(e) for e in doc["benchmarks"]))


# --- formatting ------------------------------------------------------------

def human(v):
    units = ["", "k", "M", "G", "T", "P"]
    i = 0
    while abs(v) >= 1000 and i < len(units) - 1:
        v /= 1000
        i += 1
    return f"{v:.4g}{units[i]}"


def format_seconds(s):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.4g} {unit}"
    return f"{s / 1e-9:.4g} ns"


def format_bytes(b):
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    i = 0
    while abs(b) >= 1024 and i < len(units) - 1:
        b /= 1024
        i += 1
    return f"{b:.4g} {units[i]}"


def format_value(counter, v):
    """A counter's value with its unit, for tables."""
    if v is None:
        return "—"
    if counter == "time":
        return format_seconds(v)
    if counter == "peak_mem":
        return format_bytes(v)
    if counter.endswith("_ms"):
        return f"{v:.4g} ms"
    if counter.endswith("_%"):
        return f"{v:.3g}%"
    return f"{human(v)} {counter}" if counter.endswith("/s") else human(v)


def format_change(change):
    if change is None:
        return "—"
    if math.isinf(change):
        return "+inf%" if change > 0 else "-inf%"
    return f"{change * 100:+.1f}%"


def relative_change(old, new):
    """new / old - 1, with 0 -> 0 as no change and 0 -> x as infinite growth."""
    if old == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return new / old - 1


def series_label(label, key, several_files):
    """A chart series' name: the key, prefixed by its file's label when the
    chart draws several files."""
    return f"{label}: {key}" if several_files else key


def markdown_table(headers, rows):
    def cell(v):
        return str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# --- cost ------------------------------------------------------------------

def add_cost_arguments(parser):
    parser.add_argument("--cost", nargs="+", type=float, metavar="PRICE",
                        help="price per device-hour of each file's machine, in file order")
    parser.add_argument("--device-count", nargs="+", type=int, metavar="N",
                        help="devices each file's run used (default: the context's "
                             "world_size, else 1)")


def device_count(doc):
    """Devices a run used, from its context (world_size of data-parallel
    runs), else 1."""
    value = doc.get("context", {}).get("world_size", 1)
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def hourly_prices(args, docs):
    """Each file's price per hour of the devices its run used, or None
    without --cost. BadInput when the counts do not match the files. In a
    file of several world sizes each benchmark's own ranks multiply it
    (Benchmark.world_size)."""
    if args.cost is None:
        if args.device_count is not None:
            raise BadInput("--device-count needs --cost")
        return None
    if len(args.cost) != len(docs):
        raise BadInput(f"--cost gives {len(args.cost)} prices for {len(docs)} files")
    if args.device_count is not None and len(args.device_count) != len(docs):
        raise BadInput(f"--device-count gives {len(args.device_count)} counts for "
                       f"{len(docs)} files")
    if any(p < 0 for p in args.cost) or any(n < 1 for n in args.device_count or []):
        raise BadInput("prices must be >= 0 and device counts >= 1")
    if args.device_count is not None and any("world_sizes" in d["context"] for d in docs):
        raise BadInput("--device-count does not apply to a file of several world sizes "
                       "(from tools/scaling): each benchmark's entries give its ranks")
    counts = args.device_count or [device_count(doc) for doc in docs]
    return [price * n for price, n in zip(args.cost, counts)]


def cost_per_million(bench, price_per_hour):
    """(cost of 1M tokens or samples, 'tokens' or 'samples'), or (None, None)."""
    rate, unit = bench.rate()
    if not rate:
        return None, None
    return price_per_hour * bench.world_size / 3600 / rate * 1e6, unit


def cost_per_epoch(bench, price_per_hour):
    """Cost of one epoch of a train_epoch benchmark (its epoch_s counter,
    else its time per iteration, which is one epoch), or None."""
    if bench.fields["phase"] != "train_epoch":
        return None
    epoch = bench.median("epoch_s") if bench.has("epoch_s") else bench.median_time
    return price_per_hour * bench.world_size / 3600 * epoch


# --- data-parallel scaling --------------------------------------------------

# Counters only a data-parallel step reports (several ranks averaging).
DATA_PARALLEL_COUNTERS = ("grad_buckets", "comm_exposed_ms")


def world_size(doc, path="results"):
    """The number of ranks a run used, from its context (1 when absent)."""
    value = doc.get("context", {}).get("world_size", 1)
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise BadInput(f"{path}: context world_size {value!r} is not a number of ranks")
    return n


def with_ranks(entry, ranks):
    """The entry renamed for a file of several world sizes: /ranks:N after
    the suite's name, before Google Benchmark's suffixes and aggregate names."""
    run = entry.get("run_name") or entry["name"]
    base = _TIME_SUFFIX.sub("", run)
    suffixes = "".join(m.group(0) for m in _TIME_SUFFIX.finditer(run))
    new_run = f"{base}/ranks:{ranks}{suffixes}"
    out = dict(entry, name=new_run + entry["name"][len(run):], world_size=ranks)
    if "run_name" in entry:
        out["run_name"] = new_run
    return out


def split_ranks(name):
    """('Family/size/.../fp32', N) from a name with /ranks:N, else (name, None)."""
    parts = name.split("/")
    for i, part in enumerate(parts):
        match = re.fullmatch(r"ranks:(\d+)", part)
        if match:
            return "/".join(parts[:i] + parts[i + 1:]), int(match[1])
    return name, None


def scaling_table(doc):
    """The weak scaling of a file of several world sizes (tools/scaling):
    benchmark name without /ranks -> (counter, ranks -> (throughput,
    efficiency)), for each benchmark that ran data-parallel (it reports
    grad_buckets or comm_exposed_ms at some world size above 1) and was
    measured at the file's fewest ranks. Efficiency at N ranks is the
    throughput per rank over that at the fewest ranks: T(N) / (N x T(1))
    when one rank was measured."""
    series = collections.OrderedDict()  # name -> ranks -> Benchmark
    for name, bench in collect(doc).items():
        key, ranks = split_ranks(name)
        if ranks:
            series.setdefault(key, {})[ranks] = bench
    table = collections.OrderedDict()
    sizes = [int(n) for n in str(doc["context"].get("world_sizes", "")).split(",") if n.isdigit()]
    fewest = min(sizes or [n for by_ranks in series.values() for n in by_ranks] or [1])
    for key, by_ranks in series.items():
        parallel = any(n > 1 and any(b.has(c) for c in DATA_PARALLEL_COUNTERS)
                       for n, b in by_ranks.items())
        rates = {n: b.rate() for n, b in by_ranks.items()}
        rates = {n: (rate, unit) for n, (rate, unit) in rates.items() if rate}
        # Every benchmark against the same base: one without a measurement at
        # the fewest ranks has no efficiency.
        if not parallel or fewest not in rates or len(rates) < 2:
            continue
        base = fewest
        per_rank = rates[base][0] / base
        table[key] = (rates[base][1] + "/s", collections.OrderedDict(
            (n, (rates[n][0], rates[n][0] / n / per_rank)) for n in sorted(rates)))
    return table


def scaling_markdown(doc):
    """The scaling table as Markdown: per data-parallel benchmark, the
    throughput at each world size with its efficiency, and the exposed
    communication of a step at the largest."""
    table = scaling_table(doc)
    if not table:
        return ""
    sizes = sorted({n for _, points in table.values() for n in points})
    exposed = {}
    for name, bench in collect(doc).items():
        key, ranks = split_ranks(name)
        if key in table and ranks == max(table[key][1]) and bench.has("comm_exposed_ms"):
            exposed[key] = bench.median("comm_exposed_ms")
    headers = ["benchmark"] + [f"{n} rank{'s' if n > 1 else ''}" for n in sizes] + [
        "comm_exposed_ms at the most ranks"]
    rows = []
    for key, (counter, points) in table.items():
        cells = [f"`{key}`"]
        for n in sizes:
            if n not in points:
                cells.append("—")
                continue
            rate, efficiency = points[n]
            cells.append(f"{format_value(counter, rate)} ({efficiency * 100:.0f}%)")
        cells.append(format_value("comm_exposed_ms", exposed.get(key)))
        rows.append(cells)
    return markdown_table(headers, rows)


def merge_world_sizes(docs, paths):
    """One Google Benchmark JSON from runs of the same benchmarks at several
    world sizes: every entry named with /ranks:N and carrying world_size,
    and each data-parallel benchmark's entries its scaling_efficiency. The
    context holds what every run reported alike, world_sizes, and how the
    efficiency is defined; each run's own context values stay in its
    entries."""
    sizes = [world_size(doc, path) for doc, path in zip(docs, paths)]
    for i, n in enumerate(sizes):
        if n in sizes[:i]:
            raise BadInput(f"{paths[i]}: a second run at {n} rank{'s' if n > 1 else ''} "
                           f"(also {paths[sizes.index(n)]}); give one file per world size")
    order = sorted(range(len(docs)), key=lambda i: sizes[i])
    records = [{"status": "ok", "context": docs[i]["context"]} for i in order]
    context, own = split_contexts(records)
    context.pop("world_size", None)
    entries = []
    for record, i in zip(records, order):
        mine = dict(own.get(id(record), {}))
        mine.pop("world_size", None)
        for entry in docs[i]["benchmarks"]:
            renamed = with_ranks(entry, sizes[i])
            entries.append(dict(renamed, context=mine) if mine else renamed)
    context["world_sizes"] = ",".join(str(sizes[i]) for i in order)
    context["scaling"] = ("weak: --batch is per rank; scaling_efficiency at N ranks is the "
                          "throughput per rank over that at the fewest ranks measured, "
                          "T(N) / (N x T(1)) from one rank")
    names = list(collections.OrderedDict.fromkeys(base_name(e) for e in entries))
    entries = [in_family(e, names.index(base_name(e))) for e in entries]
    merged = {"context": context, "benchmarks": entries}
    table = scaling_table(merged)
    for entry in entries:
        key, ranks = split_ranks(base_name(entry))
        if (key in table and ranks in table[key][1] and not entry.get("error_occurred")
                and entry.get("run_type", "iteration") == "iteration"):
            entry["scaling_efficiency"] = table[key][1][ranks][1]
    return merged


# --- device speedup --------------------------------------------------------

def device_throughputs(docs):
    """Benchmark key (the name without its device) -> device -> (mean
    throughput over repetitions, counter), for every benchmark measured on
    two or more devices."""
    sums = collections.OrderedDict()  # key -> device -> [total, n, counter]
    for doc in docs:
        for entry in iterations(doc):
            counter = throughput_counter(entry)
            key, device = split_device(base_name(entry))
            if counter is None or not device:
                continue
            slot = sums.setdefault(key, collections.OrderedDict()).setdefault(
                device, [0.0, 0, counter])
            slot[0] += entry[counter]
            slot[1] += 1
    return collections.OrderedDict(
        (key, collections.OrderedDict((d, (total / n, c)) for d, (total, n, c) in devices.items()))
        for key, devices in sums.items() if len(devices) >= 2)


def device_speedup_lines(docs):
    """The device speedup summary bench prints at the end of a run: each
    benchmark measured on two or more devices, with each device's
    throughput and its speedup over the CPU."""
    lines = []
    for key, devices in device_throughputs(docs).items():
        cpu = devices["cpu"][0] if "cpu" in devices else 0
        lines.append(f"  {key}")
        for device, (v, counter) in devices.items():
            line = f"    {device:<8} {human(v):>12} {counter}"
            if cpu > 0 and device != "cpu":
                line += f"   Speedup: {v / cpu:.2f}x ({device} vs cpu)"
            lines.append(line)
    return lines


# --- the gate's options (gate, and abtest, which passes them on) -------------

def percent(text):
    """'7%' or '7' -> 0.07."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (for example 7%)")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a percentage >= 0: {text!r}")
    return value / 100


def alpha_value(text):
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"alpha must be between 0 and 1, not {text!r}")
    return value


def add_gate_arguments(parser, allow_missing=True):
    """The gate's options on parser (or an argument group); what judges a
    change, and unless allow_missing is False, --allow-missing."""
    parser.add_argument("--threshold", type=percent, default=0.07,
                        help="largest tolerated change, for example 7%% (default)")
    parser.add_argument("--alpha", type=alpha_value, default=0.05,
                        help="significance level of the U test (default 0.05)")
    parser.add_argument("--thresholds", metavar="FILE",
                        help="per-benchmark thresholds: lines of REGEX PERCENT")
    if not allow_missing:
        return
    parser.add_argument("--allow-missing", action="store_true",
                        help="do not fail on benchmarks that ran in the baseline but errored "
                             "in, or are missing from, the contender (they are still listed)")


def load_thresholds(path):
    """[(compiled regex, fraction)] from a thresholds file."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    rules = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.rsplit(None, 1)
        try:
            if len(fields) != 2:
                raise ValueError("expected REGEX PERCENT")
            rules.append((re.compile(fields[0]), percent(fields[1])))
        except (re.error, ValueError, argparse.ArgumentTypeError) as e:
            raise BadInput(f"{path}:{number}: {e}: {line!r}")
    return rules


# --- running one benchmark in its own bench process (sweep, abtest) ----------

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


def exact_filter(name):
    """A --benchmark_filter that selects exactly this benchmark."""
    return "^" + "".join("\\" + c if c in REGEX_SPECIAL else c for c in name) + "$"


def list_benchmarks(bench, bench_args):
    """The names the bench arguments select (`bench ARGS --benchmark_list_tests`)."""
    cmd = [bench, *bench_args, "--benchmark_list_tests"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except OSError as e:
        raise BadInput(f"cannot run {bench}: {e.strerror}")
    if proc.returncode != 0:
        raise BadInput(f"bench refused the arguments (exit {proc.returncode}): "
                       + last_lines(proc.stderr, 3))
    names = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
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


def run_benchmark(bench, bench_args, name, timeout):
    """Runs one benchmark in its own bench process: bench_args without their
    filter, and a filter naming only it. Returns a record: name, seconds, and
    either status 'ok', the run's context and its benchmarks, or status
    'failed', error (why, with bench's last words) and stderr."""
    cmd = [bench, *[a for a in bench_args if not a.startswith("--benchmark_filter=")],
           f"--benchmark_filter={exact_filter(name)}", "--benchmark_format=json"]
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
    record = {"name": name, "seconds": round(time.monotonic() - start, 3)}
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
        tail = last_lines(err, 1)
        record.update(status="failed", error=error + (f": {tail}" if tail else ""),
                      stderr=last_lines(err, 20))
    return record


def kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def failure_entry(name, message):
    """The errored entry of a benchmark whose bench process failed."""
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": 1,
            "repetition_index": 0, "threads": 1, "iterations": 0, "real_time": 0.0,
            "cpu_time": 0.0, "time_unit": "ns", "error_occurred": True,
            "error_message": message}


def split_contexts(records):
    """(the context every successful run reported alike, id(record) -> what
    that run's context has of its own): a file merged from several bench
    processes keeps the first as its context, and each run's own values
    (date, load_avg, a measured peak) in that run's entries, under
    "context"."""
    ran = [r for r in records if r["status"] == "ok"]
    contexts = [r.get("context", {}) for r in ran]
    common = {k: v for k, v in (contexts[0] if contexts else {}).items()
              if all(k in c and c[k] == v for c in contexts[1:])}
    return common, {id(r): {k: v for k, v in c.items() if k not in common}
                    for r, c in zip(ran, contexts)}


def record_entries(record, own):
    """A run's entries, with what its context has of its own (own, from
    split_contexts); for a failed run, its errored entry."""
    if record["status"] != "ok":
        return [failure_entry(record["name"], record["error"])]
    mine = own.get(id(record))
    return [dict(e, context=mine) if mine else e for e in record["benchmarks"]]


def in_family(entry, index):
    """The entry as the index-th benchmark of a merged file (Google
    Benchmark numbers them by family_index)."""
    head = {"name": entry["name"], "family_index": index, "per_family_instance_index": 0}
    return dict(head, **{k: v for k, v in entry.items() if k not in head})


def write_json(path, doc):
    """Writes a result file whole or not at all."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
