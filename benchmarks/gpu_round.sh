#!/usr/bin/env bash
# Issue 22's measurements on a GPU in one run of 4-5 minutes (H100/H200; every stage capped, at
# most 335 s in all plus start-up: give the run a 420 s limit), written under $OUT.
#
#   OUT=/some/folder bash benchmarks/gpu_round.sh            # on the GPU machine
#   OUT=/tmp/round TINY=1 JAX_PLATFORMS=cpu bash benchmarks/gpu_round.sh   # a CPU smoke test
#
# Stages, most important first, each under its own time limit (a stage cut short keeps what it
# wrote: the JSON files are rewritten as figures come in); $OUT/stages.txt lists each stage's
# exit status and seconds (124: its limit was reached).
#  1. train_step: the MLP train step at depths 5 and 20, ours against the donated plain step,
#     with the per-step device copies (HLO copy ops, arrays copied before the call, refused
#     donations) and a jax.profiler trace of 20 steps of each, summarised per op name and
#     timeline in $OUT/profile/depth*_{ours,plain}.md (the device's own timings of the copies;
#     KEEP_TRACES=1 keeps the raw traces beside them).
#  2. deep_compile first call (trace + compile, one fresh process per variant; 1 round, not the
#     median of 3 of the CPU table) at 12 blocks: ours unrolled, Repeat, Repeat(remat=True) and
#     the plain lax.scan, with each process's memory_stats() peak (remat against unrolled);
#  3. the same at 48 blocks for the stacked variants (flat in depth?);
#  4. steady step at 12 blocks, all six variants; 5. at 48 blocks, the stacked ones;
#  6. first calls at 24 blocks, if there is time left.
set -u
: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
if [ -n "${TINY:-}" ]; then  # a smoke test: tiny shapes, few steps
  SHAPE=(--width 32 --seq 16 --batch 2); D1=2; D2=3; D3=4; TS=(--depths 2 --steps 5 --repeats 1)
  LIMIT_SCALE=1
else
  SHAPE=(); D1=12; D2=24; D3=48; TS=(--depths 5 20 --steps 200 --repeats 5)
  LIMIT_SCALE=1
fi
START=$(date +%s)
stage() {  # stage NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  echo "== $name (limit ${limit}s): $*" | tee -a "$OUT/stages.txt"
  timeout "$((limit * LIMIT_SCALE))" "$@" >"$OUT/$name.txt" 2>&1
  rc=$?
  echo "   rc=$rc, $(($(date +%s) - t0)) s (at $(($(date +%s) - START)) s)" | tee -a "$OUT/stages.txt"
  tail -n 4 "$OUT/$name.txt"
}
{
  date -u
  nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  $PY -c 'import jax; d = jax.devices()[0]; print(jax.__version__, d.platform, d.device_kind, len(jax.devices()))'
  git log -1 --format='%h %s' 2>/dev/null
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
DC=benchmarks/deep_compile.py
stage 1_train_step 60 $PY benchmarks/train_step.py "${TS[@]}" --no-flax \
  --json "$OUT/train_step.json" --profile "$OUT/profile"
if [ -z "${KEEP_TRACES:-}" ] && [ -d "$OUT/profile" ]; then  # keep the summaries, not the raw traces
  find "$OUT/profile" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
fi
stage 2_first_call_d$D1 80 $PY $DC --depths $D1 --rounds 1 --no-steady "${SHAPE[@]}" \
  --first-variants ours-unrolled ours-repeat ours-repeat-remat plain-scan \
  --json "$OUT/first_call_d$D1.json"
stage 3_first_call_d$D3 50 $PY $DC --depths $D3 --rounds 1 --no-steady "${SHAPE[@]}" \
  --first-variants ours-repeat ours-repeat-remat plain-scan --json "$OUT/first_call_d$D3.json"
stage 4_steady_d$D1 90 $PY $DC --depths $D1 --rounds 0 --steps 5 --repeats 3 "${SHAPE[@]}" \
  --json "$OUT/steady_d$D1.json"
stage 5_steady_d$D3 45 $PY $DC --depths $D3 --rounds 0 --steps 5 --repeats 3 "${SHAPE[@]}" \
  --variants ours-repeat ours-repeat-remat flax-scan plain-scan --json "$OUT/steady_d$D3.json"
if [ $(($(date +%s) - START)) -lt 260 ]; then
  stage 6_first_call_d$D2 40 $PY $DC --depths $D2 --rounds 1 --no-steady "${SHAPE[@]}" \
    --first-variants ours-repeat plain-scan --json "$OUT/first_call_d$D2.json"
fi
echo "done in $(($(date +%s) - START)) s" | tee -a "$OUT/stages.txt"
