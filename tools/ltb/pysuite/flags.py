"""pybench's flags, as bench's (lib/suite/flags.cc): parsed and checked at
start, a bad or foreign one refused with exit 2 and the valid values; the
namespace they give is what the sweep, the runner and the context read."""
import argparse
import math
import os
import re

import torch

from ltb.pysuite import facts, quant, serve
from ltb.pysuite.device import DTYPES

RUNTIMES = {"eager": "py_eager", "compile": "py_compile"}
DEFAULT_NEW_TOKENS = facts.load()["default_new_tokens"]
DEFAULT_PROMPT = facts.load()["default_prompt"]
DEFAULT_DATASET_SAMPLES = facts.load()["default_dataset_samples"]
DEFAULT_BATCH_TIMEOUT_US = facts.load()["default_batch_timeout_us"]
LOADGEN_SAMPLES_PER_QUERY = facts.load()["loadgen_samples_per_query"]
DEFAULT_TARGET_QPS = facts.load()["default_target_qps"]
DEFAULT_OFFLINE_SAMPLES = facts.load()["default_offline_samples"]  # Offline's one query
LOADGEN_BOUND_MS = facts.load()["loadgen_bound_ms"]  # Server's p99 bounds
DEFAULT_SUITE_MIN_TIME = facts.load()["default_suite_min_time"]
GB_MIN_TIME = 0.5  # Google Benchmark's default --benchmark_min_time
GRAD_MODES = ("inference_mode", "no_grad", "grad")
# What bench does (lib/workloads/phases.cc, generation.cc): recorded in the
# context as grad_mode, and assumed by the comparison for bench results.
BENCH_GRAD_MODE = "inference_mode"
DATA_SOURCES = ("memory",)
# bench's flags that have no meaning here: refused, saying why.
NOT_HERE = {
    "cuda_graphs": "CUDA graphs are bench's", "cpu_linear": "packed oneDNN linears are "
    "bench's", "memory_format": "ResNet and CNN run contiguous here", "tf32": "fp32 is fp32 here",
    "profile": "profile with torch.profiler",
    "data_dir": "train_epoch's data is in memory here (--data=memory): no shards on disk",
    "regenerate": "train_epoch's data is in memory here (--data=memory): no shards on disk",
    "compiled": "compiled files are bench's",
    "model": "model files are bench's",
}
# --malloc's choices and what the context says of them (lib/measure/memory.cc).
MALLOC = {"tuned": "glibc malloc, tuned: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB, M_TOP_PAD=64MiB",
          "system": "glibc malloc, default settings"}
# --compile_cache's choices and what the context says of them.
COMPILE_CACHES = {
    "shared": "Inductor's on-disk cache, as earlier runs left it",
    "fresh": "an empty Inductor cache per benchmark (torch._inductor.utils.fresh_cache), "
             "in-memory caches cleared: compile_s is a cold compile",
}
# --help's first line: pybench's (ltb/pysuite/bench.py's docstring has the rest).
DESCRIPTION = ("The suite's benchmarks in Python with PyTorch, by bench's method, so that\n"
               "C++ (LibTorch) and Python (PyTorch) results line up by name.")


class BadFlag(Exception):
    """A bad flag: exit 2."""


def split_list(text):
    """bench's SplitList: comma-separated items, blanks around each stripped."""
    return [item.strip() for item in text.split(",")]


def unique(values):
    """bench's ParseList keeps the first of duplicates: one benchmark a name."""
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def ints(text, what):
    if text == "":
        raise BadFlag(f"--{what} needs at least one value")
    try:
        values = [int(v) for v in split_list(text)]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise BadFlag(f"--{what}={text}: expected positive integers such as 1,8,32")
    return unique(values)


def whole_ints(text, what):
    """bench's WholeInts: whole numbers >= 0 separated by commas."""
    if text == "":
        raise BadFlag(f"--{what} needs at least one value")
    values = []
    for item in split_list(text):
        if not re.fullmatch(r"[+-]?\d+", item) or int(item) < 0:
            raise BadFlag(f"--{what}={text}: '{item}' is not a whole number; valid: whole "
                      "numbers >= 0 separated by commas, e.g. 0,1024,4096")
        values.append(int(item))
    return unique(values)


