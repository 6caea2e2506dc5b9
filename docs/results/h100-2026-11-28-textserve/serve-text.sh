#!/usr/bin/env bash
# Served generation on the lent GPU: GPT2/small and Llama/1B under LoadGen,
# Server at a fixed rate long enough for LoadGen's early stopping, and
# Offline, each eager and with CUDA graphs of the decode steps.
set -u
cd "$(dirname "$0")/.."
B=${B:-.kit/prebuilt/bench}
DEV=${DEV:-cuda}
if [ "$DEV" = cuda ]; then
  T=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
  export LD_LIBRARY_PATH="$T/lib:$(ls -d "$(dirname "$T")"/nvidia/*/lib | tr '\n' ':')$PWD/.kit/usr/lib/x86_64-linux-gnu:$PWD/.kit/usr/lib"
  nvidia-smi -L
  G=${G:-small}; L=${L:-1B}; Q=${Q:-24}; N=${N:-480}; S=${S:-20}; OQ=${OQ:-64}
else
  G=nano; L=nano; Q=10; N=8; S=1; OQ=8
fi
OUT=${OUT:-/tmp/serve-text}; mkdir -p $OUT
lens=(--max_batch=8 --prompt_len=32:128 --output_len=16:64)
run() { local name=$1; shift
  timeout 120 $B --devices=$DEV --warmup_s=0.1 "${lens[@]}" "$@" \
    --serve_log_dir=/tmp/serve-logs/$name --benchmark_out=$OUT/$name.json \
    --benchmark_out_format=json 2>&1 | grep -v "^  \|^[a-z_]*: " | tail -6; }
run gpt2_server --benchmark_filter="^GPT2/$G/$DEV/serve/" --scenario=Server \
  --target_qps=$Q --serve_min_s=$S --serve_min_queries=$N --ttft_bound_ms=200 \
  --tpot_bound_ms=50 --cuda_graphs=false,true
run llama_offline --benchmark_filter="^Llama/$L/$DEV/serve/" --scenario=Offline \
  --target_qps=1 --serve_min_s=0 --serve_min_queries=$OQ --dtype=fp32,bf16 --cuda_graphs=false,true
run llama_server --benchmark_filter="^Llama/$L/$DEV/serve/" --scenario=Server \
  --target_qps=$Q --serve_min_s=$S --serve_min_queries=$N --ttft_bound_ms=200 \
  --tpot_bound_ms=50 --dtype=bf16 --cuda_graphs=false,true
tar czf $OUT/serve-text-logs.tar.gz -C /tmp serve-logs
python3 - "$OUT" <<'PY'
import json, sys, glob
keys = ("tokens/s", "samples/s", "qps_completed", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
        "tpot_p99_ms", "mean_active_slots", "decode_steps", "goodput", "valid")
for f in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    for b in json.load(open(f))["benchmarks"]:
        print(b["name"], b.get("error_message", ""), {k: round(b[k], 2) for k in keys if k in b},
              b.get("label", "")[:100])
PY
