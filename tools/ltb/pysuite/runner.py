"""How a benchmark runs (lib/measure/runner.cc, warmup.cc): its workload
built, warmed up, then Google Benchmark's iteration rule over timed steps
for each repetition; a served benchmark as one LoadGen test; a compiled
one in its own Inductor cache."""
import contextlib
import math
import os
import sys
import time

import torch

from ltb.base import raise_if_signalled
from ltb.pysuite import serve, textserve
from ltb.pysuite.counters import aggregates, entry, reset_peak_rss
from ltb.pysuite.device import synchronize
from ltb.pysuite.workloads import Workload

MAX_ITERATIONS = 1_000_000_000  # Google Benchmark's kMaxIterations
# lib/measure/timed_loop.h: a sample of an asynchronous device's steps lasts
# at least this long (shorter, and the clock's marks and the host's launch
# latency are what is timed), with at most this many steps queued in it.
MIN_SAMPLE_S = 1e-3
MAX_LAUNCHES_PER_SAMPLE = 1000


def launches_per_sample(step_seconds, asynchronous):
    """timed_loop.cc LaunchesPerSample: steps a sample for a step of
    step_seconds (its warm-up median); 1 on the host."""
    if not asynchronous or not step_seconds > 0 or step_seconds >= MIN_SAMPLE_S:
        return 1
    return min(MAX_LAUNCHES_PER_SAMPLE, math.ceil(MIN_SAMPLE_S / step_seconds))