def switch(text, what):
    """bench's Switch: true/false, 1/0, yes/no."""
    values = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
    if text not in values:
        raise BadFlag(f"--{what}={text}: valid: {', '.join(values)}")
    return values[text]


def gb_switch(text):
    """Google Benchmark's boolean flag value (IsTruthyFlagValue): true
    unless 0, f, n, false, no or off (in any case); empty is true."""
    if len(text) == 1:
        return text.isalnum() and text not in "0fFnN"
    return text.lower() not in ("false", "no", "off")


def seconds_flag(text, what):
    try:
        value = float(text[:-1] if text.endswith("s") else text)
    except ValueError:
        raise BadFlag(f"--{what}={text}: expected seconds, e.g. 0.5")
    if value < 0:
        raise BadFlag(f"--{what}={text}: must not be negative")
    return value


def quant_flags(quants, groups):
    """bench's --quant and --quant_group (lib/suite/flags.cc): the list of
    Quants, each int4 once a group size, in the flags' order."""
    for text, what in ((quants, "quant"), (groups, "quant_group")):
        if text == "":
            raise BadFlag(f"--{what} needs at least one value")
    kinds = unique(split_list(quants))
    for k in kinds:
        if k not in quant.NAMES:
            raise BadFlag(f"bad --quant value '{quants}': unknown quantisation '{k}'; valid: "
                      + ", ".join(quant.NAMES))
    sizes = []
    for g in split_list(groups):
        if not re.fullmatch(r"[+-]?\d+", g) or int(g) not in quant.GROUPS:
            raise BadFlag(f"bad --quant_group value '{groups}': unknown group size '{g}'; "
                      "valid: " + ", ".join(map(str, quant.GROUPS)))
        if int(g) not in sizes:
            sizes.append(int(g))
    return [quant.Quant(k, g) for k in kinds for g in (sizes if k == "int4" else [0])]


def choices(text, valid, what):
    if text == "":
        raise BadFlag(f"--{what} needs at least one value")
    values = split_list(text)
    for v in values:
        if v not in valid:
            raise BadFlag(f"--{what}={text}: unknown '{v}'; valid: {', '.join(valid)}")
    return unique(values)


def named_as_given(flag, value):
    """lib/suite/flags.cc NamedAsGiven: names hold a rate or a bound to six
    significant digits; a value that they round is refused."""
    if float(f"{value:g}") != value:
        raise BadFlag(f"--{flag}={value:.15g}: a benchmark's name holds it to six significant "
                      f"digits ({value:g}), another value; give it in six")


