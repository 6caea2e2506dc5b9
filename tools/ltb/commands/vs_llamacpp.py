"""llama.cpp's llama-bench beside bench, on this machine and the same weights.

    tools/vs-llamacpp --llama-bench PATH [--size 1B] [--weights PATH] [--seed 0]
                      [--types F32,BF16,Q8_0,Q4_0] [--activations fp32,bf16]
                      [--prompt 32] [--new-tokens 16] [--depth 0] [--threads N]
                      [--repetitions 3] [--bench BIN] [--out DIR] [--save FILE]
                      [BENCH ARGUMENTS ...]

Both measure Llama/SIZE's prompt (pp) and generation (tg) tokens/s on one
checkpoint (--weights, or a random one drawn from --seed), written again as
one GGUF file a --types type; the table pairs each llama.cpp type with its
bench rows, and the ratio is bench's mean over llama.cpp's. Every other
argument goes to bench; --save FILE keeps it all as one JSON. Exit 0, or 2
on bad input. How the weights, the runs and the pairs are made, and how to
build a llama-bench: docs/models.md (tools/vs-llamacpp).
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

from ltb.base import BadInput, require, run, venv_dir, write_json
from ltb.pysuite import facts
from ltb.results.entries import collect, errors, failed
from ltb.results.names import base_name
from ltb.results.format import format_bytes, markdown_table
from ltb.bench_process.bench import (check_bench, default_bench, last_lines, list_benchmarks,
                               split_bench_args)

GGUF_TYPES = ("F32", "BF16", "Q8_0", "Q4_0")  # llama_gguf.TYPES
ACTIVATIONS = ("fp32", "bf16")
INT4_GROUP = 32  # Q4_0's block: 32 weights a scale
BUILD_HINT = (
    "to build one from the llama-cpp-python source package: `pip download --no-binary :all: "
    "--no-deps llama-cpp-python`, unpack it, and in its folder `cmake -S vendor/llama.cpp "
    "-B build -DLLAMA_CURL=OFF && cmake --build build --target llama-bench -j`, which "
    "makes build/bin/llama-bench")
OWN_FLAGS = dict(
    {"--benchmark_filter": "it measures Llama/SIZE/cpu/generate",
     "--benchmark_repetitions": "use --repetitions",
     "--new_tokens": "use --new-tokens (llama-bench's -n)",
     "--batch": "llama-bench's pp and tg run one sequence, and so does bench here (--batch=1)",
     "--dtype": "use --types and --activations", "--quant": "use --types",
     "--quant_group": "Q4_0 pairs with int4 at group 32",
     "--cpu_linear": "it runs fp32 both ways (aten and onednn) beside F32"},
    **{flag: "it reads bench's JSON itself" for flag in (
        "--benchmark_format", "--benchmark_out", "--benchmark_out_format",
        "--benchmark_list_tests")},
    # Either leaves the JSON bench prints with the aggregates alone.
    **{flag: "it averages bench's repetitions, as llama-bench does its own" for flag in (
        "--benchmark_report_aggregates_only", "--benchmark_display_aggregates_only")})


def gguf_writer():
    """ltb.pysuite.llama_gguf, imported once the arguments have been checked:
    it needs torch, numpy and gguf, which a message on bad input need not
    wait for."""
    require("numpy", "torch", "gguf")
    from ltb.pysuite import llama_gguf
    return llama_gguf


def llama_sizes():
    return [s["name"] for s in facts.family("Llama")["sizes"]]


def default_out():
    return os.path.join(os.path.dirname(venv_dir()), "vs-llamacpp")


ONEDNN = "onednn"  # the path of a row: bench's --cpu_linear=onednn, named .../onednn


def bench_rows(gguf_type, activations):
    """bench's (dtype, path) rows beside a llama.cpp type: the path is ''
    for the unquantised at::linear, onednn for oneDNN's packed linear, else
    the quantisation."""
    if gguf_type == "F32":
        return [("fp32", ""), ("fp32", ONEDNN)]
    if gguf_type == "BF16":
        return [("bf16", "")]
    if gguf_type == "Q8_0":
        return [(a, q) for q in ("int8", "int8dyn") for a in activations]
    return [(a, f"int4:g{INT4_GROUP}") for a in activations]


def row_label(dtype, quant):
    return f"{dtype}/{quant}" if quant else dtype


def bench_key(name):
    """(dtype, path) of a generation benchmark's name: path is int8, int8dyn
    or int4:gG when quantised (the part after the dtype), else onednn for
    oneDNN's packed linear, else ''."""
    parts = name.split("/")
    for i, part in enumerate(parts):
        if part in ("fp32", "bf16", "fp16"):
            rest = parts[i + 1:]
            quant = next((p for p in rest if p in ("int8", "int8dyn") or p.startswith("int4")),
                         ONEDNN if ONEDNN in rest else "")
            return part, quant
    return None, None


