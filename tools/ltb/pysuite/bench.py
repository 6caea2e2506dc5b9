"""The suite's benchmarks in Python with PyTorch, by bench's method, so that
C++ (LibTorch) and Python (PyTorch) results line up by name.

    tools/pybench --compare BENCH.json PYBENCH.json   (serve results side by side)
    tools/pybench [--benchmark_filter=REGEX] [--runtime=eager,compile | --compile]
                  [bench's flags: --devices --batch --seq --prompt --new_tokens
                   --dtype --threads --interop_threads --warmup_s --warmup_steps
                   --steps --seed --peak_flops --benchmark_min_time
                   --benchmark_repetitions --benchmark_out --benchmark_list_tests
                   --epochs --warmup_epochs --dataset_samples --shard_mb
                   --depth --weights --print_tokens --quant --quant_group ...]

Runs every model family of the suite and its phases, from
tools/families.py: Transformer (forward, forward_backward, train_step,
train_epoch), GPT2 and Llama (forward, forward_backward, train_step,
generate), ResNet and CNN (forward, train_step), Encoder (forward,
forward_backward), Whisper (encode, generate, transcribe) and EncDec
(forward, train_step, train_epoch). The models have the C++ modules'
parameters, sizes and computation, built after seeding with --seed as bench
builds them. What bench does, done the
same way (lib/measure): the warm-up (at least --warmup_steps steps and
--warmup_s seconds of steps, or twice that in wall time; train_epoch:
--warmup_epochs epochs), Google Benchmark's
iteration rule (from 1 iteration, x1.4 the minimum time over the last run's
time, x10 when under a tenth of it; later repetitions reuse the first's
count; train_epoch: --epochs iterations of one epoch each), step times read
after synchronising the device, the intra-op and
BLAS threads (--threads, else OMP_NUM_THREADS, else one per physical core)
and one inter-op thread, glibc malloc tuned as bench tunes it (--malloc),
inference under torch.inference_mode (c10::InferenceMode in bench),
training with autograd, fp32 weights and autocast to the dtype,
AdamW(lr=1e-4) with GradScaler's loss scaling in fp16 for the token-batch
families' train_step and train_epoch (vision: SGD, lr 0.1, momentum 0.9),
greedy generation with a key/value cache (Whisper: and the cross-attention
keys and values computed once an utterance). train_epoch passes over a
synthetic dataset of --dataset_samples samples generated in memory as bench's
--data=memory generates it, handed over by a background thread (bench's
--data=disk is not here: --data=disk is refused). The counters are bench's:
tokens/s, samples/s, FLOP/s
from the same analytic count (vision: PyTorch's FLOP counter, which counts
convolutions directly as bench does), mfu and mfu_peak, params, peak_mem
(CUDA: PyTorch's allocator; PyTorch has no CPU allocator statistics, so on
the CPU only peak_rss), step_cv_%, step_p50/p90/p99_ms; generation's
ttft_ms, tpot_ms, tpot_p50/p90/p99_ms, pp_tok/s, tg_tok/s, kv_cache_bytes,
weight_bytes, weight_GB/s, read_GB/s, tpot_growth_% and mbu; Whisper's
audio_s/s and rtf; train_epoch's epoch_N_s and epoch_s. Generation at a --depth (GPT2, Llama):
the cache filled once with that many random tokens before the warm-up, the
prompt attending to them with a causal mask aligned to the cache's end.
--weights loads a safetensors checkpoint by name as bench does
(tools/weights.py), with bench's errors as that benchmark's error entry;
--print_tokens prints one generation's ids to stderr as bench prints them.
--quant=none,int8,int4,int8dyn (and --quant_group=32,64,128 for int4) runs
Transformer's, GPT2's and Llama's phases with their linear layers and tied
output head quantised once as bench quantises them, through the same ATen
operators (ltb/pysuite/quant.py): names gain /int8, /int4:gN or /int8dyn
after the dtype; training phases, and dtypes or devices a kernel does not
take, are the benchmark's error in bench's words; weight_bytes (and
weight_GB/s, read_GB/s, mbu) count the packed bytes; int8dyn leaves mfu out
as bench does. Not here: gpu_util_% of the epochs (bench's NVML sampler),
and the accuracy counters of reduced precisions and --quant against fp32
(kld_mean, kld_p99, kld_max, same_top1_%, top1_agree_%, rel_err,
token_match_%), which are bench's alone.

Names are bench's with the runtime last (after the dtype, or /weights:NAME): .../fp32/py_eager, or
.../fp32/py_compile for torch.compile (its compile_s counter is the first
step's time less a warm step's, the compilation apart from the timing; over
Inductor's on-disk cache as earlier runs left it, whose size at the start
the context's compile_cache gives, or with --compile_cache=fresh an empty
cache per benchmark: a cold compile);
tools/compare pairs them with bench's eager, /aoti and /torchscript
results. The context records what decides the comparison: threads, grad
mode, warm-up, torch's version and the BLAS, under bench's keys.

Peaks for mfu: --peak_flops as bench's, or --peaks_from=BENCH.json to take
the peaks a bench run measured (its context's peak_flops_*), else the best
of torch.matmul on 2048x2048 measured at start (the context says which).

Exit 0 when every benchmark ran, 1 when one errored (it is in the JSON with
its message, as bench writes errors), 2 on a bad flag or a filter that
selects nothing, with the valid values.
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import time

from ltb.base import REPO, BadInput, require, write_json
from ltb.results.format import human
from ltb.results.load import load
from ltb.results.serving import compare_main

require("torch", "numpy")  # this Python, or the project's venv, which has them

import torch  # noqa: E402

from ltb.pysuite import facts, families, quant, serve, weights  # noqa: E402

RUNTIMES = {"eager": "py_eager", "compile": "py_compile"}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_NEW_TOKENS = facts.load()["default_new_tokens"]
DEFAULT_PROMPT = facts.load()["default_prompt"]
DEFAULT_SUITE_MIN_TIME = facts.load()["default_suite_min_time"]
GB_MIN_TIME = 0.5  # Google Benchmark's default --benchmark_min_time
MAX_ITERATIONS = 1_000_000_000  # Google Benchmark's kMaxIterations
# Samples of step times kept for the percentiles, and tpot_growth_%'s window.
KEPT_SAMPLES = facts.load()["measurement"]["kept_samples"]
GROWTH_WINDOW = facts.load()["measurement"]["growth_window"]
GRAD_MODES = ("inference_mode", "no_grad", "grad")
# What bench does (lib/workloads/phases.cc, generation.cc): recorded in the
# context as grad_mode, and assumed by the comparison for bench results.
BENCH_GRAD_MODE = "inference_mode"

# The families' Family() settings (lib/models/*.cc): phases, the default
# suite's pattern, default shapes, the default suite's CPU shapes and their
# constants (the vision models' image side and SGD learning rate, a
# decoder's context and depth chunk, Whisper's window), as bench
# --list_families prints them (ltb/pysuite/facts.py).
FAMILIES = {name: dict(facts.settings(name), **facts.family(name)["constants"])
            for name in families.FAMILIES}
VISION = ("ResNet", "CNN")
# The families whose forward serves (lib: Family::serves), and its settings.
SERVING = ("ResNet", "CNN", "Transformer", "GPT2", "Llama")
LANGUAGE = ("Transformer", "GPT2", "Llama")
DEPTH_FAMILIES = tuple(f["name"] for f in facts.load()["families"] if f["generates_at_depth"])
# How bench words a decoder's limit on positions (GPT2's is its size card's
# max_positions, Llama's its family's context).
CONTEXT_SAID = {"GPT2": "GPT2 has", "Llama": "Llama's context is"}
# What a phase's names carry (lib/family/family.h Shape): a batch only, or a
# prompt and new tokens; the rest a batch and a sequence.
BATCH_ONLY_PHASES = ("encode",)
GENERATING_PHASES = ("generate", "transcribe")
TRAINING_PHASES = ("forward_backward", "train_step", "train_epoch")
TRAINER_PHASES = ("train_step", "train_epoch")  # lib/workloads/trainer.cc's
WINDOW_SECONDS = FAMILIES["Whisper"]["window_seconds"]  # audio a mel window holds
PREFETCH_BATCHES = facts.load()["measurement"]["prefetch_batches"]
DATA_SOURCES = ("memory",)
# bench's flags that have no meaning here: refused, saying why.
NOT_HERE = {
    "cuda_graphs": "CUDA graphs are bench's", "cpu_linear": "packed oneDNN linears are "
    "bench's", "memory_format": "no convolution family here", "tf32": "fp32 is fp32 here",
    "profile": "profile with torch.profiler",
    "data_dir": "train_epoch's data is in memory here (--data=memory): no shards on disk",
    "regenerate": "train_epoch's data is in memory here (--data=memory): no shards on disk",
    "compiled": "compiled files are bench's",
    "model": "model files are bench's",
}
# lib/measure/memory.cc ConfigureMalloc: glibc's mallopt parameters.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
MALLOC = {"tuned": "glibc malloc, tuned: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1GiB, M_TOP_PAD=64MiB",
          "system": "glibc malloc, default settings"}


class BadFlag(Exception):
    """A bad flag: exit 2."""


# --- flags -------------------------------------------------------------------

def ints(text, what):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise BadFlag(f"--{what}={text}: expected positive integers such as 1,8,32")
    return values


def whole_ints(text, what):
    """bench's WholeInts: whole numbers >= 0 separated by commas."""
    if text == "":
        raise BadFlag(f"--{what} needs at least one value")
    values = []
    for item in text.split(","):
        if not re.fullmatch(r"[+-]?\d+", item.strip()) or int(item) < 0:
            raise BadFlag(f"--{what}={text}: '{item}' is not a whole number; valid: whole "
                      "numbers >= 0 separated by commas, e.g. 0,1024,4096")
        values.append(int(item))
    return values


