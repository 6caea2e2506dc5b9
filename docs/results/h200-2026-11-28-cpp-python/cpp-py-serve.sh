#!/usr/bin/env bash
# Served generation, C++ (bench) beside Python (tools/pybench) through the
# same LoadGen: GPT2/small fp32 eager, Offline (64 requests) twice each,
# alternated, C++ first, then Server at 24 QPS for 20 s each; and the plain
# generate phase at batch 8 of both, for the ratio without a server.
set -u
cd "$(dirname "$0")/.."
B=${B:-.kit/prebuilt/bench}
DEV=${DEV:-cuda}
PY=${PY:-python3}
if [ "$DEV" = cuda ]; then
  T=$($PY -c "import os, torch; print(os.path.dirname(torch.__file__))")
  export LD_LIBRARY_PATH="$T/lib:$(ls -d "$(dirname "$T")"/nvidia/*/lib | tr '\n' ':')$PWD/.kit/usr/lib/x86_64-linux-gnu:$PWD/.kit/usr/lib"
  G=small; Q=24; N=480; S=20; OQ=64; STEPS=20
else
  G=nano; Q=10; N=8; S=1; OQ=8; STEPS=3
fi
if ! $PY -c "import mlperf_loadgen" 2>/dev/null; then
  $PY -m pip install -q --no-deps --target /tmp/pylib .kit/wheels/mlcommons_loadgen-*.whl
  export PYTHONPATH=/tmp/pylib
fi
OUT=${OUT:-/tmp/cpp-py-serve}; mkdir -p $OUT/runs
lens=(--max_batch=8 --prompt_len=32:128 --output_len=16:64)
run() { local tool=$1 name=$2; shift 2
  local t0=$(date +%s) cmd
  if [ "$tool" = cpp ]; then cmd=($B); else cmd=($PY tools/pybench); fi
  timeout 100 "${cmd[@]}" --devices=$DEV --warmup_s=0.1 "$@" \
    --benchmark_out=$OUT/runs/$name.json --benchmark_out_format=json > $OUT/runs/$name.log 2>&1
  echo "$name: rc $? in $(( $(date +%s) - t0 )) s"; }
serve=(--benchmark_filter="^GPT2/$G/$DEV/serve/" "${lens[@]}")
for r in 1 2; do
  for tool in cpp py; do
    run $tool ${tool}_offline_$r "${serve[@]}" --scenario=Offline --target_qps=1 \
      --serve_min_s=0 --serve_min_queries=$OQ --serve_log_dir=/tmp/serve-logs/${tool}_offline_$r
  done
done
for tool in cpp py; do
  run $tool ${tool}_generate --benchmark_filter="^GPT2/$G/$DEV/generate/" --batch=8 \
    --prompt=64 --new_tokens=40 --steps=$STEPS
done
for tool in cpp py; do
  run $tool ${tool}_server "${serve[@]}" --scenario=Server --target_qps=$Q --serve_min_s=$S \
    --serve_min_queries=$N --ttft_bound_ms=200 --tpot_bound_ms=50 \
    --serve_log_dir=/tmp/serve-logs/${tool}_server
done
tar czf $OUT/runs.tar.gz -C $OUT runs
$PY - "$OUT/runs" <<'PY'
import json, sys, glob
keys = ("tokens/s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
        "mean_active_slots", "decode_steps", "prefill_share", "tpot_ms", "valid")
for f in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    try:
        doc = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e); continue
    for b in doc.get("benchmarks", []):
        print(f.split("/")[-1], b["name"].split(f"/")[3], b.get("error_message", ""),
              {k: round(b[k], 3) for k in keys if k in b}, b.get("label", "")[:60])
PY