def comma_list(text, valid, what):
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise BadInput(f"{what} is empty; valid: {', '.join(valid)}")
    for v in values:
        if v not in valid:
            raise BadInput(f"unknown {what} value '{v}'; valid: {', '.join(valid)}")
    return [v for v in valid if v in values]


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="vs-llamacpp", description=__doc__.split("\n\n")[0], allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--llama-bench", metavar="PATH",
                        help="the llama-bench binary (required; docs/models.md says how to build one)")
    parser.add_argument("--size", default="1B",
                        help="the Llama size (default 1B; %s)" % ", ".join(llama_sizes()))
    parser.add_argument("--weights", metavar="PATH",
                        help="a safetensors checkpoint of the size (default: a random one)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the random checkpoint's seed (default 0)")
    parser.add_argument("--types", default=",".join(GGUF_TYPES),
                        help="llama.cpp's types to measure (default %(default)s)")
    parser.add_argument("--activations", default=",".join(ACTIVATIONS),
                        help="bench's dtypes beside Q8_0 and Q4_0 (default %(default)s)")
    parser.add_argument("--prompt", type=int, default=32,
                        help="prompt tokens, llama-bench's -p (default 32)")
    parser.add_argument("--new-tokens", type=int, default=16,
                        help="tokens generated one at a time, llama-bench's -n (default 16; "
                             "bench runs --new_tokens=N+1)")
    parser.add_argument("--depth", type=int, default=0,
                        help="tokens already in the cache, llama-bench's -d (default 0)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads of both (default: the CPUs this process may use, "
                             "%(default)s)")
    parser.add_argument("--repetitions", type=int, default=3,
                        help="repetitions of each measurement on both sides (default 3)")
    parser.add_argument("--bench", default=default_bench(),
                        help="the bench binary (default: build/bench/bench)")
    parser.add_argument("--out", default=default_out(), metavar="DIR",
                        help="where the checkpoint and GGUF files go (default %(default)s)")
    parser.add_argument("--save", metavar="FILE",
                        help="also write the records and the table as one JSON")
    args, bench_args = split_bench_args(parser, argv, OWN_FLAGS)
    for name in ("prompt", "new_tokens", "threads", "repetitions"):
        if getattr(args, name) < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be at least 1, "
                           f"got {getattr(args, name)}")
    if args.depth < 0 or args.seed < 0:
        raise BadInput("--depth and --seed must not be negative")
    args.types = comma_list(args.types, GGUF_TYPES, "--types")
    args.activations = comma_list(args.activations, ACTIVATIONS, "--activations")
    if args.size not in llama_sizes():
        raise BadInput(f"unknown Llama size '{args.size}'; valid: {', '.join(llama_sizes())}")
    if not args.llama_bench:
        raise BadInput(f"needs --llama-bench PATH, a llama-bench binary; {BUILD_HINT}")
    if not (os.path.isfile(args.llama_bench) and os.access(args.llama_bench, os.X_OK)):
        raise BadInput(f"--llama-bench {args.llama_bench}: no executable there; {BUILD_HINT}")
    check_bench(args.bench, "--bench")
    if args.weights and not os.path.exists(args.weights):
        raise BadInput(f"--weights {args.weights}: no such file or folder")
    return args, bench_args


