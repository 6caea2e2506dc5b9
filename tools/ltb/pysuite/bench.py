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
ltb/pysuite/families.py: Transformer (forward, forward_backward, train_step,
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
by the device's clock (CUDA events on a GPU; a sub-millisecond GPU step
several to a sample, launches_per_sample), the intra-op and
BLAS threads (--threads, else OMP_NUM_THREADS, else one per physical core the
process may run on, within its cgroup's CPU quota)
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
(ltb/pysuite/weights.py), with bench's errors as that benchmark's error entry;
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
the peaks a bench run measured (its context's peak_flops_*); on a GPU bench
knows, its datasheet peaks (bench's table, from its facts), mbu's bandwidth
too; else the best of torch.matmul on 2048x2048 measured at start (the
context says which).

Exit 0 when every benchmark ran, 1 when one errored (it is in the JSON with
its message, as bench writes errors), 2 on a bad flag or a filter that
selects nothing, with the valid values.

This module is the command; its parts sit in lib/'s rooms: flags.py (the
flags), sweep.py (the benchmarks they select), runner.py (a benchmark's
run) over workloads.py (its steps), kinds.py (each family's kind: what it
builds and how its phases step), generation.py and loader.py; counters.py
(the JSON entries), peaks.py, host.py (threads, malloc) and context.py.
"""
import json
import signal
import sys

from ltb.base import BadInput, Signalled, raise_on_signals, require, write_json
from ltb.results.format import human
from ltb.results.serving import compare_main

require("torch", "numpy")  # this Python, or the project's venv, which has them

from ltb.pysuite.context import context  # noqa: E402
from ltb.pysuite.counters import error_entry  # noqa: E402
from ltb.pysuite.family import FAMILIES, Refused  # noqa: E402
from ltb.pysuite.flags import BadFlag, parse_flags  # noqa: E402
from ltb.pysuite.host import configure_fp32, configure_malloc, configure_threads  # noqa: E402
from ltb.pysuite.peaks import match_cpu_simulation, peak_flops  # noqa: E402
from ltb.pysuite.runner import compile_cache, run_one  # noqa: E402
from ltb.pysuite.sweep import specs  # noqa: E402


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


def reported(entries, aggregates_only):
    """A benchmark's entries as Google Benchmark reports them: its
    aggregates alone under --benchmark_report_aggregates_only (the file and
    the display) or --benchmark_display_aggregates_only (the display), where
    it has aggregates; else every entry."""
    aggregates = [e for e in entries if e.get("run_type") == "aggregate"]
    return aggregates if aggregates_only and aggregates else entries


def pybench_main(argv):
    if argv[:1] == ["--compare"]:  # C++ beside Python under load, nothing run
        return compare_main(argv[1:])
    simulation = match_cpu_simulation()  # before oneDNN or MKL runs anything
    try:
        args = parse_flags(argv)
        args.cpu_simulation = simulation
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
        configure_fp32(cuda=any(s.device.startswith("cuda") for s in selected))
        args.malloc_text = configure_malloc(args.malloc)
        peaks = peak_flops(args)
    except (BadFlag, BadInput) as e:
        print(f"pybench: {e}", file=sys.stderr)
        return 2
    doc = {"context": context(args, threads, peaks), "benchmarks": []}
    shown = []  # what the display (console, or JSON on stdout) reports
    failed = False
    # As bench does: a signal ends the benchmark in flight as its error and
    # the run keeps what it measured; a second one, once the handlers are
    # back, ends the process (the file is written whole or not at all).
    handlers = raise_on_signals()
    stopped = None
    try:
        for spec in selected:
            try:
                with compile_cache(spec, args):
                    entries = run_one(spec, args, peaks)
            except Signalled as e:
                stopped = e.signum
                entries = [error_entry(spec, f"interrupted by {e}: the run stopped here")]
            except Refused as e:
                entries = [error_entry(spec, str(e))]
                failed = True
            except Exception as e:  # noqa: BLE001 - any failure is that benchmark's error
                entries = [error_entry(spec, f"PyTorch error: {type(e).__name__}: {e}")]
                failed = True
            doc["benchmarks"] += reported(entries, args.report_aggregates_only)
            shown += reported(entries, args.display_aggregates_only)
            if args.benchmark_format == "console":
                for e in reported(entries, args.display_aggregates_only):
                    print(console_line(e), flush=True)
            if stopped:
                break
    except Signalled as e:  # between two benchmarks
        stopped = e.signum
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if args.benchmark_out:
        write_json(args.benchmark_out, doc)
    if args.benchmark_format == "json":
        json.dump(dict(doc, benchmarks=shown), sys.stdout, indent=2)
        print()
    if stopped:
        print(f"pybench: interrupted by {signal.Signals(stopped).name}: what was measured "
              "before it is kept", file=sys.stderr)
        return 128 + stopped
    return 1 if failed else 0


def main():
    sys.exit(pybench_main(sys.argv[1:]))
