"""A stand-in for bench in the tools' tests, so that they run without a
build: it lists and "runs" its benchmarks the way bench does, in a moment.

    Fake/ok/cpu/step/fp32      a step of FAKE_BENCH_MS (default 2) milliseconds
                               times FAKE_BENCH_SLOWDOWN (default 1), with
                               0.2% noise
    Fake/fast/cpu/step/fp32    the same at half the time
    Fake/error/cpu/step/fp32   reports an error, as SkipWithError does
    Fake/kill/cpu/step/fp32    SIGKILLs itself, as the kernel's OOM killer would
    Fake/sleep/cpu/step/fp32   sleeps FAKE_BENCH_SLEEP_S (default 60) seconds
                               first (for timeouts and interruptions)

Without a filter it runs its default suite, as bench does, with names no
filter given to it selects (shapes of its own): for each of ok, fast, error
and kill (its members, Fake/ok ...), Fake/KIND/cpu/step/batch:1/fp32 and
Fake/KIND/cpu/train/batch:1/fp32; --suite_skip=Fake/ok,... leaves members
out (only without a filter; an unknown member or all of them is refused
with exit 2, as bench does) and --list_families prints the family's suite.

Flags: --benchmark_list_tests, --benchmark_filter=REGEX (empty or none: the
default suite), --benchmark_format=json, --benchmark_out=FILE (written as
bench writes it: the context first, each entry as it finishes),
--benchmark_repetitions=N, --dtype=fp32 (another dtype is refused with exit
2, as bench does); others are ignored. The
context reports FAKE_BENCH_LIBTORCH and FAKE_BENCH_COMMIT, and a date and a
load_avg of its own. Other builds: FAKE_BENCH_ONLY, a regex, hides the
benchmarks it does not match; FAKE_BENCH_KILL, a regex, makes those it
matches SIGKILL themselves too. FAKE_BENCH_LOG names a file each start
appends FAKE_BENCH_ID and its arguments to, as a JSON list.

FAKE_BENCH_LLAMA=1 makes it a bench of Llama generation instead (for
tools/vs-llamacpp): Llama/{nano,1B}/cpu/generate/batch:1/prompt:P/new:N
[/depth:D]/DTYPE[/QUANT][/weights:STEM] for every --dtype (fp32, bf16) and
every --quant (none; int8, int8dyn, and int4 at each --quant_group G as
int4:gG) and every --cpu_linear (aten; onednn, named .../onednn), from
--prompt, --new_tokens, --depth and --weights. --quant and --quant_group
are refused as unknown flags (exit 2), as a bench without them refuses
them, unless FAKE_BENCH_QUANT=1; --cpu_linear too with
FAKE_BENCH_NO_CPU_LINEAR=1. Its counters: pp_tok/s, FAKE_BENCH_PP (default
100), and tg_tok/s, FAKE_BENCH_TG (default 10), each times 2 in bf16, times
3, 4, 5 for int8, int8dyn, int4, times 1.5 through onednn, and times 1 +
0.01 x the repetition's index. FAKE_BENCH_ERROR, a regex: the benchmarks it matches
report an error.
"""
import datetime
import json
import os
import random
import re
import signal
import sys
import time

KINDS = ("ok", "fast", "error", "kill", "sleep")
NAMES = [f"Fake/{kind}/cpu/step/fp32/manual_time" for kind in KINDS
         if re.search(os.environ.get("FAKE_BENCH_ONLY", "."), f"Fake/{kind}/")]
SUITE_KINDS = ("ok", "fast", "error", "kill")
SUITE = [f"Fake/{kind}/cpu/{phase}/batch:1/fp32/manual_time" for kind in SUITE_KINDS
         for phase in ("step", "train")
         if re.search(os.environ.get("FAKE_BENCH_ONLY", "."), f"Fake/{kind}/")]