def progress(message):
    print(f"vs-llamacpp: {message}", file=sys.stderr, flush=True)


def write_checkpoint(args):
    """(the checkpoint bench loads, what it is, the source its GGUF files
    record)."""
    llama_gguf = gguf_writer()
    if args.weights:
        return (args.weights, args.weights, llama_gguf.checkpoint_source(args.weights))
    checkpoint = os.path.join(args.out, f"llama-{args.size}-seed{args.seed}.safetensors")
    start = time.monotonic()
    _, written = llama_gguf.random_checkpoint(args.size, checkpoint, args.seed)
    progress(f"{'wrote' if written else 'kept'} {checkpoint}"
             + (f" ({time.monotonic() - start:.0f} s)" if written else ""))
    return (checkpoint, f"{checkpoint} (random, seed {args.seed})",
            llama_gguf.random_source(args.size, args.seed))


def write_gguf_files(args, checkpoint, source):
    """{type: GGUF path}: OUT/STEM-TYPE.gguf, STEM the checkpoint's name."""
    llama_gguf = gguf_writer()
    stem = os.path.splitext(os.path.basename(os.path.normpath(checkpoint)))[0]
    opened = None
    files = {}
    for gguf_type in args.types:
        path = os.path.join(args.out, f"{stem}-{gguf_type}.gguf")
        if opened is None and llama_gguf.gguf_source(path) != llama_gguf.file_source(
                source, gguf_type):  # read once, for every file to write
            opened, _ = llama_gguf.open_checkpoint(checkpoint, args.size)
        start = time.monotonic()
        _, written = llama_gguf.write_gguf(checkpoint, args.size, gguf_type, path, source,
                                           checkpoint=opened)
        progress(f"{'wrote' if written else 'kept'} {path}"
                 + (f" ({time.monotonic() - start:.0f} s)" if written else ""))
        files[gguf_type] = path
    return files


# ------------------------------------------------------------- llama-bench

RECORD_FIELDS = ("model_filename", "n_prompt", "n_gen", "avg_ts", "stddev_ts")
# The backends of a build that compute on the CPU; a record's `backends`
# names every other one the build has (llama-bench.cpp's get_backend).
CPU_BACKENDS = ("CPU", "BLAS")
# Older llama-bench records said so in one boolean a backend instead.
GPU_FIELDS = ("cuda", "vulkan", "kompute", "metal", "sycl", "opencl", "gpu_blas")


def accelerators(records):
    """The backends besides the CPU's that llama-bench's records name."""
    found = set()
    for r in records:
        found.update(b.strip() for b in str(r.get("backends", "")).split(","))
        found.update(f for f in GPU_FIELDS if r.get(f) is True)
    return sorted(found - set(CPU_BACKENDS) - {""})


