"""tools/pybench: the suite's benchmarks in Python with PyTorch, by bench's
method, so that C++ (LibTorch) and Python (PyTorch) results line up by name.

    tools/pybench [--benchmark_filter=REGEX] [--runtime=eager,compile | --compile]
                  [bench's flags: --devices --batch --dtype --threads ...]
    tools/pybench --compare BENCH.json PYBENCH.json   (serve results side by side)

What it runs and measures, its flags, names, exit status and which module
holds which part: docs/cpp-and-python.md ("Running both" and "The same
work, by construction"); under load, docs/serving.md."""
import json
import os
import signal
import sys

from ltb.base import (BadInput, Signalled, raise_if_signalled, raise_on_signals, require,
                      write_json)
from ltb.results.format import human
from ltb.results.serving import compare_main

require("torch", "numpy")  # this Python, or the project's venv, which has them

from ltb.pysuite.context import context  # noqa: E402
from ltb.pysuite.counters import error_entry  # noqa: E402
from ltb.pysuite.family import FAMILIES, Refused  # noqa: E402
from ltb.pysuite.flags import BadFlag, parse_flags  # noqa: E402
from ltb.pysuite.host import configure_fp32, configure_malloc, configure_threads  # noqa: E402
from ltb.pysuite.peaks import match_cpu_simulation, peak_flops  # noqa: E402
from ltb.pysuite import serve  # noqa: E402
from ltb.pysuite.runner import compile_cache, run_one  # noqa: E402
from ltb.pysuite.sweep import specs, untaken_settings  # noqa: E402


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
    try:
        simulation = match_cpu_simulation()  # before oneDNN or MKL runs anything
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
    if args.scenarios and not any(s.serve for s in selected):
        # lib/suite/suite.cc's words, as --tf32 and --cuda_graphs say theirs.
        print("pybench: --scenario adds no benchmark that the filter selects: a family serves "
              "one of its phases (forward; GPT2 and Llama generate too, Whisper encode "
              "alone; --serve_phase picks it); list what serves with the same --scenario "
              "and --benchmark_filter=/serve/ --benchmark_list_tests", file=sys.stderr)
    for said in untaken_settings(args, selected):
        print(f"pybench: {said}", file=sys.stderr)
    if args.list_tests:
        print("\n".join(s.full_name() for s in selected))
        return 0
    # As bench: a checkpoint that is not there fails before anything runs,
    # not as every loading benchmark's error.
    if args.weights and not os.path.exists(args.weights):
        print(f"pybench: --weights={args.weights}: no such file or folder; valid: a "
              ".safetensors file, a folder holding model.safetensors or "
              "model.safetensors.index.json, or such an index", file=sys.stderr)
        return 2
    try:
        threads = configure_threads(args)
        configure_fp32(cuda=any(s.device.startswith("cuda") for s in selected),
                       cpu_fp32=any(s.device == "cpu" and s.dtype == "fp32" for s in selected))
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
                raise_if_signalled()
                with compile_cache(spec, args):
                    entries = run_one(spec, args, peaks)
                raise_if_signalled()  # one whose raise a finaliser swallowed
            except Signalled as e:
                stopped = e.signum
                entries = [error_entry(spec, f"interrupted by {e}: the run stopped here")]
            except Refused as e:
                entries = [error_entry(spec, str(e))]
                failed = True
            except Exception as e:  # noqa: BLE001 - any failure is that benchmark's error
                entries = [error_entry(spec, f"PyTorch error: {type(e).__name__}: {e}")]
                failed = True
            # An entry the run made an error of (a peak search with no peak).
            failed = failed or any(e.get("error_occurred") for e in entries
                                   if stopped is None)
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
    code = pybench_main(sys.argv[1:])
    if serve.ABANDONED:  # a signal left a LoadGen test running: end as bench does
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