def flag(argv, name, default=None):
    for arg in argv:
        if arg == name:
            return "true"
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def entry(name, rep, reps):
    ms = float(os.environ.get("FAKE_BENCH_MS", "2")) * float(
        os.environ.get("FAKE_BENCH_SLOWDOWN", "1")) * random.gauss(1, 0.002)
    if "/fast/" in name:
        ms /= 2
    e = {"name": name, "family_index": (NAMES + SUITE).index(name), "per_family_instance_index": 0,
         "run_name": name, "run_type": "iteration", "repetitions": reps,
         "repetition_index": rep, "threads": 1, "iterations": 25, "real_time": ms,
         "cpu_time": ms, "time_unit": "ms", "samples/s": 1000 / ms}
    if "/error/" in name:
        e.update(error_occurred=True, error_message="no such device: fake")
    return e


def main(argv):
    if os.environ.get("FAKE_BENCH_LOG"):
        with open(os.environ["FAKE_BENCH_LOG"], "a") as f:
            f.write(json.dumps([os.environ.get("FAKE_BENCH_ID", ""), *argv]) + "\n")
    print("cpu: 2 cores (fake)", file=sys.stderr)
    if os.environ.get("FAKE_BENCH_LLAMA"):
        return llama_main(argv)
    dtype = flag(argv, "--dtype", "fp32")
    if dtype != "fp32":
        print(f"bench: unknown --dtype '{dtype}' (valid: fp32)", file=sys.stderr)
        return 2
    members = [f"Fake/{kind}" for kind in SUITE_KINDS]
    if flag(argv, "--list_families"):
        print(json.dumps({"default_suite_min_time": 6, "families": [
            {"name": "Fake", "suite": [f"{kind}/" for kind in SUITE_KINDS]}]}))
        return 0
    chosen = flag(argv, "--benchmark_filter", "")
    skip = [m for m in flag(argv, "--suite_skip", "").split(",") if m]
    if chosen and skip:
        print("bench: --suite_skip leaves members out of the default suite: it goes without "
              "--benchmark_filter", file=sys.stderr)
        return 2
    for member in skip:
        if member not in members:
            print(f"bench: --suite_skip: {member} is not a member of the default suite; its "
                  f"members: {', '.join(members)}", file=sys.stderr)
            return 2
    if len(set(skip)) == len(members):
        print(f"bench: --suite_skip={','.join(skip)} leaves nothing of the default suite",
              file=sys.stderr)
        return 2
    selected = ([n for n in NAMES if re.search(chosen, n)] if chosen else
                [n for n in SUITE if "/".join(n.split("/")[:2]) not in skip])
    if flag(argv, "--benchmark_list_tests"):
        print("\n".join(selected))
        return 0
    reps = int(flag(argv, "--benchmark_repetitions", "1"))
    context = {"date": datetime.datetime.now().isoformat(), "executable": sys.argv[0],
               "num_cpus": 2, "load_avg": [random.random()], "library_build_type": "release",
               "libtorch_version": os.environ.get("FAKE_BENCH_LIBTORCH", "2.9.0"),
               "suite_commit": os.environ.get("FAKE_BENCH_COMMIT", "fa4e000")}
    out = flag(argv, "--benchmark_out")
    if out:
        # As bench writes it: what a run killed halfway leaves is readable.
        f = open(out, "w")
        f.write('{\n  "context_at_start": ' + json.dumps(context) + ',\n  "benchmarks": [')
        f.flush()
    benchmarks = []
    for name in selected:
        if "/kill/" in name or re.search(os.environ.get("FAKE_BENCH_KILL", "^$"), name):
            os.kill(os.getpid(), signal.SIGKILL)
        if "/sleep/" in name:
            time.sleep(float(os.environ.get("FAKE_BENCH_SLEEP_S", "60")))
        runs = [entry(name, rep, reps) for rep in range(reps)]
        if out:
            f.write(("," if benchmarks else "") + "\n    "
                    + ",\n    ".join(json.dumps(e) for e in runs))
            f.flush()
        benchmarks += runs
    if out:
        f.write('\n  ],\n  "context": ' + json.dumps(context) + "\n}\n")
        f.close()
        print("\n".join(e["name"] for e in benchmarks))
    else:
        print(json.dumps({"context": context, "benchmarks": benchmarks}, indent=2))
    return 0


