#!/usr/bin/env bash
# The GPU figures of this round in one short run (a lent accelerator: about 8 minutes).
# Run from the repository root; each part's output goes to $OUT (default ./gpu-out), one file
# per part, so a part that runs out of time leaves the others' figures.
#   bash benchmarks/gpu_check.sh
# Parts: the sampling tests on the GPU (issue 26 section 6: top-k 1 equal to greedy); the
# decoding speed against the plain-JAX decoder (examples/text_gpt.yaml); generation of an
# imported Llama-shaped model against transformers' generate on the same GPU (issue 27); the
# ~100M GPT's memory and step on one device (issue 28); the second run from the compile cache
# (issue 29).
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python -m pip install -q --no-deps --no-build-isolation -e . -e ./examples/acme-layers \
  > "$OUT/install.txt" 2>&1 || python -m pip install -q --no-deps -e . -e ./examples/acme-layers \
  >> "$OUT/install.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/card.txt" 2>&1
python -c "import jax; print(jax.__version__, jax.devices())" >> "$OUT/card.txt" 2>&1

part() {  # part NAME SECONDS COMMAND...
  local name=$1 seconds=$2
  shift 2
  local t0=$SECONDS
  timeout "$seconds" "$@" > "$OUT/$name.txt" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/parts.txt"
}

part sampling 90 python -m pytest -q -p no:cacheprovider -p no:randomly \
  tests/nnx_plugins/generation/test_decode.py -k "top_k or sampling or greedy"
part generate 90 python benchmarks/generate.py --new 256 --batch 1 8 --rounds 3
part hf_generate 150 python benchmarks/hf_generate.py --device gpu --short \
  --torch-python "$(command -v python)"
part fsdp_gpu 60 python benchmarks/fsdp.py gpu
part second_run 80 python benchmarks/second_run.py --configs examples/text_gpt.yaml --rounds 1
