#!/usr/bin/env bash
# Again, for a second look: Server at 24 QPS for 20 s, C++ and Python
# alternated twice, C++ first; then Python's Offline twice more.
set -u
cd "$(dirname "$0")/.."
B=${B:-.kit/prebuilt/bench}
DEV=${DEV:-cuda}
PY=${PY:-python3}
if [ "$DEV" = cuda ]; then
  T=$($PY -c "import os, torch; print(os.path.dirname(torch.__file__))")
  export LD_LIBRARY_PATH="$T/lib:$(ls -d "$(dirname "$T")"/nvidia/*/lib | tr '\n' ':')$PWD/.kit/usr/lib/x86_64-linux-gnu:$PWD/.kit/usr/lib"
  G=small; Q=24; N=480; S=20; OQ=64
else
  G=nano; Q=10; N=8; S=1; OQ=8
fi
if ! $PY -c "import mlperf_loadgen" 2>/dev/null; then
  $PY -m pip install -q --no-deps --target /tmp/pylib .kit/wheels/mlcommons_loadgen-*.whl
  export PYTHONPATH=/tmp/pylib
fi
OUT=${OUT:-/tmp/cpp-py-server2}; mkdir -p $OUT/runs2
lens=(--max_batch=8 --prompt_len=32:128 --output_len=16:64)
run() { local tool=$1 name=$2; shift 2
  local t0=$(date +%s) cmd
  if [ "$tool" = cpp ]; then cmd=($B); else cmd=($PY tools/pybench); fi
  timeout 60 "${cmd[@]}" --devices=$DEV --warmup_s=0.1 "$@" \
    --benchmark_out=$OUT/runs2/$name.json --benchmark_out_format=json > $OUT/runs2/$name.log 2>&1
  echo "$name: rc $? in $(( $(date +%s) - t0 )) s"; }
serve=(--benchmark_filter="^GPT2/$G/$DEV/serve/" "${lens[@]}")
for r in 1 2; do
  for tool in cpp py; do
    run $tool ${tool}_server_$r "${serve[@]}" --scenario=Server --target_qps=$Q --serve_min_s=$S \
      --serve_min_queries=$N --ttft_bound_ms=200 --tpot_bound_ms=50
  done
done
for r in 3 4; do
  run py py_offline_$r "${serve[@]}" --scenario=Offline --target_qps=1 --serve_min_s=0 \
    --serve_min_queries=$OQ
done
tar czf $OUT/runs2.tar.gz -C $OUT runs2
$PY - "$OUT/runs2" <<'PY'
import json, sys, glob
keys = ("tokens/s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
        "mean_active_slots", "decode_steps", "valid")
for f in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    for b in json.load(open(f)).get("benchmarks", []):
        print(f.split("/")[-1], b.get("error_message", ""),
              {k: round(b[k], 3) for k in keys if k in b}, b.get("label", "")[:60])
PY
