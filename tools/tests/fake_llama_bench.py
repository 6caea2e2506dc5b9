"""A stand-in for llama.cpp's llama-bench in tools/vs-llamacpp's tests: it
takes the arguments llama-bench takes (-m FILE, repeatable; -p, -n, -d, -t,
-r, -ngl, -o) and, with -o json, prints what `llama-bench -o json` prints
(tools/llama-bench/README.md: a JSON array, one record a model and test,
with llama-bench.cpp's fields), in a moment.

Each -m FILE must be a GGUF file (gguf.GGUFReader reads it): its
general.file_type gives its model_type and rates, pp (a test of -p tokens
and -n 0) FAKE_LLAMA_PP (default 30) and tg (-p 0, -n tokens)
FAKE_LLAMA_TG (default 3), times 1, 2, 3, 4 for F32, BF16, Q8_0, Q4_0; with
-r R, repetition r takes that rate times 1 + 0.02 (r - (R-1)/2), and
avg_ts and stddev_ts are their mean and standard deviation, as llama-bench
computes them. A -d D > 0 puts n_depth D in the records.

FAKE_LLAMA_LOG names a file each start appends its arguments to, as a JSON
list. FAKE_LLAMA_BACKENDS is its records' backends (default CPU, as a
build for the CPU alone names them). FAKE_LLAMA_MODE=fail exits 1 with llama-bench's message for a model
it cannot load; FAKE_LLAMA_MODE=text prints its Markdown table instead.
"""
import json
import os
import statistics
import sys

import gguf

FACTORS = {gguf.LlamaFileType.ALL_F32: ("F32", 1), gguf.LlamaFileType.MOSTLY_BF16: ("BF16", 2),
           gguf.LlamaFileType.MOSTLY_Q8_0: ("Q8_0", 3), gguf.LlamaFileType.MOSTLY_Q4_0: ("Q4_0", 4)}


def parse(argv):
    opts = {"-m": [], "-p": "512", "-n": "128", "-d": "0", "-t": "4", "-r": "5", "-ngl": "99",
            "-o": "md"}
    i = 0
    while i < len(argv):
        key = argv[i]
        if key not in opts or i + 1 >= len(argv):
            print(f"error: invalid parameter for argument: {key}", file=sys.stderr)
            sys.exit(1)
        if key == "-m":
            opts["-m"].append(argv[i + 1])
        else:
            opts[key] = argv[i + 1]
        i += 2
    return opts


def record(path, type_name, size, n_prompt, n_gen, opts, rate):
    reps = int(opts["-r"])
    samples = [rate * (1 + 0.02 * (r - (reps - 1) / 2)) for r in range(reps)]
    tokens = n_prompt + n_gen
    ns = [int(tokens / s * 1e9) for s in samples]
    return {"build_commit": "fa4e000", "build_number": 1, "cpu_info": "Fake CPU",
            "gpu_info": "", "backends": os.environ.get("FAKE_LLAMA_BACKENDS", "CPU"), "model_filename": path,
            "model_type": f"llama ?B {type_name}", "model_size": size,
            "model_n_params": 187200, "n_batch": 2048, "n_ubatch": 512,
            "n_threads": int(opts["-t"]), "cpu_mask": "0x0", "cpu_strict": False, "poll": 50,
            "type_k": "f16", "type_v": "f16", "n_gpu_layers": int(opts["-ngl"]),
            "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False,
            "flash_attn": -1, "devices": "auto", "tensor_split": "0.00",
            "tensor_buft_overrides": "none", "load_mode": "mmap", "lazy_mode": "auto",
            "embeddings": False, "no_op_offload": 0, "no_host": False, "repack": True,
            "fit_target": 0, "fit_min_ctx": 0, "n_prompt": n_prompt, "n_gen": n_gen,
            "n_depth": int(opts["-d"]), "test_time": "2026-11-26T10:00:00Z",
            "avg_ns": int(statistics.mean(ns)),
            "stddev_ns": int(statistics.stdev(ns)) if reps > 1 else 0,
            "avg_ts": statistics.mean(samples),
            "stddev_ts": statistics.stdev(samples) if reps > 1 else 0.0,
            "samples_ns": ns, "samples_ts": samples}


def main(argv):
    if os.environ.get("FAKE_LLAMA_LOG"):
        with open(os.environ["FAKE_LLAMA_LOG"], "a") as f:
            f.write(json.dumps(argv) + "\n")
    opts = parse(argv)
    records = []
    for path in opts["-m"]:
        try:
            file_type = gguf.GGUFReader(path).get_field("general.file_type").contents()
            type_name, factor = FACTORS[gguf.LlamaFileType(file_type)]
        except (OSError, ValueError, KeyError, AttributeError):
            print(f"llama_model_load: error loading model: {path}", file=sys.stderr)
            print(f"main: error: failed to load model '{path}'", file=sys.stderr)
            return 1
        if os.environ.get("FAKE_LLAMA_MODE") == "fail":
            print(f"main: error: failed to load model '{path}'", file=sys.stderr)
            return 1
        size = os.path.getsize(path)
        if int(opts["-p"]):
            records.append(record(path, type_name, size, int(opts["-p"]), 0, opts, factor
                                  * float(os.environ.get("FAKE_LLAMA_PP", "30"))))
        if int(opts["-n"]):
            records.append(record(path, type_name, size, 0, int(opts["-n"]), opts, factor
                                  * float(os.environ.get("FAKE_LLAMA_TG", "3"))))
    if opts["-o"] == "json" and os.environ.get("FAKE_LLAMA_MODE") != "text":
        print(json.dumps(records, indent=2))
    else:
        print("| model | size | params | backend | threads | test | t/s |")
        for r in records:
            print(f"| {r['model_type']} | | | CPU | {r['n_threads']} | | {r['avg_ts']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