def run_printing_json(cmd, name):
    """Runs cmd; what it printed, parsed as JSON (None where it is not JSON),
    and as text. A command that cannot start or that fails is bad input."""
    progress("running " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BadInput(f"cannot run {cmd[0]}: {e.strerror}")
    if proc.returncode != 0:
        raise BadInput(f"{name} exited with code {proc.returncode}: "
                       + last_lines(proc.stderr, 3))
    try:
        return json.loads(proc.stdout), proc.stdout
    except ValueError:
        return None, proc.stdout


def run_llama_bench(args, files):
    """llama-bench's records: {(type, 'pp' or 'tg'): record}."""
    cmd = [args.llama_bench, "-o", "json", "-r", str(args.repetitions), "-t", str(args.threads),
           "-p", str(args.prompt), "-n", str(args.new_tokens), "-ngl", "0"]
    cmd += ["-d", str(args.depth)] if args.depth else []
    for path in files.values():
        cmd += ["-m", path]
    records, printed = run_printing_json(cmd, "llama-bench")
    if not isinstance(records, list) or not all(
            isinstance(r, dict) and all(f in r for f in RECORD_FIELDS) for r in records):
        raise BadInput(f"llama-bench printed no JSON array of its records with "
                       f"{', '.join(RECORD_FIELDS)} (-o json): {printed[:200]!r}")
    # -ngl 0 keeps the weights in the CPU's memory, but ggml's scheduler
    # still sends a large batch's matrix products to a GPU backend (op
    # offload): its pp would not be the CPU's.
    others = accelerators(records)
    if others:
        raise BadInput(f"llama-bench {args.llama_bench} was built with {', '.join(others)}, "
                       "which runs a prompt's matrix products on the GPU even at -ngl 0 "
                       "(op offload), so its pp would not be the CPU's beside bench's /cpu/ "
                       f"rows; use a llama-bench built for the CPU alone: {BUILD_HINT}")
    by_path = {os.path.realpath(p): t for t, p in files.items()}
    found = {}
    for r in records:
        gguf_type = by_path.get(os.path.realpath(r["model_filename"]))
        test = ("pp" if r["n_prompt"] == args.prompt and r["n_gen"] == 0 else
                "tg" if r["n_prompt"] == 0 and r["n_gen"] == args.new_tokens else None)
        if gguf_type and test and r.get("n_depth", 0) == args.depth:
            found[(gguf_type, test)] = r
    missing = [f"{t} {test}" for t in files for test in ("pp", "tg") if (t, test) not in found]
    if missing:
        raise BadInput(f"llama-bench's JSON has no record of {', '.join(missing)}")
    return records, found


# ------------------------------------------------------------------- bench


def bench_runs(args):
    """bench's runs: (dtypes, quants, onednn), those the types ask for:
    unquantised through at::linear, fp32 through oneDNN's packed linear
    (beside F32), and quantised."""
    runs = []
    plain = [d for t, d in (("F32", "fp32"), ("BF16", "bf16")) if t in args.types]
    if plain:
        runs.append((plain, [], False))
    if "F32" in args.types:
        runs.append((["fp32"], [], True))
    quants = [q for t, qs in (("Q8_0", ("int8", "int8dyn")), ("Q4_0", ("int4",)))
              if t in args.types for q in qs]
    if quants:
        runs.append((args.activations, quants, False))
    return runs


def bench_command(args, bench_args, checkpoint, dtypes, quants, onednn=False):
    cmd = [args.bench, f"--benchmark_filter=^Llama/{args.size}/cpu/generate/",
           "--batch=1", f"--prompt={args.prompt}", f"--new_tokens={args.new_tokens + 1}",
           f"--depth={args.depth}", f"--threads={args.threads}", f"--weights={checkpoint}",
           f"--dtype={','.join(dtypes)}", f"--benchmark_repetitions={args.repetitions}"]
    if onednn:
        cmd.append(f"--cpu_linear={ONEDNN}")
    if quants:
        cmd.append(f"--quant={','.join(quants)}")
        if "int4" in quants:
            cmd.append(f"--quant_group={INT4_GROUP}")
    return cmd + bench_args


NO_QUANT = "this bench has no --quant (a build older than its quantised linears)"
NO_ONEDNN = "this bench has no --cpu_linear (a build older than its oneDNN linears)"


def check_bench_runs(args, bench_args, checkpoint):
    """The runs bench takes the arguments of (listing their benchmarks, so
    that what it refuses stops the tool before the long part), and why it
    cannot run the others: a bench without --quant or --cpu_linear runs the
    rest."""
    runs, refused = [], {}
    for dtypes, quants, onednn in bench_runs(args):
        cmd = bench_command(args, bench_args, checkpoint, dtypes, quants, onednn)
        try:
            list_benchmarks(cmd[0], cmd[1:])
        except BadInput as e:
            if onednn and "'--cpu_linear" in str(e):
                refused.update({(d, ONEDNN): NO_ONEDNN for d in dtypes})
                progress(f"{NO_ONEDNN}: bench's fp32/onednn row is left empty")
                continue
            if not (quants and "'--quant" in str(e)):
                raise
            refused.update({(d, q if q != "int4" else f"int4:g{INT4_GROUP}"): NO_QUANT
                            for d in dtypes for q in quants})
            progress(f"{NO_QUANT}: bench's rows beside Q8_0 and Q4_0 are left empty")
            continue
        runs.append((dtypes, quants, onednn))
    return runs, refused


def run_bench(args, bench_args, checkpoint, dtypes, quants, onednn=False):
    cmd = bench_command(args, bench_args, checkpoint, dtypes, quants, onednn)
    cmd.append("--benchmark_format=json")
    doc, printed = run_printing_json(cmd, "bench")
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f"bench printed no Google Benchmark JSON: {printed[:200]!r}")
    return doc


