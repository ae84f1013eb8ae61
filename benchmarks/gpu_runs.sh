#!/usr/bin/env bash
# The run registry's GPU figures (docs/performance.md) in one call of about five minutes:
# generation with the KV cache against the plain-JAX limit and full recomputation (batch 1 to
# 256), then the test suite on the GPU. `train.precision` float32 against bfloat16 is
# `RUN_STEP=1`. Every table goes to "$OUT/runs.txt" (and to stdout), the suite's summary to
# "$OUT/suite.txt".
#
#   OUT=/tmp/gpu bash benchmarks/gpu_runs.sh
#
# Every stage is bounded by `timeout` so one slow part cannot take the others' time.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to a folder for the tables}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

run() {  # run NAME SECONDS COMMAND...
  local name=$1 seconds=$2 t0=$SECONDS
  shift 2
  echo "== $name: $* (at most ${seconds}s)" | tee -a "$OUT/runs.txt"
  timeout "$seconds" "$@" 2>&1 | tee -a "$OUT/runs.txt"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/runs.txt"
}

"$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" | tee -a "$OUT/runs.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$OUT/runs.txt"
if [ -n "${RUN_STEP:-}" ]; then
  run run_step 60 "$PY" benchmarks/run_step.py --steps 100 --repeats 3
fi
run generate 150 "$PY" benchmarks/generate.py --rounds 3 --batch 1 8 64 256 --new 256 \
  --prompt 16 --scan-blocks
if [ -z "${NO_SUITE:-}" ]; then
  echo "== suite (at most 240 s)" | tee -a "$OUT/runs.txt"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 240 "$PY" -m pytest -q -n 8 -p no:randomly \
    --no-header -rf --continue-on-collection-errors tests >"$OUT/suite.txt" 2>&1
  echo "== suite: exit $? after ${SECONDS} s in all" | tee -a "$OUT/runs.txt"
  tail -n 25 "$OUT/suite.txt"
fi