LLAMA_DTYPES = {"fp32": 1, "bf16": 2}
LLAMA_QUANTS = {"none": 1, "int8": 3, "int8dyn": 4, "int4": 5}
LLAMA_LINEARS = {"aten": 1, "onednn": 1.5}


def llama_main(argv):
    for name in ("--quant", "--quant_group"):
        if flag(argv, name) is not None and not os.environ.get("FAKE_BENCH_QUANT"):
            print(f"bench: unknown flag '{name}'; bench flags: --depth, --dtype, ...",
                  file=sys.stderr)
            return 2
    if flag(argv, "--cpu_linear") is not None and os.environ.get("FAKE_BENCH_NO_CPU_LINEAR"):
        print("bench: unknown flag '--cpu_linear'; bench flags: --depth, --dtype, ...",
              file=sys.stderr)
        return 2
    dtypes = flag(argv, "--dtype", "fp32").split(",")
    quants = flag(argv, "--quant", "none").split(",")
    linears = flag(argv, "--cpu_linear", "aten").split(",")
    for value, valid in ([(d, LLAMA_DTYPES) for d in dtypes] + [(q, LLAMA_QUANTS) for q in quants]
                         + [(p, LLAMA_LINEARS) for p in linears]):
        if value not in valid:
            print(f"bench: unknown value '{value}' (valid: {', '.join(valid)})", file=sys.stderr)
            return 2
    depth = int(flag(argv, "--depth", "0"))
    weights = flag(argv, "--weights", "")
    stem = os.path.basename(weights.rstrip("/"))
    stem = stem[:-len(".safetensors")] if stem.endswith(".safetensors") else stem
    head = (f"cpu/generate/batch:1/prompt:{flag(argv, '--prompt', '32')}/"
            f"new:{flag(argv, '--new_tokens', '100')}" + (f"/depth:{depth}" if depth else ""))
    cases = []
    for size in ("nano", "1B"):
        for dtype in dtypes:
            for quant in quants:
                groups = flag(argv, "--quant_group", "32").split(",") if quant == "int4" else [""]
                for group, linear in [(g, p) for g in groups for p in linears]:
                    suffix = "" if quant == "none" else f"/{quant}" + (f":g{group}" if group else "")
                    suffix += "/onednn" if linear == "onednn" else ""
                    name = (f"Llama/{size}/{head}/{dtype}{suffix}"
                            + (f"/weights:{stem}" if weights else "") + "/manual_time")
                    cases.append((name, LLAMA_DTYPES[dtype] * LLAMA_QUANTS[quant]
                                  * LLAMA_LINEARS[linear]))
    cases = [c for c in cases if re.search(flag(argv, "--benchmark_filter", "."), c[0])]
    if flag(argv, "--benchmark_list_tests"):
        print("\n".join(name for name, _ in cases))
        return 0
    reps = int(flag(argv, "--benchmark_repetitions", "1"))
    benchmarks = []
    for index, (name, factor) in enumerate(cases):
        for rep in range(reps):
            e = {"name": name, "family_index": index, "per_family_instance_index": 0,
                 "run_name": name, "run_type": "iteration", "repetitions": reps,
                 "repetition_index": rep, "threads": 1, "iterations": 1, "real_time": 1000.0,
                 "cpu_time": 1000.0, "time_unit": "ms"}
            scale = factor * (1 + 0.01 * rep)
            e.update({"pp_tok/s": float(os.environ.get("FAKE_BENCH_PP", "100")) * scale,
                      "tg_tok/s": float(os.environ.get("FAKE_BENCH_TG", "10")) * scale,
                      "tokens/s": 1.0})
            if re.search(os.environ.get("FAKE_BENCH_ERROR", "^$"), name):
                e = dict(e, error_occurred=True, error_message="fake: this case failed")
            benchmarks.append(e)
    context = {"date": datetime.datetime.now().isoformat(), "executable": sys.argv[0],
               "num_cpus": 2, "library_build_type": "release", "intra_op_threads":
               int(flag(argv, "--threads", "2")),
               "libtorch_version": os.environ.get("FAKE_BENCH_LIBTORCH", "2.9.0")}
    print(json.dumps({"context": context, "benchmarks": benchmarks}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