def bench_results(docs, refused):
    """{(dtype, quant): (Benchmark or None, name, error or None)}; a
    benchmark some of whose repetitions failed has the others' results and
    an error that says so."""
    out = {key: (None, None, why) for key, why in refused.items()}
    for doc in docs:
        messages = errors(doc)
        lost = collections.Counter(base_name(e) for e in doc["benchmarks"]
                                   if e.get("run_type", "iteration") == "iteration"
                                   and failed(e))
        for name, message in messages.items():
            out[bench_key(name)] = (None, name, message)
        for name, found in collect(doc).items():
            if found.has("pp_tok/s") and found.has("tg_tok/s"):
                note = None
                if lost[name]:
                    note = (f"{lost[name]} of {lost[name] + found.repetitions} repetitions "
                            f"failed ({messages[name]}): its cells are the mean of the other "
                            f"{found.repetitions}")
                out[bench_key(name)] = (found, name, note)
    return out


# ------------------------------------------------------------------- table


def mean_sd(values):
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def table(args, found, measured):
    """One row a bench row beside its llama.cpp type; `fastest` marks the
    bench row of the highest mean tg_tok/s beside each type."""
    rows = []
    for gguf_type in args.types:
        pp, tg = found[(gguf_type, "pp")], found[(gguf_type, "tg")]
        beside = []
        for dtype, quant in bench_rows(gguf_type, args.activations):
            result, name, error = measured.get((dtype, quant), (None, None, None))
            row = {"llama_cpp": gguf_type, "model_type": pp.get("model_type"),
                   "model_size": pp.get("model_size"),
                   "llama_pp": (pp["avg_ts"], pp["stddev_ts"]),
                   "llama_tg": (tg["avg_ts"], tg["stddev_ts"]),
                   "bench": row_label(dtype, quant), "name": name, "error": error,
                   "bench_pp": None, "bench_tg": None, "pp_ratio": None, "tg_ratio": None,
                   "fastest": False}
            if result is not None:
                row["bench_pp"] = mean_sd(result.values("pp_tok/s"))
                row["bench_tg"] = mean_sd(result.values("tg_tok/s"))
                row["pp_ratio"] = row["bench_pp"][0] / pp["avg_ts"] if pp["avg_ts"] else None
                row["tg_ratio"] = row["bench_tg"][0] / tg["avg_ts"] if tg["avg_ts"] else None
            elif error is None:
                row["error"] = "not measured (this bench has no such row)"
            beside.append(row)
        measured_rows = [r for r in beside if r["bench_tg"] is not None]
        if measured_rows:
            max(measured_rows, key=lambda r: r["bench_tg"][0])["fastest"] = True
        rows += beside
    return rows