def parse_flags(argv):
    """bench's flags (--name=value or --name value) -> a namespace; a flag
    bench has that means nothing here, or an unknown one, stops with exit 2."""
    p = argparse.ArgumentParser(prog="pybench", description=DESCRIPTION,
                                allow_abbrev=False)
    add = p.add_argument
    add("--benchmark_filter", default=None)
    add("--benchmark_list_tests", default="false", nargs="?", const="true")
    add("--benchmark_min_time", default=None)
    add("--benchmark_repetitions", type=int, default=1)
    add("--benchmark_out", default=None)
    add("--benchmark_out_format", default="json", choices=("json",))
    add("--benchmark_format", default="console", choices=("console", "json"))
    add("--benchmark_display_aggregates_only", default="false", nargs="?", const="true")
    add("--benchmark_report_aggregates_only", default="false", nargs="?", const="true")
    add("--devices", default=None)
    add("--batch", default=None)
    add("--seq", default=None)
    add("--prompt", default=None)
    add("--new_tokens", default=None)
    add("--depth", default="0", help="generate (GPT2, Llama): tokens already in the "
        "key/value cache when the prompt starts, e.g. 0,4096")
    add("--weights", default="", help="a safetensors checkpoint (file, folder or index) "
        "loaded by name into Llama, GPT2 or Transformer")
    add("--print_tokens", default="false",
        help="generate: print one generation's prompt and token ids to stderr")
    add("--dtype", default="fp32")
    add("--quant", default="none", help="Transformer's, GPT2's and Llama's linear weights "
        "for inference: none, int8, int4 (in groups of --quant_group), int8dyn, or a list; "
        "names end in /int8, /int4:gN, /int8dyn")
    add("--quant_group", default="32", help="--quant=int4's group sizes: 32, 64, 128, or a "
        "list")
    add("--threads", type=int, default=0)
    add("--interop_threads", type=int, default=1)
    add("--warmup_s", default="0.5")
    add("--warmup_steps", type=int, default=1)
    add("--steps", type=int, default=None)
    add("--seed", type=int, default=0)
    add("--epochs", type=int, default=2, help="train_epoch: measured epochs per benchmark")
    add("--warmup_epochs", type=int, default=1, help="train_epoch: epochs before them")
    add("--dataset_samples", type=int, default=DEFAULT_DATASET_SAMPLES,
        help="train_epoch: samples in the synthetic dataset")
    add("--data", default="memory", help="train_epoch's data: memory (bench's disk is not "
        "here)")
    add("--shard_mb", type=int, default=128,
        help="train_epoch: MB of a shard, which decides how the dataset is drawn")
    add("--sync", default="true", help="true (pybench synchronises the device before "
        "every clock read; bench's --sync=false, the unsynchronised mistake, is bench's)")
    add("--malloc", default="tuned", choices=tuple(MALLOC),
        help="glibc malloc: tuned (bench's: keep freed memory, no trimming) or system")
    add("--peak_flops", default=None)
    add("--peak_bandwidth", type=float, default=None)
    add("--peaks_from", default=None, help="a bench JSON whose measured peaks to use")
    add("--runtime", default="eager", help="eager, compile, or both (eager,compile)")
    add("--compile", action="store_true", help="the same as --runtime=eager,compile")
    add("--compile_cache", default="shared", choices=tuple(COMPILE_CACHES),
        help="torch.compile's Inductor cache: shared (its usual on-disk cache, which "
             "earlier runs may have filled: a warm-cache compile_s) or fresh (an empty one "
             "per benchmark: a cold compile_s)")
    add("--grad_mode", default=BENCH_GRAD_MODE,
        help="inference phases: inference_mode (bench's), no_grad or grad: the classic "
             "mistakes, recorded in the context so that the comparison names them")
    add("--scenario", default="", help="serve: MLPerf LoadGen scenarios to run the forward "
        "phase under (SingleStream, MultiStream, Server, Offline), as bench's")
    add("--target_qps", default=f"{DEFAULT_TARGET_QPS:g}",
        help="serve: Server's rates; Offline's expected rate")
    add("--latency_bound_ms", type=float, default=None, help="serve: Server's p99 bound")
    add("--samples_per_query", type=int, default=0, help="serve: MultiStream's samples")
    add("--find_peak", default="false", help="serve: Server's peak QPS by LoadGen's search")
    add("--serve_min_s", type=float, default=1, help="serve: LoadGen's minimum duration")
    add("--serve_min_queries", type=int, default=32, help="serve: LoadGen's minimum queries")
    add("--max_batch", type=int, default=8, help="serve: the batcher's largest batch")
    add("--batch_timeout_us", type=int, default=DEFAULT_BATCH_TIMEOUT_US,
        help="serve: the batcher's wait")
    add("--serve_log_dir", default="", help="serve: LoadGen's logs (default: beside "
        "--benchmark_out, else ./loadgen_logs)")
    add("--serve_phase", default="", help="serve: the inference phase served (forward, "
        "generate); default: generate where --prompt_len or --output_len is given, else "
        "forward")
    add("--prompt_len", default="", help="serve of generate: each request's prompt length, "
        "N or MIN:MAX (drawn uniformly, seeded); default: --prompt")
    add("--output_len", default="", help="serve of generate: each request's output tokens, "
        "N or MIN:MAX (drawn uniformly, seeded), at least 2; default: --new_tokens")
    add("--ttft_bound_ms", type=float, default=None, help="serve of generate: Server's p99 "
        "time-to-first-token bound in ms; default: LoadGen's (100 ms)")
    add("--tpot_bound_ms", type=float, default=None, help="serve of generate: Server's p99 "
        "time-per-output-token bound in ms; default: LoadGen's (100 ms)")
    add("--prefill_chunk", type=int, default=None, help="serve of generate: prompt tokens "
        "prefilled between two decode steps at most; default: 0, each prompt whole")
    add("--slowdown", type=float, default=1.0, help=argparse.SUPPRESS)  # the tests'
    own = {a.option_strings[0][2:] for a in p._actions if a.option_strings}
    for arg in argv:
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if name in NOT_HERE:
            raise BadFlag(f"--{name} is bench's only ({NOT_HERE[name]})")
        if name is not None and name not in own and name != "help":
            raise BadFlag(f"unknown flag --{name}; valid: "
                      + ", ".join(f"--{n}" for n in sorted(own - {'h', 'slowdown'})))
    a = p.parse_args(argv)
    # bench's refusal of a path given empty ("--weights=$UNSET"), which would
    # run as if it were left out.
    for name in ("weights", "serve_log_dir", "peaks_from"):
        given = any(arg == f"--{name}" or arg.startswith(f"--{name}=") for arg in argv)
        if given and not getattr(a, name):
            raise BadFlag(f"--{name}= is empty: give a path, or leave the flag out")
    # Given empty, a length range is refused as bench refuses it (not left out).
    a.lengths_given = {name for name in ("prompt_len", "output_len")
                       if any(arg == f"--{name}" or arg.startswith(f"--{name}=") for arg in argv)}
    a.list_tests = gb_switch(a.benchmark_list_tests)
    # Google Benchmark: report_aggregates_only is the file's and the
    # display's, display_aggregates_only the display's alone.
    a.report_aggregates_only = gb_switch(a.benchmark_report_aggregates_only)
    a.display_aggregates_only = (a.report_aggregates_only
                                 or gb_switch(a.benchmark_display_aggregates_only))
    a.default_suite = a.benchmark_filter is None
    a.min_time_given = a.benchmark_min_time is not None
    a.min_time = (seconds_flag(a.benchmark_min_time, "benchmark_min_time") if a.min_time_given
                  else DEFAULT_SUITE_MIN_TIME if a.default_suite else GB_MIN_TIME)
    a.warmup_seconds = seconds_flag(a.warmup_s, "warmup_s")
    if a.warmup_steps < 0 or a.threads < 0 or a.interop_threads < 1:
        raise BadFlag("--warmup_steps and --threads must not be negative, --interop_threads "
                  "positive")
    if a.steps is not None and a.steps <= 0:
        raise BadFlag(f"--steps={a.steps}: must be positive")
    if a.benchmark_repetitions < 1:
        raise BadFlag("--benchmark_repetitions must be positive")
    if a.epochs <= 0 or a.warmup_epochs < 0 or a.dataset_samples <= 0 or a.shard_mb <= 0:
        raise BadFlag("--epochs, --dataset_samples and --shard_mb must be positive, "
                  "--warmup_epochs not negative")
    if a.data not in DATA_SOURCES:
        raise BadFlag(f"--data={a.data}: pybench runs train_epoch from a dataset in memory only "
                  f"(bench's --data=disk reads shards it writes); valid: "
                  f"{', '.join(DATA_SOURCES)}")
    a.batches = ints(a.batch, "batch") if a.batch is not None else None
    a.seqs = ints(a.seq, "seq") if a.seq is not None else None
    a.prompts = ints(a.prompt, "prompt") if a.prompt is not None else None
    a.news = ints(a.new_tokens, "new_tokens") if a.new_tokens is not None else None
    a.depths = whole_ints(a.depth, "depth")
    a.print_tokens = switch(a.print_tokens, "print_tokens")
    # bench's --sync=false times steps without waiting for the device and
    # names them /nosync; pybench always waits, so it would time something
    # else under a name without /nosync, and its context would say false.
    if not switch(a.sync, "sync"):
        raise BadFlag(f"--sync={a.sync} is bench's only (pybench synchronises the device "
                      "before every clock read); valid: true, or leave it out")
    a.sync = "true"
    a.dtypes = choices(a.dtype, tuple(DTYPES), "dtype")
    a.dtypes_given = any(x == "--dtype" or x.startswith("--dtype=") for x in argv)
    # As bench's SweepFor: a dtype the filter names as a part of a name
    # (".../bf16") without --dtype is registered beside the default.
    if not a.dtypes_given and a.benchmark_filter:
        for name in ("fp32", "bf16", "fp16"):
            if re.search(rf"(^|/){name}($|/)", a.benchmark_filter) and name not in a.dtypes:
                a.dtypes.append(name)
    a.quants = quant_flags(a.quant, a.quant_group)
    a.runtimes = choices("eager,compile" if a.compile else a.runtime, tuple(RUNTIMES),
                         "runtime")
    # torch.compile then returns the model as it is: a /py_compile run eager.
    for var in ("TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE"):
        if "compile" in a.runtimes and os.environ.get(var, "") == "1":
            raise BadFlag(f"{var}=1 turns torch.compile off, so a /py_compile run would be "
                          "eager: unset it, or leave compile out of --runtime")
    if a.grad_mode not in GRAD_MODES:
        raise BadFlag(f"--grad_mode={a.grad_mode}: valid: {', '.join(GRAD_MODES)}")
    a.device_list = devices(a.devices)
    serve_flags(a)
    return a