def switch(text, what):
    """bench's Switch: true/false, 1/0, yes/no."""
    values = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
    if text not in values:
        raise BadFlag(f"--{what}={text}: valid: {', '.join(values)}")
    return values[text]


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
    kinds = quants.split(",")
    for k in kinds:
        if k not in quant.NAMES:
            raise BadFlag(f"bad --quant value '{quants}': unknown quantisation '{k}'; valid: "
                      + ", ".join(quant.NAMES))
    sizes = []
    for g in groups.split(","):
        if not re.fullmatch(r"[+-]?\d+", g.strip()) or int(g) not in quant.GROUPS:
            raise BadFlag(f"bad --quant_group value '{groups}': unknown group size '{g}'; "
                      "valid: " + ", ".join(map(str, quant.GROUPS)))
        sizes.append(int(g))
    return [quant.Quant(k, g) for k in kinds for g in (sizes if k == "int4" else [0])]


def choices(text, valid, what):
    values = text.split(",")
    for v in values:
        if v not in valid:
            raise BadFlag(f"--{what}={text}: unknown '{v}'; valid: {', '.join(valid)}")
    return values


def parse_flags(argv):
    """bench's flags (--name=value or --name value) -> a namespace; a flag
    bench has that means nothing here, or an unknown one, stops with exit 2."""
    p = argparse.ArgumentParser(prog="pybench", description=__doc__.split("\n\n")[0],
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
    add("--dataset_samples", type=int, default=128,
        help="train_epoch: samples in the synthetic dataset")
    add("--data", default="memory", help="train_epoch's data: memory (bench's disk is not "
        "here)")
    add("--shard_mb", type=int, default=128,
        help="train_epoch: MB of a shard, which decides how the dataset is drawn")
    add("--sync", default="true", choices=("true", "false"))
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
    add("--target_qps", default="10", help="serve: Server's rates; Offline's expected rate")
    add("--latency_bound_ms", type=float, default=None, help="serve: Server's p99 bound")
    add("--samples_per_query", type=int, default=0, help="serve: MultiStream's samples")
    add("--find_peak", default="false", help="serve: Server's peak QPS by LoadGen's search")
    add("--serve_min_s", type=float, default=1, help="serve: LoadGen's minimum duration")
    add("--serve_min_queries", type=int, default=32, help="serve: LoadGen's minimum queries")
    add("--max_batch", type=int, default=8, help="serve: the batcher's largest batch")
    add("--batch_timeout_us", type=int, default=2000, help="serve: the batcher's wait")
    add("--serve_log_dir", default="", help="serve: LoadGen's logs (default: beside "
        "--benchmark_out, else ./loadgen_logs)")
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
    a.list_tests = a.benchmark_list_tests in ("true", "1", "")
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
    a.batches = ints(a.batch, "batch") if a.batch else None
    a.seqs = ints(a.seq, "seq") if a.seq else None
    a.prompts = ints(a.prompt, "prompt") if a.prompt is not None else None
    a.news = ints(a.new_tokens, "new_tokens") if a.new_tokens else None
    a.depths = whole_ints(a.depth, "depth")
    a.print_tokens = switch(a.print_tokens, "print_tokens")
    a.dtypes = choices(a.dtype, tuple(DTYPES), "dtype")
    a.quants = quant_flags(a.quant, a.quant_group)
    a.runtimes = choices("eager,compile" if a.compile else a.runtime, tuple(RUNTIMES),
                         "runtime")
    if a.grad_mode not in GRAD_MODES:
        raise BadFlag(f"--grad_mode={a.grad_mode}: valid: {', '.join(GRAD_MODES)}")
    a.device_list = devices(a.devices)
    serve_flags(a)
    return a


def serve_flags(a):
    """The serve settings, refused as bench refuses them (lib/suite/flags.cc)."""
    a.scenarios = []
    for item in (x.strip() for x in a.scenario.split(",")):
        if item and item not in serve.SCENARIOS:
            raise BadFlag(f"--scenario: unknown scenario '{item}'; valid: "
                      + ", ".join(serve.SCENARIOS))
        if item and item not in a.scenarios:
            a.scenarios.append(item)
    a.serve_qps = []
    for item in (x.strip() for x in a.target_qps.split(",")):
        try:
            qps = float(item)
        except ValueError:
            qps = 0
        if not qps > 0 or math.isinf(qps):
            raise BadFlag(f"--target_qps: '{item}' is not a rate; valid: numbers > 0 (queries "
                      "a second), comma-separated")
        if qps not in a.serve_qps:
            a.serve_qps.append(qps)
    if a.latency_bound_ms is not None and not a.latency_bound_ms > 0:
        raise BadFlag(f"--latency_bound_ms={a.latency_bound_ms:g}: the bound must be a number of "
                  "milliseconds > 0 (or left out for LoadGen's 100 ms)")
    if a.max_batch < 1 or a.batch_timeout_us < 0 or a.serve_min_s < 0 or \
            a.serve_min_queries < 1:
        raise BadFlag("--max_batch and --serve_min_queries must be >= 1, --batch_timeout_us and "
                  "--serve_min_s >= 0")
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


# --- what runs ---------------------------------------------------------------

class Spec:
    """One benchmark, named as bench's BenchSpec::Name() with the runtime."""

    def __init__(self, family, size, device, phase, batch, dtype, runtime, seq=0, prompt=0,
                 new_tokens=0, depth=0, weights="", quant=quant.NONE):
        self.family, self.size, self.device, self.phase = family, size, device, phase
        self.batch, self.seq, self.prompt, self.new_tokens = batch, seq, prompt, new_tokens
        self.depth, self.weights, self.quant = depth, weights, quant
        self.dtype, self.runtime = dtype, runtime
        self.steps = None
        self.serve = None  # serve: scenario, qps, max_batch (the forward is served)

    @property
    def training(self):
        return self.phase in TRAINING_PHASES

    def name(self):
        if self.serve:  # lib/family/spec.cc
            sv = self.serve
            name = f"{self.family}/{self.size}/{self.device}/serve/scenario:{sv['scenario']}"
            if sv["scenario"] == "Server":
                name += f"/{'find_peak_from' if sv.get('find_peak') else 'qps'}:{sv['qps']:g}"
            name += f"/max_batch:{sv['max_batch']}"
        else:
            name = f"{self.family}/{self.size}/{self.device}/{self.phase}/batch:{self.batch}"
        if self.seq:
            name += f"/seq:{self.seq}"
        if self.prompt:
            name += f"/prompt:{self.prompt}/new:{self.new_tokens}"
        if self.depth:
            name += f"/depth:{self.depth}"
        name += f"/{self.dtype}"
        if not self.quant.none:
            name += f"/{self.quant.name()}"
        if self.weights:
            name += f"/weights:{weights.weights_name(self.weights)}"
        return f"{name}/{RUNTIMES[self.runtime]}"

    def full_name(self):
        # Google Benchmark names a fixed iteration count (bench --steps).
        steps = f"/iterations:{self.steps}" if self.steps else ""
        return self.name() + steps + "/manual_time"


def default_suite_filter():
    return "^(" + "|".join(f"{f}/({s['suite']})" for f, s in FAMILIES.items()) + ")"


def specs(args):
    """Every benchmark the flags select, in bench's order (ExpandSweep)."""
    flt = default_suite_filter() if args.default_suite else args.benchmark_filter
    if flt == "all":  # bench's word for everything
        flt = "."
    negate = flt.startswith("-")
    try:
        pattern = re.compile(flt[1:] if negate else flt)
    except re.error as e:
        raise BadFlag(f"--benchmark_filter={flt}: not a regular expression: {e}")
    out = []
    for family, f in FAMILIES.items():
        for size in families.sizes(family):
            for phase in f["phases"]:
                for device in args.device_list:
                    cpu = device == "cpu" and args.default_suite
                    batch = f["cpu_batch"] if cpu and f["cpu_batch"] else f["batch"]
                    batches = args.batches or [batch]
                    if phase in GENERATING_PHASES:
                        new = f["cpu_new_tokens"] if cpu and f["cpu_new_tokens"] else \
                            DEFAULT_NEW_TOKENS
                        prompt = f["cpu_prompt"] if cpu and f["cpu_prompt"] else DEFAULT_PROMPT
                        prompts = ([f["fixed_prompt"]] if "fixed_prompt" in f
                                   else args.prompts or [prompt])
                        lengths = [(p, n) for p in prompts for n in (args.news or [new])]
                    elif family in VISION or phase in BATCH_ONLY_PHASES:
                        lengths = [(0, 0)]
                    else:
                        lengths = [(t, 0) for t in
                                   (args.seqs or (cpu and f["cpu_seqs"]) or f["seqs"])]
                    # lib/suite/sweep.cc: --depth sweeps the decoders' generation.
                    depths = (args.depths if phase == "generate" and family in DEPTH_FAMILIES
                              else [0])
                    # The families that quantise sweep --quant in every phase
                    # (training says why it does not run).
                    quants = args.quants if f["quantizes"] else [quant.NONE]
                    axes = [(d, q, b, x, depth) for d in args.dtypes for q in quants
                            for b in batches for x in lengths for depth in depths]
                    for dtype, q, b, (first, second), depth in axes:
                        for runtime in args.runtimes:
                            s = (Spec(family, size, device, phase, b, dtype, runtime,
                                      prompt=first, new_tokens=second, depth=depth,
                                      weights=args.weights, quant=q)
                                 if phase in GENERATING_PHASES else
                                 Spec(family, size, device, phase, b, dtype, runtime,
                                      seq=first, weights=args.weights, quant=q))
                            # An epoch is one iteration (suite.cc FixedIterations).
                            s.steps = args.epochs if phase == "train_epoch" else args.steps
                            if (pattern.search(s.full_name()) is not None) != negate:
                                out.append(s)
                            if (phase != "forward" or family not in SERVING
                                    or b != batches[0]):
                                continue
                            # lib/suite/sweep.cc: one a scenario (Server: a rate).
                            for scenario in args.scenarios:
                                for qps in (args.serve_qps if scenario == "Server"
                                            else args.serve_qps[:1]):
                                    v = Spec(family, size, device, phase, args.max_batch,
                                             dtype, runtime, seq=first, weights=args.weights,
                                             quant=q)
                                    v.serve = {"scenario": scenario, "qps": qps,
                                               "max_batch": args.max_batch,
                                               "find_peak": args.find_peak and scenario == "Server"}
                                    v.steps = 1  # one LoadGen test
                                    if (pattern.search(v.full_name()) is not None) != negate:
                                        out.append(v)
    return out


# --- workloads ---------------------------------------------------------------

def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def grad_context(mode):
    return {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad,
            "grad": torch.enable_grad}[mode]()


def autocast(device, dtype):
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return torch.autocast(kind, dtype=DTYPES[dtype], enabled=dtype != "fp32")


class Refused(Exception):
    """What bench's plan refuses (a shape the model cannot take): the
    benchmark's error, in bench's words."""


def plan(spec, args):
    """What a step does, as the families' Plan* count it (lib/models/*.cc):
    {flops, tokens, samples, audio_s} a step; vision's FLOPs are counted
    when the model is built."""
    s, f = spec, spec.family
    if s.weights and f not in weights.LOADERS:  # lib/family/registry.cc
        raise Refused(f"{f} does not load --weights; the families that do: "
                      f"{', '.join(weights.LOADERS)}")
    why = quant.refusal(s.quant, s.device, DTYPES[s.dtype], s.training)  # runner.cc PlanRun
    if why:
        raise Refused(why)
    if f in LANGUAGE:
        if s.phase == "generate":
            positions = s.depth + s.prompt + s.new_tokens
            said = CONTEXT_SAID[f]
            context = (families.size_entry(f, s.size).options.max_positions if f == "GPT2"
                       else int(FAMILIES[f]["context"]))
            if positions > context:  # PlanGPT2, PlanLlama
                raise Refused(f"depth {s.depth} + prompt {s.prompt} + new tokens "
                              f"{s.new_tokens} = {positions} positions, but {said} "
                              f"{context}: lower --depth, --prompt or --new_tokens")
            return {"flops": families.generate_flops(f, s.size, s.batch, s.prompt,
                                                       s.new_tokens, s.depth),
                    "tokens": s.batch * s.new_tokens}
        fwd = families.forward_flops(f, s.size, s.batch, s.seq)
        counts = {"flops": 3 * fwd if s.training else fwd, "tokens": s.batch * s.seq}
        if s.phase == "train_epoch":  # every whole batch of the dataset
            samples = epoch_samples(args, s.batch)
            counts = {"flops": counts["flops"] * samples / s.batch,
                      "tokens": samples * s.seq, "samples": samples}
        return counts
    if f == "Encoder":
        fwd = families.encoder_forward_flops(s.size, s.batch, s.seq)
        return {"flops": 3 * fwd if s.training else fwd, "tokens": s.batch * s.seq}
    if f == "EncDec":
        if s.seq <= 1:
            raise Refused("batch must be positive and seq at least 2")
        fwd = families.encdec_forward_flops(s.size, s.batch, s.seq, s.seq - 1)
        tokens = s.batch * (2 * s.seq - 1)  # the source and the target less its last
        if s.phase == "train_epoch":
            samples = epoch_samples(args, s.batch)
            return {"flops": 3 * fwd * samples / s.batch, "tokens": tokens * samples // s.batch,
                    "samples": samples}
        return {"flops": 3 * fwd if s.training else fwd, "tokens": tokens, "samples": s.batch}
    if f == "Whisper":
        o = families.size_entry(f, s.size).options
        encode = families.whisper_encode_flops(s.size, s.batch)
        audio = WINDOW_SECONDS * s.batch
        if s.phase == "encode":
            return {"flops": encode, "samples": s.batch, "audio_s": audio}
        if s.prompt + s.new_tokens > o.text_ctx or s.new_tokens <= 0:
            raise Refused(f"prompt {s.prompt} + new tokens {s.new_tokens} = "
                        f"{s.prompt + s.new_tokens} positions, but the Whisper decoder has "
                        f"{o.text_ctx}: --new_tokens must be 1 to {o.text_ctx - s.prompt}")
        generate = families.whisper_generate_flops(s.size, s.batch, s.prompt, s.new_tokens)
        if s.phase == "generate":
            return {"flops": generate, "tokens": s.batch * s.new_tokens}
        return {"flops": encode + generate, "tokens": s.batch * s.new_tokens,
                "samples": s.batch, "audio_s": audio}
    return {}


def epoch_samples(args, batch):
    """lib/workloads/epoch.cc EpochSamples: the dataset's whole batches (one rank)."""
    return args.dataset_samples // batch * batch


class MemoryLoader:
    """lib/workloads/loader.cc with --data=memory: the dataset generated
    once as bench generates its shards (GenerateShard: each shard's tokens
    from a CPU generator seeded seed * 1000003 + shard), its whole batches
    handed over each epoch by a background thread through a queue of
    PREFETCH_BATCHES, then moved to the device (from pinned memory, without
    blocking, where the device is a GPU)."""

    def __init__(self, args, batch, sample_tokens, vocab, device):
        per_shard = max(1, (args.shard_mb << 20) // (sample_tokens * 2))
        parts = []
        for index in range(-(-args.dataset_samples // per_shard)):
            n = min(per_shard, args.dataset_samples - index * per_shard)
            gen = torch.Generator().manual_seed(args.seed * 1000003 + index)
            parts.append(torch.randint(vocab, (n, sample_tokens), generator=gen))
        self.batch, self.device = batch, device
        self.batches = args.dataset_samples // batch
        if self.batches == 0:
            raise Refused(f"--dataset_samples={args.dataset_samples} gives no whole batch of "
                        f"{batch} per rank")
        self.pin = device.startswith("cuda")
        self.memory = torch.cat(parts)[:self.batches * batch].contiguous()
        if self.pin:
            self.memory = self.memory.pin_memory()
        self.thread = None

    def start_epoch(self):
        import queue
        import threading
        self.stop()
        self.queue, self.stopping = queue.Queue(maxsize=PREFETCH_BATCHES), False
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.thread.start()

    def _produce(self):
        import queue
        items = [self.memory[b * self.batch:(b + 1) * self.batch] for b in range(self.batches)]
        for item in items + [None]:  # None: the end of the epoch
            while not self.stopping:
                try:
                    self.queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    pass

    def next(self):
        """The next batch on the device, or None at the end of the epoch."""
        host = self.queue.get()
        return None if host is None else host.to(self.device, non_blocking=self.pin)

    def stop(self):
        if self.thread is not None:
            self.stopping = True
            self.thread.join()
            self.thread = None


class Workload:
    """What one step does, as lib/workloads builds it for the phase."""

    def __init__(self, spec, args):
        self.spec = spec
        self.slowdown = args.slowdown
        self.grad_mode = args.grad_mode
        counts = plan(spec, args)
        torch.manual_seed(args.seed)
        s = spec
        overrides = families.benchmark_overrides(s.family, s.seq or None)
        model = families.build(s.family, s.size, **overrides)
        self.options = o = families.size_entry(s.family, s.size).options
        if s.weights:  # lib/models/weights.cc LoadSpecWeights
            try:
                weights.load_family_weights(
                    model, s.family, s.size, s.weights,
                    torch.float32 if s.training else DTYPES[s.dtype],
                    tied=getattr(o, "tied", False))
            except weights.BadWeights as e:  # thrown by bench's build: runner.cc's
                raise Refused(f"error: {e}")
        self.params = families.param_count(model)
        self.flops_per_step = counts.get("flops", 0)
        self.tokens_per_step = counts.get("tokens", 0)
        self.samples_per_step = counts.get("samples", 0)
        self.audio_per_step = counts.get("audio_s", 0)
        self.epochs = []
        if s.family in VISION:
            self._vision_setup(model, o, s, args)
            return
        if not s.training:
            model.to(s.device, DTYPES[s.dtype]).eval()
        else:
            model.to(s.device, torch.float32).train()
        # --quant (lib/workloads/phases.cc PrepareModel): the linear layers
        # and a tied head quantised once, outside the timed steps; what a
        # decode step reads of the weights changes by the bytes.
        self.weight_change = 0
        if not s.quant.none:
            try:
                removed, added = quant.quantize_model(model, s.quant)
            except quant.QuantError as e:  # bench's TORCH_CHECK: "LibTorch error: ..."
                raise Refused(f"PyTorch error: {e}")
            self.weight_change = added - removed
        self.model = model
        compiled = s.runtime == "compile"
        self.forward = torch.compile(model) if compiled else model
        if s.phase in TRAINER_PHASES:
            # lib/workloads/trainer.cc: AdamW(lr=1e-4), and GradScaler's
            # dynamic loss scaling in fp16 (its defaults are LossScaler's).
            self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            self.scaler = (torch.amp.GradScaler(s.device.split(":")[0])
                           if s.dtype == "fp16" else None)
        if s.family == "Whisper":
            self._whisper_setup(model, o, s, compiled)
            return
        if s.family == "Encoder":
            # LibTorch's encoder takes (T, B, d); drawn in fp32, then in the
            # inference dtype (RandomInput).
            x = torch.randn(s.seq, s.batch, o.d_model, device=s.device)
            self.inputs = x if s.training else x.to(DTYPES[s.dtype])
            self.infer = lambda: self.forward(self.inputs)
            self.loss = lambda: self.forward(self.inputs).float().pow(2).mean()
            return
        vocab = families._vocab(o)
        self.vocab = vocab
        if s.phase == "generate":
            self._generate_setup(model, vocab, s)
            return
        # A sample is the tokens a training step reads: a language model's
        # sequence and its next token, or EncDec's source then target.
        sample_tokens = 2 * s.seq if s.family == "EncDec" else s.seq + 1
        if s.phase == "train_epoch":
            self.loader = MemoryLoader(args, s.batch, sample_tokens, vocab, s.device)
            return
        self.batch = torch.randint(0, vocab, (s.batch, sample_tokens), device=s.device)
        if s.family == "EncDec":
            src, tgt = self.batch[:, :s.seq], self.batch[:, s.seq:2 * s.seq - 1]
            self.infer = lambda: self.forward(src, tgt)
        else:
            inputs = self.batch[:, :s.seq].contiguous()
            targets = self.batch[:, 1:].contiguous()
            self.infer = lambda: self.forward(inputs)
            self.serve_inputs = inputs
            self.loss = lambda: torch.nn.functional.cross_entropy(
                self.forward(inputs).reshape(-1, vocab).float(), targets.reshape(-1))

    def _vision_setup(self, model, o, s, args):
        """lib/models/vision.cc BuildClassifier: random images (drawn in
        fp32, then in the inference dtype), random labels, SGD with momentum
        0.9. FLOPs: PyTorch's counter over one image's forward, which counts
        convolutions as done directly, as bench's analytic count does."""
        from torch.utils.flop_counter import FlopCounterMode
        image = int(FAMILIES[s.family]["image"])
        self.samples_per_step = s.batch
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(torch.zeros(1, 3, image, image))
        fwd = counter.get_total_flops() * s.batch
        self.flops_per_step = 3 * fwd if s.training else fwd
        if not s.training:
            model.to(s.device, DTYPES[s.dtype]).eval()
        else:
            model.to(s.device, torch.float32).train()
        self.model = model
        self.forward = torch.compile(model) if s.runtime == "compile" else model
        images = torch.randn(s.batch, 3, image, image, device=s.device)
        inputs = images if s.training else images.to(DTYPES[s.dtype])
        targets = torch.randint(0, o.classes, (s.batch,), device=s.device)
        self.infer = lambda: self.forward(inputs)
        self.serve_inputs = inputs
        self.loss = lambda: torch.nn.functional.cross_entropy(
            self.forward(inputs).float(), targets)
        if s.phase == "train_step":
            self.optimizer = torch.optim.SGD(model.parameters(), lr=FAMILIES[s.family]["lr"],
                                             momentum=0.9)

    def _loss_of(self, batch):
        """The Trainer's loss of a batch of samples (lib/models/
        language_model.cc, encdec.cc EncDecLoss): cross-entropy of each
        position's logits against the next token."""
        s = self.spec
        if s.family == "EncDec":
            src, tgt = batch[:, :s.seq], batch[:, s.seq:]
            t = tgt.shape[1] - 1
            logits = self.forward(src, tgt[:, :t])  # predicts tgt[1:]
            return torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), tgt[:, 1:].reshape(-1))
        t = batch.shape[1] - 1
        logits = self.forward(batch[:, :t])  # (B, T, V)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, self.vocab).float(),
                                                 batch[:, 1:].reshape(-1))

    def _train(self, batch):
        """lib/workloads/trainer.cc Trainer::Step: gradients set to none,
        forward and loss under autocast, backward (scaled in fp16), the
        optimizer's step (skipped by the scaler on inf or nan)."""
        s = self.spec
        self.optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            with autocast(s.device, s.dtype):
                loss = self._loss_of(batch)
            (self.scaler.scale(loss) if self.scaler else loss).backward()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def _epoch(self):
        """lib/workloads/epoch.cc: one pass over the dataset's batches, each
        a Trainer step, timed whole (after synchronising) for epoch_N_s."""
        synchronize(self.spec.device)
        start = time.perf_counter()
        self.loader.start_epoch()
        while (batch := self.loader.next()) is not None:
            self._train(batch)
        synchronize(self.spec.device)
        self.epochs.append(time.perf_counter() - start)

    def step(self):
        s = self.spec
        started = time.perf_counter() if self.slowdown != 1 else 0
        if s.phase in ("forward", "encode"):
            with grad_context(self.grad_mode):
                self.infer()
        elif s.phase == "forward_backward":
            self.model.zero_grad(set_to_none=True)
            with torch.enable_grad():
                with autocast(s.device, s.dtype):
                    loss = self.loss()
                loss.backward()
        elif s.phase == "train_step" and s.family in VISION:
            self.optimizer.zero_grad(set_to_none=True)
            with torch.enable_grad():
                with autocast(s.device, s.dtype):
                    loss = self.loss()
                loss.backward()
            self.optimizer.step()
        elif s.phase == "train_step":
            self._train(self.batch)
        elif s.phase == "train_epoch":
            self._epoch()
        elif s.phase == "transcribe":
            with grad_context(self.grad_mode):
                self.model.generate(self.encode(self.mel), self.prompt, s.new_tokens)
        else:
            self._generate()
        if self.slowdown != 1:  # the tests' deliberately slowed step
            synchronize(s.device)
            end = time.perf_counter() + (self.slowdown - 1) * (time.perf_counter() - started)
            while time.perf_counter() < end:
                pass

    # Whisper (lib/models/whisper.cc BuildWhisper): a window of random
    # log-mel frames; generate starts from its encoder output (computed
    # here, outside the timed steps) with the self-attention cache allocated
    # once, and computes the cross-attention keys and values each time;
    # transcribe encodes, then generates with a fresh cache.
    def _whisper_setup(self, model, o, s, compiled):
        mel = torch.randn(s.batch, o.mels, o.frames, device=s.device).to(DTYPES[s.dtype])
        self.mel = mel
        self.encode = torch.compile(model.encode) if compiled else model.encode
        self.infer = lambda: self.encode(mel)
        if s.phase == "encode":
            return
        self.prompt = torch.randint(0, o.vocab, (s.batch, s.prompt), device=s.device)
        if s.phase == "transcribe":
            return
        with torch.inference_mode():
            xa = model.encode(mel)
            state = model.start(xa, s.prompt + s.new_tokens)
        decode = torch.compile(model.decode_cached) if compiled else model.decode_cached

        def prefill():
            model.compute_cross(xa, state)
            return decode(self.prompt, 0, state)
        self.prefill, self.decode = prefill, lambda t, at: decode(t, at, state)
        self.cache = [t for part in ("self", "cross") for kv in state[part] for t in kv]
        self.cache_per_position = None  # bench counts no cache reads for Whisper
        self._element_bytes(s)

    # Generation (lib/workloads/generation.cc): a prefill, then decode steps,
    # each timed after synchronising, the per-phase times summed.
    # At a depth (decoder_generation.h): the cache holds depth + prompt +
    # new positions, its first `depth` filled once here from random tokens
    # in chunks of the family's depth_chunk; every step's prompt then starts
    # at the depth.
    def _generate_setup(self, model, vocab, s):
        self.prompt = torch.randint(0, vocab, (s.batch, s.prompt), device=s.device)
        cache = model.make_cache(s.batch, s.depth + s.prompt + s.new_tokens)
        with torch.inference_mode():
            chunk = int(FAMILIES[s.family]["depth_chunk"])
            for at in range(0, s.depth, chunk):
                n = min(chunk, s.depth - at)
                model.forward_cached(torch.randint(0, vocab, (s.batch, n), device=s.device),
                                     at, cache)
        cached = (torch.compile(model.forward_cached) if s.runtime == "compile"
                  else model.forward_cached)
        self.prefill = lambda: cached(self.prompt, s.depth, cache)
        self.decode = lambda token, at: cached(token, at, cache)
        self.cache = [t for kv in cache for t in kv]
        # decoder_generation.h: a decode step reads every cached position's
        # keys and values, (B, heads, positions, hs) in every layer.
        self.cache_per_position = sum(t.nbytes / t.shape[2] for t in self.cache)
        self._element_bytes(s)

    def _element_bytes(self, s):
        element = torch.finfo(DTYPES[s.dtype]).bits // 8
        self.weight_bytes = (families.decode_weight_elements(s.family, s.size) * element
                             + self.weight_change)
        self.reset_stats()

    def _generate(self):
        s = self.spec
        with grad_context(self.grad_mode):
            marks = [time.perf_counter()]
            token = self.prefill().argmax(-1, keepdim=True)
            synchronize(s.device)
            marks.append(time.perf_counter())
            for i in range(1, s.new_tokens):
                token = self.decode(token, s.depth + s.prompt + i - 1).argmax(-1, keepdim=True)
                synchronize(s.device)
                marks.append(time.perf_counter())
        t = [b - a for a, b in zip(marks, marks[1:])]
        self.prefill_s += t[0]
        decodes = len(t) - 1
        window = min(GROWTH_WINDOW, decodes // 2)
        for i, x in enumerate(t[1:]):
            self.decode_s += x
            self.decode_steps.append(x)
            if i < window:
                self.early_s += x
            if i >= decodes - window:
                self.late_s += x
        self.steps += 1

    def evaluate(self):
        """GenerateWorkload::Evaluate: one generation's new tokens (B, N)."""
        s = self.spec
        with torch.inference_mode():
            tokens = [self.prefill().argmax(-1, keepdim=True)]
            for i in range(1, s.new_tokens):
                tokens.append(self.decode(tokens[-1], s.depth + s.prompt + i - 1)
                              .argmax(-1, keepdim=True))
        return torch.cat(tokens, 1)

    def reset_stats(self):
        self.prefill_s = self.decode_s = self.early_s = self.late_s = 0.0
        self.decode_steps = []
        self.steps = 0
        self.epochs = []

    def counters(self):
        """The workload's own counters: generation's (GenerateWorkload) and
        the epochs' (EpochWorkload)."""
        s = self.spec
        if s.phase == "train_epoch":
            c = {f"epoch_{i + 1}_s": t for i, t in enumerate(self.epochs)}
            if self.epochs:
                c["epoch_s"] = sum(self.epochs) / len(self.epochs)
            return c
        if s.phase == "forward" and s.family in families.DECODERS:
            # What a forward reads of the weights (C++: ModelFns::weight_bytes).
            element = torch.finfo(DTYPES[s.dtype]).bits // 8
            return {"weight_bytes": float(families.decode_weight_elements(s.family, s.size)
                                          * element + self.weight_change)}
        if s.phase != "generate" or self.steps == 0:
            return {}
        prefill = self.prefill_s / self.steps
        c = {"ttft_ms": prefill * 1e3, "pp_tok/s": s.batch * s.prompt / prefill,
             "kv_cache_bytes": float(sum(t.nbytes for t in self.cache)),
             "weight_bytes": float(self.weight_bytes)}
        if s.new_tokens > 1:
            decode = self.decode_s / self.steps
            decodes = s.new_tokens - 1
            c["tpot_ms"] = decode / decodes * 1e3
            for name, q in (("tpot_p50_ms", 0.5), ("tpot_p90_ms", 0.9), ("tpot_p99_ms", 0.99)):
                c[name] = quantile(self.decode_steps, q) * 1e3
            c["tg_tok/s"] = s.batch * decodes / decode
            c["weight_GB/s"] = self.weight_bytes * decodes / decode / 1e9
            # Step i (1..N-1) feeds the token at depth + prompt + i - 1,
            # which attends to depth + prompt + i positions.
            if self.cache_per_position is not None:  # as bench: where the cache is counted
                cache = sum(self.cache_per_position * (s.depth + s.prompt + i)
                            for i in range(1, s.new_tokens))
                c["read_GB/s"] = (self.weight_bytes * decodes + cache) / decode / 1e9
            if self.early_s > 0 and self.late_s > 0:
                c["tpot_growth_%"] = (self.late_s / self.early_s - 1) * 100
        return c


def quantile(values, q):
    """generation.cc Quantile: linear between the two nearest ranks (numpy's default)."""
    if not values:
        return 0.0
    v = sorted(values)
    rank = q * (len(v) - 1)
    lo = int(rank)
    if lo + 1 >= len(v):
        return v[lo]
    return v[lo] + (rank - lo) * (v[lo + 1] - v[lo])


# --- measuring ---------------------------------------------------------------

def timed(workload):
    synchronize(workload.spec.device)
    start = time.perf_counter()
    workload.step()
    synchronize(workload.spec.device)
    return time.perf_counter() - start


def warm_up(workload, args):
    """lib/measure/warmup.cc: at least --warmup_steps steps, and steps until
    their measured time reaches --warmup_s or twice that in wall time. The
    first step of a compiled runtime compiles: its time less the median warm
    step's is compile_s. train_epoch warms up by --warmup_epochs whole
    epochs, not by time."""
    epochs = workload.spec.phase == "train_epoch"
    count = args.warmup_epochs if epochs else args.warmup_steps
    seconds = 0.0 if epochs else args.warmup_seconds
    steps, warm, start = [], 0.0, time.perf_counter()
    while (len(steps) < count or
           (warm < seconds and time.perf_counter() - start < 2 * seconds)):
        steps.append(timed(workload))
        warm += steps[-1]
    if workload.spec.runtime == "compile":
        if len(steps) < 2:
            steps.append(timed(workload))
        rest = sorted(steps[1:])
        workload.compile_s = max(steps[0] - rest[len(rest) // 2], 0.0)
    return steps


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def run_iterations(workload, iterations):
    """One of Google Benchmark's runs: `iterations` steps, each timed (the
    manual time is their sum). Returns (seconds, step times, the process's
    CPU seconds)."""
    cpu = time.process_time()
    steps = [timed(workload) for _ in range(iterations)]
    return sum(steps), steps, time.process_time() - cpu


def repetition(workload, args, iterations):
    """One repetition by Google Benchmark's rule (BenchmarkRunner): grow the
    iterations until the manual time reaches the minimum time; a given
    iteration count (--steps, or the first repetition's) runs as it is."""
    device = workload.spec.device
    while True:
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        rss_reset = reset_peak_rss()
        workload.reset_stats()
        seconds, steps, cpu = run_iterations(workload, iterations)
        fixed = (workload.spec.steps is not None
                 or getattr(workload, "fixed_iterations", False))
        if fixed or iterations >= MAX_ITERATIONS or seconds >= args.min_time:
            workload.fixed_iterations = True
            workload.cpu_seconds = cpu
            return iterations, seconds, steps, rss_reset
        multiplier = args.min_time * 1.4 / max(seconds, 1e-9)
        if seconds / args.min_time <= 0.1:
            multiplier = 10.0
        iterations = min(max(round(multiplier * iterations), iterations + 1), MAX_ITERATIONS)


def spread(steps):
    """lib/measure/counters.cc StepSpread: nearest-rank percentiles and the CV."""
    s = sorted(steps)

    def pct(p):
        rank = math.ceil(p / 100 * len(s))
        return s[max(rank, 1) - 1] * 1e3
    out = {"step_p50_ms": pct(50), "step_p90_ms": pct(90), "step_p99_ms": pct(99)}
    mean = sum(s) / len(s)
    if len(s) > 1 and mean > 0:
        var = sum((x - mean) ** 2 for x in s) / (len(s) - 1)
        out["step_cv_%"] = 100 * math.sqrt(var) / mean
    return out


def entry(spec, reps, index, iterations, seconds, steps, workload, peaks, rss_reset):
    """One repetition as Google Benchmark's JSON reporter writes it."""
    name = spec.full_name()
    e = {"name": name, "family_index": 0, "per_family_instance_index": 0, "run_name": name,
         "run_type": "iteration", "repetitions": reps, "repetition_index": index,
         "threads": 1, "iterations": iterations,
         "real_time": seconds / iterations * 1e3,
         "cpu_time": workload.cpu_seconds / iterations * 1e3,
         "time_unit": "ms"}
    rate = iterations / seconds
    c = {"FLOP/s": workload.flops_per_step * rate, "params": float(workload.params)}
    if workload.tokens_per_step:
        c["tokens/s"] = workload.tokens_per_step * rate
    if workload.samples_per_step:
        c["samples/s"] = workload.samples_per_step * rate
    if workload.audio_per_step:
        c["audio_s/s"] = workload.audio_per_step * rate
        c["rtf"] = seconds / iterations / workload.audio_per_step  # wall time per audio second
    c.update(workload.counters())
    c.update(spread(steps[:KEPT_SAMPLES]))
    # A utilisation is never above 1: a rate past its peak (a given one, or
    # one taken from bench) leaves it out and says so in the label, as bench.
    omitted = []

    def utilisation(name, rate, peak, what):
        if rate <= peak[0]:
            c[name] = rate / peak[0]
            c[name + "_peak"] = peak[0]
        else:
            omitted.append(f"{name} left out: the rate is {rate / peak[0]:.3g} times the "
                           f"{what} peak {peak[0]:g} ({peak[1]})")

    peak = peaks.get((spec.device.split(":")[0], spec.dtype))
    if workload.flops_per_step > 0 and spec.quant.kind == "int8dyn":
        omitted.append("mfu left out: FBGEMM's dynamic int8 linear multiplies in int8, whose "
                       "peak the suite does not measure")
    elif peak and workload.flops_per_step > 0:
        utilisation("mfu", c["FLOP/s"], peak, f"{spec.dtype} FLOP/s")
    bandwidth = peaks.get((spec.device.split(":")[0], "bandwidth"))
    if bandwidth and "weight_GB/s" in c:
        # Decoding's reads: the weights and the cache (read_GB/s), as bench's mbu.
        utilisation("mbu", c.get("read_GB/s", c["weight_GB/s"]) * 1e9, bandwidth,
                    "bandwidth")
    if omitted:
        e["label"] = "; ".join(omitted)
    if getattr(workload, "compile_s", None) is not None:
        c["compile_s"] = workload.compile_s
    if spec.device.startswith("cuda"):
        c["peak_mem"] = float(torch.cuda.max_memory_allocated(spec.device))
    rss = peak_rss_bytes() if rss_reset else None
    if rss is not None:
        c["peak_rss"] = float(rss)
    e.update(sorted(c.items()))  # as Google Benchmark orders counters
    return e


def aggregates(entries):
    """Google Benchmark's mean, median, stddev and cv of the repetitions."""
    import statistics
    keys = [k for k, v in entries[0].items() if isinstance(v, float)
            and k not in ("real_time", "cpu_time")]
    out = []
    for agg in ("mean", "median", "stddev", "cv"):
        a = {k: entries[0][k] for k in ("name", "family_index", "per_family_instance_index",
                                        "run_name")}
        a.update(name=entries[0]["run_name"] + "_" + agg, run_type="aggregate",
                 repetitions=len(entries), threads=1, aggregate_name=agg,
                 aggregate_unit="percentage" if agg == "cv" else "time",
                 iterations=len(entries), time_unit="ms")
        for k in ["real_time", "cpu_time"] + keys:
            values = [e[k] for e in entries if k in e]
            if len(values) != len(entries):
                continue
            mean = statistics.fmean(values)
            if agg == "cv" and not mean:
                continue  # no number (0 / 0), left out of the row as bench does
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            a[k] = {"mean": mean, "median": statistics.median(values), "stddev": sd,
                    "cv": sd / mean if mean else 0.0}[agg]
        out.append(a)
    return out


def error_entry(spec, message):
    name = spec.full_name()
    return {"name": name, "family_index": 0, "per_family_instance_index": 0,
            "run_name": name, "run_type": "iteration", "repetitions": 1,
            "repetition_index": 0, "threads": 1, "iterations": 0, "real_time": 0.0,
            "cpu_time": 0.0, "time_unit": "ms", "error_occurred": True,
            "error_message": message}


def print_tokens(spec, workload):
    """lib/measure/warmup.cc --print_tokens: after the warm-up, the prompt's
    ids (where the workload has one) and one generation's, to stderr, a line
    a sequence."""
    name = spec.name()

    def show(what, ids):
        for row, r in enumerate(ids.cpu().long().tolist()):
            print(f"{name} {what}[{row}]: " + " ".join(str(x) for x in r), file=sys.stderr)
    prompt = workload.prompt
    if prompt is not None:
        show("prompt", prompt)
    show("tokens", workload.evaluate())
    sys.stderr.flush()


COMPILE_CACHES = {
    "shared": "Inductor's on-disk cache, as earlier runs left it",
    "fresh": "an empty Inductor cache per benchmark (torch._inductor.utils.fresh_cache), "
             "in-memory caches cleared: compile_s is a cold compile",
}


def compile_cache(spec, args):
    """The cache a compiled benchmark compiles in: a fresh, empty one with
    --compile_cache=fresh (removed after), else Inductor's own; either way
    Dynamo's compiled frames of the benchmarks before it are dropped."""
    if spec.runtime != "compile":
        return contextlib.nullcontext()
    # Dynamo keeps what it compiled on the model class's forward: the next
    # benchmark of the family would run it without compiling (compile_s 0).
    torch._dynamo.reset()
    if args.compile_cache != "fresh":
        return contextlib.nullcontext()
    from torch._inductor.utils import fresh_cache
    return fresh_cache()


def shared_cache_text():
    """Where Inductor's on-disk cache is and how many files it held when
    the run started: a compile_s over a cache that held the same graphs
    is a warm-cache time."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    where = cache_dir()
    files = sum(len(names) for _, _, names in os.walk(where))
    return f"shared: {where}, {files} files at the start"


def serve_one(spec, args):
    """One LoadGen test of the forward at the batcher's largest batch, as
    bench's serve benchmark (lib/serve), as Google Benchmark's JSON entry."""
    sv = spec.serve
    workload = Workload(spec, args)
    warm_up(workload, args)
    name = spec.full_name()
    folder = os.path.join(args.serve_log_dir,
                          spec.name().rsplit("/", 1)[0].replace("/", "_").replace(":", "-"))
    # Google Benchmark's cpu_time: the calling thread's, over the test.
    cpu = time.thread_time()
    counters, label, seconds = serve.serve(
        workload.forward, workload.serve_inputs, sv["scenario"], folder,
        target_qps=sv["qps"], latency_bound_ms=args.latency_bound_ms or 0,
        samples_per_query=args.samples_per_query, min_s=args.serve_min_s,
        min_queries=args.serve_min_queries, max_batch=sv["max_batch"],
        batch_timeout_us=args.batch_timeout_us,
        tokens_per_sample=workload.tokens_per_step / spec.batch if workload.tokens_per_step
        else 0, synchronize=lambda: synchronize(spec.device), find_peak=sv["find_peak"])
    e = {"name": name, "family_index": 0, "per_family_instance_index": 0, "run_name": name,
         "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1,
         "iterations": 1, "real_time": seconds * 1e3,
         "cpu_time": (time.thread_time() - cpu) * 1e3,
         "time_unit": "ms"}
    e.update(sorted(counters.items()))
    e["label"] = label
    del workload
    return [e]


def run_one(spec, args, peaks):
    if spec.serve:
        return serve_one(spec, args)
    workload = Workload(spec, args)
    warm_up(workload, args)
    if args.print_tokens and spec.phase == "generate":
        print_tokens(spec, workload)
    iterations = spec.steps or 1
    entries = []
    for index in range(args.benchmark_repetitions):
        iterations, seconds, steps, rss_reset = repetition(workload, args, iterations)
        entries.append(entry(spec, args.benchmark_repetitions, index, iterations, seconds,
                             steps, workload, peaks, rss_reset))
    del workload
    if spec.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return entries + (aggregates(entries) if len(entries) > 1 else [])


# --- threads, peaks, context ---------------------------------------------------

def physical_cores():
    """lib/base/threads.cc DefaultIntraOpThreads: OMP_NUM_THREADS if set,
    else the physical cores (package, core) of this process's CPUs."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores, unknown = set(), 0
    for cpu in sorted(os.sched_getaffinity(0)):
        topo = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(topo + "physical_package_id") as a, open(topo + "core_id") as b:
                cores.add((int(a.read()), int(b.read())))
        except (OSError, ValueError):
            unknown += 1
    return max(1, len(cores) + unknown)


def configure_malloc(mode):
    """bench's malloc settings: large blocks kept on the heap rather than
    unmapped on free and faulted in again at the next step."""
    if mode == "system":
        return MALLOC[mode]
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        ok = (libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1
              and libc.mallopt(M_TOP_PAD, 64 << 20) == 1)
    except (OSError, AttributeError):
        ok = False
    if not ok:
        raise BadFlag("mallopt rejected the tuned settings (not glibc?): give --malloc=system")
    return MALLOC[mode]


def configure_threads(args):
    intra = args.threads or physical_cores()
    torch.set_num_threads(intra)  # also MKL's and OpenMP's, as at::set_num_threads
    try:
        torch.set_num_interop_threads(args.interop_threads)
    except RuntimeError:
        pass  # already started: the count is fixed
    return intra


def peak_flops(args):
    """{(device kind, dtype or 'bandwidth'): (FLOP/s or bytes/s, how it was
    found)}."""
    peaks = {}
    if args.peak_bandwidth:
        for kind in ("cpu", "cuda"):
            peaks[(kind, "bandwidth")] = (args.peak_bandwidth, "given (--peak_bandwidth)")
    if args.peak_flops:
        for part in args.peak_flops.split(","):
            dtype, _, value = part.rpartition("=")
            try:
                number = float(value)
            except ValueError:
                raise BadFlag(f"--peak_flops={args.peak_flops}: expected a number or "
                          "dtype=number pairs")
            for kind in ("cpu", "cuda"):
                for d in ([dtype] if dtype else DTYPES):
                    peaks[(kind, d)] = (number, "given (--peak_flops)")
        return peaks
    if args.peaks_from:
        doc = load(args.peaks_from)
        for key, text in doc["context"].items():
            m = (re.fullmatch(r"peak_flops_(cpu|cuda)_(fp32|bf16|fp16)", key)
                 or re.fullmatch(r"peak_bandwidth_(cpu|cuda)()", key))
            value = re.match(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)", str(text))
            if m and value:
                peaks[(m[1], m[2] or "bandwidth")] = (
                    float(value[1]), f"bench's, from {args.peaks_from}: {text}")
        return peaks
    for device in args.device_list:
        kind = device.split(":")[0]
        for dtype in args.dtypes:
            a = torch.randn(2048, 2048, device=device).to(DTYPES[dtype])
            b = torch.randn(2048, 2048, device=device).to(DTYPES[dtype])
            best = math.inf
            for _ in range(5):
                synchronize(device)
                t = time.perf_counter()
                a @ b
                synchronize(device)
                best = min(best, time.perf_counter() - t)
            peaks[(kind, dtype)] = (2 * 2048 ** 3 / best, "measured: the fastest of 5 "
                                    "torch.matmul 2048x2048 (not bench's register-resident "
                                    "peak: give --peaks_from=BENCH.json for the same peak)")
    return peaks


def git_commit():
    try:
        out = subprocess.run(["git", "-C", REPO, "describe", "--always",
                              "--dirty", "--abbrev=12"], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def blas():
    config = torch.__config__.show()
    m = re.search(r"BLAS_INFO=([^,\n]+)", config)
    return (m[1].strip() if m else "unknown") + " (linked into LibTorch)"


def context(args, threads, peaks):
    grad = {"inference_mode": "inference phases under torch.inference_mode (bench: "
            "c10::InferenceMode)", "no_grad": "inference phases under torch.no_grad",
            "grad": "inference phases with autograd on"}[args.grad_mode]
    c = {
        "date": datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(
            timespec="seconds"),
        "host_name": socket.gethostname(), "executable": os.path.abspath(sys.argv[0]),
        "num_cpus": os.cpu_count(), "mhz_per_cpu": 0, "cpu_scaling_enabled": False,
        "caches": [], "load_avg": list(os.getloadavg()), "library_build_type": "release",
        "runtime": "python", "python_version": platform.python_version(),
        "torch_version": torch.__version__.split("+")[0],
        "libtorch_version": torch.__version__.split("+")[0],
        "blas": blas(), "blas_threads": str(torch.get_num_threads()),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_model": cpu_model(), "cpu_logical_cores": str(os.cpu_count()),
        "cpu_tensor_allocator": "PyTorch's default CPU allocator (no statistics: no "
                                "peak_mem on the CPU)",
        "intra_op_threads": str(threads), "inter_op_threads": str(torch.get_num_interop_threads()),
        "malloc": args.malloc_text, "grad_mode": args.grad_mode,
        "grad_mode_detail": grad + "; training phases with "
                     "autograd, AdamW(lr=1e-4) for train_step (vision: SGD, lr 0.1, "
                     "momentum 0.9)",
        "min_time": (f"{args.min_time:g} s (the default suite's)" if args.default_suite
                     and not args.min_time_given else
                     "as given (--benchmark_min_time, else Google Benchmark's 0.5 s)"),
        "warmup": f">= {args.warmup_steps} steps and >= {args.warmup_seconds:g} s",
        "seed": str(args.seed), "suite_commit": git_commit(), "sync": args.sync,
        "world_size": "1", "process_group": "none",
    }
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):  # as bench records
        if os.environ.get(var):
            c[var.lower()] = os.environ[var]
    if args.weights:  # lib/suite/suite.cc: what was loaded, by content
        c["weights"] = args.weights
        try:
            c["weights_sha256"] = weights.checkpoint_sha256(args.weights)
        except weights.BadWeights as e:
            c["weights_sha256"] = f"unreadable: {e}"
    if "compile" in args.runtimes:
        c["compile"] = ("torch.compile(model) with its defaults (Inductor); compile_s: the "
                        "first warm-up step less a warm step")
        c["compile_cache"] = (f"fresh: {COMPILE_CACHES['fresh']}"
                              if args.compile_cache == "fresh" else shared_cache_text())
    for (kind, dtype), (value, how) in sorted(peaks.items()):
        if dtype == "bandwidth":
            c[f"peak_bandwidth_{kind}"] = f"{value:.4g} bytes/s ({how})"
        else:
            c[f"peak_flops_{kind}_{dtype}"] = f"{value:.4g} FLOP/s ({how})"
    return c


# --- output --------------------------------------------------------------------

def console_line(e):
    counters = " ".join(f"{k}={human(v)}" for k, v in e.items()
                        if k in ("tokens/s", "samples/s", "audio_s/s", "FLOP/s", "mfu",
                                 "params", "step_cv_%", "compile_s", "tg_tok/s", "ttft_ms",
                                 "epoch_s"))
    if e.get("error_occurred"):
        return f"{e['name']:<70} ERROR: {e['error_message']}"
    if e.get("aggregate_name") == "cv":
        return f"{e['name']:<70} {e['real_time'] * 100:10.2f} %  {e['iterations']:8d}"
    return (f"{e['name']:<70} {e['real_time']:10.3f} ms {e['iterations']:8d} {counters}")


def pybench_main(argv):
    if argv[:1] == ["--compare"]:  # C++ beside Python under load, nothing run
        return compare_main(argv[1:])
    try:
        args = parse_flags(argv)
        selected = specs(args)
    except BadFlag as e:
        print(f"pybench: {e}", file=sys.stderr)
        return 2
    if not selected:
        print(f"pybench: --benchmark_filter={args.benchmark_filter} selects no benchmark; "
              f"families: {', '.join(FAMILIES)} (--benchmark_list_tests lists them)",
              file=sys.stderr)
        return 2
    if args.list_tests:
        print("\n".join(s.full_name() for s in selected))
        return 0
    threads = configure_threads(args)
    try:
        args.malloc_text = configure_malloc(args.malloc)
        peaks = peak_flops(args)
    except (BadFlag, BadInput) as e:
        print(f"pybench: {e}", file=sys.stderr)
        return 2
    doc = {"context": context(args, threads, peaks), "benchmarks": []}
    failed = False
    for spec in selected:
        try:
            with compile_cache(spec, args):
                entries = run_one(spec, args, peaks)
        except Refused as e:
            entries = [error_entry(spec, str(e))]
            failed = True
        except Exception as e:  # noqa: BLE001 - any failure is that benchmark's error
            entries = [error_entry(spec, f"PyTorch error: {type(e).__name__}: {e}")]
            failed = True
        doc["benchmarks"] += entries
        if args.benchmark_format == "console":
            for e in entries:
                print(console_line(e), flush=True)
    if args.benchmark_out:
        write_json(args.benchmark_out, doc)
    if args.benchmark_format == "json":
        json.dump(doc, sys.stdout, indent=2)
        print()
    return 1 if failed else 0



def main():
    sys.exit(pybench_main(sys.argv[1:]))
