#!/usr/bin/env bash
# The run registry's GPU figures (docs/performance.md), in about two minutes: `nnx train`'s step
# in float32 against bfloat16, and generation with the KV cache against full recomputation. Every table goes to "$OUT/runs.txt" (and to stdout).
#
#   OUT=/tmp/gpu bash benchmarks/gpu_runs.sh
#
# Every benchmark is bounded by `timeout` so one slow part cannot take the others' time.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the tables}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

run() {  # run NAME SECONDS COMMAND...
  local name=$1 seconds=$2
  shift 2
  echo "== $name: $* (at most ${seconds}s)" | tee -a "$OUT/runs.txt"
  timeout "$seconds" "$@" 2>&1 | tee -a "$OUT/runs.txt"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc" | tee -a "$OUT/runs.txt"
}

"$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" | tee -a "$OUT/runs.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$OUT/runs.txt"
run run_step 60 "$PY" benchmarks/run_step.py --steps 100 --repeats 3
run generate 70 "$PY" benchmarks/generate.py --rounds 2 --batch 1 8 --new 256 --prompt 16