def rate(cell):
    return "—" if cell is None else f"{cell[0]:.2f} ± {cell[1]:.2f}"


def ratio(value):
    return "—" if value is None else f"{value:.2f}x"


def markdown(args, rows):
    at = f" @ d{args.depth}" if args.depth else ""
    pp, tg = f"pp{args.prompt}{at}", f"tg{args.new_tokens}{at}"
    # bench decodes after its prompt, P positions deeper than llama-bench's tg.
    bench_tg = f"tg{args.new_tokens} @ d{args.depth + args.prompt}"
    headers = ["llama.cpp", f"{pp} t/s", f"{tg} t/s", "bench", f"{pp} t/s",
               f"{bench_tg} t/s", "pp bench/llama.cpp", "tg bench/llama.cpp"]
    cells = []
    for r in rows:
        size = "" if not r["model_size"] else f" ({format_bytes(r['model_size'])})"
        label = f"**{r['bench']}**" if r["fastest"] else r["bench"]
        cells.append([r["llama_cpp"] + size, rate(r["llama_pp"]), rate(r["llama_tg"]),
                      label, rate(r["bench_pp"]), rate(r["bench_tg"]),
                      ratio(r["pp_ratio"]), ratio(r["tg_ratio"])])
    return markdown_table(headers, cells)


# llama-bench's flash_attn: a bool in older builds, -1/0/1 (auto/off/on) since.
FLASH_ATTN = {-1: "auto", 0: "off", 1: "on"}  # False == 0, True == 1


def vs_llamacpp_main(argv=None):
    args, bench_args = parse_args(sys.argv[1:] if argv is None else argv)
    checkpoint, what, source = write_checkpoint(args)
    runs, refused = check_bench_runs(args, bench_args, checkpoint)
    files = write_gguf_files(args, checkpoint, source)
    records, found = run_llama_bench(args, files)
    docs = [run_bench(args, bench_args, checkpoint, *run) for run in runs]
    rows = table(args, found, bench_results(docs, refused))

    first = records[0]
    context = docs[0].get("context", {}) if docs else {}
    print(f"Llama/{args.size}, weights {what}; prompt {args.prompt}, {args.new_tokens} tokens "
          f"generated (bench --new_tokens={args.new_tokens + 1}), depth {args.depth}, "
          f"{args.threads} threads, {args.repetitions} repetitions each.")
    print(f"llama.cpp: {args.llama_bench}, build {first.get('build_commit', '?')} "
          f"({first.get('build_number', '?')}), {first.get('backends', '?')}, "
          f"{first.get('cpu_info', '?')}; K/V cache {first.get('type_k', '?')}, "
          f"flash attention {FLASH_ATTN.get(first.get('flash_attn'), '?')}.")
    print(f"bench: {args.bench}, LibTorch {context.get('libtorch_version', '?')}; rows "
          f"Llama/{args.size}/cpu/generate/batch:1/prompt:{args.prompt}/"
          f"new:{args.new_tokens + 1}" + (f"/depth:{args.depth}" if args.depth else "")
          + "/<bench>/weights:...")
    print()
    print(markdown(args, rows))
    print()
    print("t/s: mean ± standard deviation over the repetitions; the ratios are bench's "
          "mean over llama.cpp's; in bold, bench's fastest tg beside each llama.cpp type.")
    for r in rows:
        if r["error"]:
            print(f"- {r['llama_cpp']} beside bench {r['bench']}: {r['error']}")
    if args.save:
        write_json(args.save, {
            "settings": {k: v for k, v in vars(args).items()},
            "bench_args": bench_args, "checkpoint": checkpoint, "gguf": files,
            "llama_bench": records, "bench": docs,
            "table": [dict(r, llama_pp=list(r["llama_pp"]), llama_tg=list(r["llama_tg"]))
                      for r in rows]})
    return 0


def main():
    run(vs_llamacpp_main)