def even_launches(launches, iterations):
    """timed_loop.cc EvenLaunches: launches a sample evened out so that
    `iterations` steps take as few extra steps as possible."""
    if launches <= 1 or iterations <= 1:
        return 1
    launches = min(launches, iterations)
    samples = -(-iterations // launches)
    return -(-iterations // samples)


def timed(workload, launches=1):
    """One sample: `launches` steps queued back to back between two marks
    of the device's clock (lib/device/timer.h StepTimer); its seconds."""
    clock = workload.clock
    clock.clear()
    clock.mark()
    for _ in range(launches):
        workload.step()
    clock.mark()
    raise_if_signalled()
    return clock.intervals()[0]


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
    # Sub-millisecond steps on a GPU are timed several to a sample, as
    # bench's (warmup.cc); the first warm-up step (lazy initialisation)
    # does not count.
    rest = sorted(steps[1:] if len(steps) > 1 else steps)
    median = rest[len(rest) // 2] if rest else 0.0
    workload.launches = launches_per_sample(
        median, workload.spec.device.startswith("cuda") and not epochs)
    return steps


def run_iterations(workload, iterations):
    """One of Google Benchmark's runs: `iterations` steps or a few more, in
    samples of the workload's launches (evened out), each sample timed (the
    manual time is their sum; KeepRunningBatch). Returns (steps run,
    seconds, each sample's seconds a step, the calling thread's CPU seconds:
    Google Benchmark's cpu_time, which bench reports, is its ThreadTimer's,
    not the process's with every intra-op thread's)."""
    launches = even_launches(getattr(workload, "launches", 1), iterations)
    workload.launches_used = launches
    cpu = time.thread_time()
    samples, seconds, done = [], 0.0, 0
    while done < iterations:
        t = timed(workload, launches)
        samples.append(t / launches)
        seconds += t
        done += launches
    return done, seconds, samples, time.thread_time() - cpu


def repetition(workload, args, iterations):
    """One repetition by Google Benchmark's rule (BenchmarkRunner): grow the
    iterations until the manual time reaches the minimum time; a given
    iteration count (--steps, or the first repetition's) runs as it is.
    Returns (the iteration count asked for, which later repetitions reuse;
    the steps run, which the entry reports; seconds; the samples' seconds a
    step; whether the peak resident set was reset)."""
    device = workload.spec.device
    while True:
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        rss_reset = reset_peak_rss()
        workload.reset_stats()
        done, seconds, steps, cpu = run_iterations(workload, iterations)
        fixed = (workload.spec.steps is not None
                 or getattr(workload, "fixed_iterations", False))
        if fixed or done >= MAX_ITERATIONS or seconds >= args.min_time:
            workload.fixed_iterations = True
            workload.cpu_seconds = cpu
            return iterations, done, seconds, steps, rss_reset
        multiplier = args.min_time * 1.4 / max(seconds, 1e-9)
        if seconds / args.min_time <= 0.1:
            multiplier = 10.0
        iterations = min(max(round(multiplier * done), done + 1), MAX_ITERATIONS)


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


def serve_one(spec, args):
    """One LoadGen test of the forward at the batcher's largest batch, as
    bench's serve benchmark (lib/serve), as Google Benchmark's JSON entry."""
    sv = spec.serve
    workload = Workload(spec, args)
    name = spec.full_name()
    folder = os.path.join(args.serve_log_dir,
                          spec.name().rsplit("/", 1)[0].replace("/", "_").replace(":", "-"))
    generate = sv["phase"] == "generate"
    if not generate:
        warm_up(workload, args)  # served generation warms up in its test, as bench's
    entries = []
    repetitions = args.benchmark_repetitions
    for index in range(repetitions):
        # One LoadGen test a repetition, as bench, each logging beside the
        # first (lib/serve/serve.cc ServeLogFolder).
        logs = folder + (f"_repetition{index}" if index else "")
        # Google Benchmark's cpu_time: the calling thread's, over the test.
        cpu = time.thread_time()
        if generate:
            # lib/serve/text_serve: continuous batching over the slots of one
            # cache, not the generate step's fixed batch.
            lengths = [(lo or hi, hi) for (lo, _), hi in ((sv["prompt"], spec.prompt),
                                                          (sv["output"], spec.new_tokens))]
            counters, label, seconds = textserve.serve_text(
                workload.model, sv["scenario"], logs, prompt=lengths[0], output=lengths[1],
                max_batch=sv["max_batch"], target_qps=sv["qps"], min_s=args.serve_min_s,
                min_queries=args.serve_min_queries, ttft_bound_ms=args.ttft_bound_ms or 100,
                tpot_bound_ms=args.tpot_bound_ms or 100, device=spec.device,
                find_peak=sv["find_peak"], prefill_chunk=sv["prefill_chunk"],
                samples_per_query=args.samples_per_query)
        else:
            counters, label, seconds = serve.serve(
                getattr(workload, "serve_forward", workload.forward), workload.serve_inputs,
                sv["scenario"], logs,
                target_qps=sv["qps"], latency_bound_ms=args.latency_bound_ms or 0,
                samples_per_query=args.samples_per_query, min_s=args.serve_min_s,
                min_queries=args.serve_min_queries, max_batch=sv["max_batch"],
                batch_timeout_us=args.batch_timeout_us,
                tokens_per_sample=workload.tokens_per_step / spec.batch
                if workload.tokens_per_step else 0,
                synchronize=lambda: synchronize(spec.device), find_peak=sv["find_peak"])
        error = serve.no_peak_error(counters, label, sv["find_peak"])
        # As Google Benchmark reports an error: its label, no counter, no time.
        entry = serve_entry(name, 0 if error else seconds, cpu, {} if error else counters,
                            label, repetitions, index)
        if error:
            entry.update(error_occurred=True, error_message=error)
        entries.append(entry)
    del workload
    measured = [e for e in entries if not e.get("error_occurred")]
    return entries + (aggregates(measured) if len(measured) > 1 else [])


def serve_entry(name, seconds, cpu, counters, label, repetitions=1, index=0):
    """A LoadGen test as Google Benchmark's JSON entry (cpu: thread_time at
    its start), repetition `index` of `repetitions`."""
    e = {"name": name, "family_index": 0, "per_family_instance_index": 0, "run_name": name,
         "run_type": "iteration", "repetitions": repetitions, "repetition_index": index,
         "threads": 1, "iterations": 1, "real_time": seconds * 1e3,
         "cpu_time": (time.thread_time() - cpu) * 1e3,
         "time_unit": "ms"}
    e.update(sorted(counters.items()))
    e["label"] = label
    return e


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
        iterations, done, seconds, steps, rss_reset = repetition(workload, args, iterations)
        entries.append(entry(spec, args.benchmark_repetitions, index, done, seconds,
                             steps, workload, peaks, rss_reset))
    del workload
    if spec.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return entries + (aggregates(entries) if len(entries) > 1 else [])


