#!/usr/bin/env bash
# Served generation after the shape warm-up: Llama/1B bf16 Offline eager and
# graphed, eager again with cuDNN's attention put last
# (TORCH_CUDNN_SDPA_DEPRIORITIZED=1), and Server at 24 QPS eager and graphed.
set -u
cd "$(dirname "$0")/.."
B=${B:-.kit/prebuilt/bench}
DEV=${DEV:-cuda}
if [ "$DEV" = cuda ]; then
  T=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
  export LD_LIBRARY_PATH="$T/lib:$(ls -d "$(dirname "$T")"/nvidia/*/lib | tr '\n' ':')$PWD/.kit/usr/lib/x86_64-linux-gnu:$PWD/.kit/usr/lib"
  L=1B; Q=24; N=480; S=20; OQ=64
else
  L=nano; Q=10; N=8; S=1; OQ=8
fi
OUT=${OUT:-/tmp/serve-verify}; mkdir -p $OUT
lens=(--max_batch=8 --prompt_len=32:128 --output_len=16:64 --dtype=bf16)
run() { local name=$1; shift
  local t0=$(date +%s)
  timeout 90 $B --devices=$DEV --warmup_s=0.1 "${lens[@]}" "$@" \
    --benchmark_filter="^Llama/$L/$DEV/serve/" \
    --serve_log_dir=/tmp/serve-logs/$name --benchmark_out=$OUT/$name.json \
    --benchmark_out_format=json > /tmp/$name.log 2>&1
  echo "$name: rc $? in $(( $(date +%s) - t0 )) s"; }
run offline --scenario=Offline --target_qps=1 --serve_min_s=0 --serve_min_queries=$OQ \
  --cuda_graphs=false,true
TORCH_CUDNN_SDPA_DEPRIORITIZED=1 run offline_nocudnn --scenario=Offline --target_qps=1 \
  --serve_min_s=0 --serve_min_queries=$OQ
run server --scenario=Server --target_qps=$Q --serve_min_s=$S --serve_min_queries=$N \
  --ttft_bound_ms=200 --tpot_bound_ms=50 --cuda_graphs=false,true
python3 - "$OUT" <<'PY'
import json, sys, glob
keys = ("tokens/s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
        "mean_active_slots", "decode_steps", "prefill_share", "goodput", "valid")
for f in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    for b in json.load(open(f)).get("benchmarks", []):
        print(f.split("/")[-1], b["name"].split("/serve/")[1].replace("/iterations:1/manual_time", ""),
              b.get("error_message", ""), {k: round(b[k], 2) for k in keys if k in b},
              b.get("label", "")[:90])
PY