def length_range(flag, text, least):
    """lib/serve's ParseLengthRange: N or MIN:MAX, least <= MIN <= MAX."""
    parts = text.split(":")
    if len(parts) in (1, 2) and all(re.fullmatch(r"\s*[+-]?\d+\s*", x) for x in parts):
        lo, hi = int(parts[0]), int(parts[-1])
        if least <= lo <= hi:
            return lo, hi
    raise BadFlag(f"--{flag}={text}: valid: a length N or a range MIN:MAX of whole numbers, "
                  f"{least} <= MIN <= MAX" + (
                      " (LoadGen times the output tokens after the first, so a request "
                      "generates at least 2)" if least == 2 else ""))


def serve_flags(a):
    """The serve settings, refused as bench refuses them (lib/suite/flags.cc)."""
    a.serve_phase_given = a.serve_phase != ""
    # (0, 0): not given, the sweep's --prompt and --new_tokens stand.
    a.prompt_range, a.output_range = (0, 0), (0, 0)
    if a.prompt_len or "prompt_len" in a.lengths_given:
        a.prompt_range = length_range("prompt_len", a.prompt_len, 1)
    if a.output_len or "output_len" in a.lengths_given:
        a.output_range = length_range("output_len", a.output_len, 2)
    if (a.prompt_len or a.output_len) and not a.serve_phase_given:
        a.serve_phase = "generate"
    if a.serve_phase and a.serve_phase not in ("forward", "encode", "generate"):
        raise BadFlag(f"--serve_phase={a.serve_phase}: serve runs an inference phase (not a "
                      "training phase); valid: forward, encode (Whisper's), generate")
    if a.prefill_chunk is not None and a.serve_phase != "generate":
        raise BadFlag("--prefill_chunk: prompts are chunked only in serve of generate; valid: "
                      "with --serve_phase=generate, --prompt_len or --output_len")
    a.prefill_chunk = a.prefill_chunk or 0
    # lib/suite/flags.cc: served generation's settings beside another phase
    # served would be left unread.
    for flag in ("prompt_len", "output_len", "ttft_bound_ms", "tpot_bound_ms"):
        if getattr(a, flag) not in ("", None) and a.serve_phase != "generate":
            raise BadFlag(f"--{flag} applies to serve of generate alone"
                          + (f", not --serve_phase={a.serve_phase}" if a.serve_phase else "")
                          + "; valid: with --serve_phase=generate, --prompt_len or "
                          "--output_len")
    if a.latency_bound_ms is not None and a.serve_phase == "generate":
        raise BadFlag("--latency_bound_ms bounds a served batch's latency, which served "
                      "generation does not have; valid: --ttft_bound_ms and --tpot_bound_ms")
    # lib/suite/flags.cc: 0 is "not given"; given, it would quietly be LoadGen's 100 ms.
    for flag in ("ttft_bound_ms", "tpot_bound_ms"):
        bound = getattr(a, flag)
        if bound is not None and not serve.bound_in_nanoseconds(bound):
            raise BadFlag(f"--{flag}={bound:g}{serve.BOUND_MUST_BE}")
        if bound is not None:
            named_as_given(flag, bound)
    a.ttft_bound_ms = a.ttft_bound_ms or 0
    a.tpot_bound_ms = a.tpot_bound_ms or 0
    if a.serve_phase == "generate" and a.scenario.strip(", "):
        if a.prefill_chunk < 0:
            raise BadFlag(f"--prefill_chunk={a.prefill_chunk}: valid: a whole number of prompt "
                          "tokens >= 1, or 0 for whole prompts")
        for flag in ("ttft_bound_ms", "tpot_bound_ms"):
            bound = getattr(a, flag)
            if bound < 0 or math.isnan(bound):
                raise BadFlag(f"--{flag} must be a number of milliseconds > 0, or left out "
                              "for LoadGen's 100 ms")
    a.scenarios = []
    for item in (x.strip() for x in a.scenario.split(",")):
        if item and item not in serve.SCENARIOS:
            raise BadFlag(f"--scenario: unknown scenario '{item}'; valid: "
                      + ", ".join(serve.SCENARIOS))
        if item and item not in a.scenarios:
            a.scenarios.append(item)
    # lib/suite/flags.cc: every served request starts from an empty slot.
    if a.serve_phase == "generate" and a.scenarios and 0 not in a.depths:
        raise BadFlag("--depth: served generation starts every request from an empty slot, at "
                      "depth 0, which --depth leaves out; valid: --depth with 0 among its "
                      "values, or left out")
    a.serve_qps = []
    for item in (x.strip() for x in a.target_qps.split(",")):
        try:
            qps = float(item)
        except ValueError:
            qps = 0
        if not qps > 0 or math.isinf(qps):
            raise BadFlag(f"--target_qps: '{item}' is not a rate; valid: numbers > 0 (queries "
                      "a second), comma-separated")
        named_as_given("target_qps", qps)
        if qps not in a.serve_qps:
            a.serve_qps.append(qps)
    if a.latency_bound_ms is not None and not serve.bound_in_nanoseconds(a.latency_bound_ms):
        raise BadFlag(f"--latency_bound_ms={a.latency_bound_ms:g}{serve.BOUND_MUST_BE}")
    if a.latency_bound_ms is not None:
        named_as_given("latency_bound_ms", a.latency_bound_ms)
    if a.samples_per_query < 0:
        raise BadFlag(f"--samples_per_query={a.samples_per_query}: MultiStream's samples a "
                      "query must be a whole number >= 1, or left out for LoadGen's "
                      f"{LOADGEN_SAMPLES_PER_QUERY}")
    # Each in bench's words (lib/serve/serve.cc ValidateServe).
    if a.max_batch < 1:
        raise BadFlag("--max_batch must be a whole number >= 1")
    if a.batch_timeout_us < 0:
        raise BadFlag("--batch_timeout_us must be a whole number >= 0")
    if not 0 <= a.serve_min_s <= serve.MAX_SERVE_SECONDS:
        raise BadFlag(f"--serve_min_s={a.serve_min_s:g}: LoadGen's minimum duration must be a "
                      f"number of seconds from 0 to {serve.MAX_SERVE_SECONDS:g} (11.6 days)")
    if not 1 <= a.serve_min_queries <= 2 ** 63 - 1:
        raise BadFlag(f"--serve_min_queries={a.serve_min_queries}: LoadGen's minimum query "
                      "count must be a whole number >= 1 (and at most 2^63 - 1)")
    if "Offline" in a.scenarios:
        for qps in a.serve_qps:
            samples = 1.1 * a.serve_min_s * qps
            if samples > serve.MAX_OFFLINE_SAMPLES:
                raise BadFlag(f"Offline at --target_qps={qps:g} for --serve_min_s="
                              f"{a.serve_min_s:g}: its one query would hold {samples:.3g} "
                              "samples (1.1 x the rate x the duration), over the "
                              f"{serve.MAX_OFFLINE_SAMPLES:g} one query may hold; lower "
                              "--target_qps or --serve_min_s")
    a.find_peak = switch(a.find_peak, "find_peak")
    if a.find_peak and "Server" not in a.scenarios:
        raise BadFlag(serve.FIND_PEAK_OUTSIDE_SERVER)
    if not a.serve_log_dir:
        a.serve_log_dir = (os.path.splitext(a.benchmark_out)[0] + ".loadgen"
                           if a.benchmark_out else "loadgen_logs")


def devices(text):
    available = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if text is None:
        return available
    out = []
    for d in text.split(","):
        if not re.fullmatch(r"cpu|cuda(:\d+)?", d):
            raise BadFlag(f"--devices={text}: unknown '{d}'; valid: cpu, cuda, cuda:N")
        out.append(d)
    return out

