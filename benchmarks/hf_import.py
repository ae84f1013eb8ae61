"""`nnx import hf` of a ~500 MB checkpoint against the time to read its bytes; peak memory.

    python benchmarks/hf_import.py [--folder /tmp/hf_import_bench] [--rounds 3]

The first run makes a Llama-shaped checkpoint (6 layers, hidden 1024, 16 heads, 4 key/value
heads, MLP 2816, vocabulary 32000, float32: about 530 MB in one model.safetensors) with
transformers' ``save_pretrained`` in the Python that has torch and transformers
(``--hf-python``, /work/hfvenv/bin/python by default); later runs reuse it. Then, in turns for
``--rounds`` rounds (medians reported), each in a fresh process:

- read: the safetensors file's bytes read once, 1 MB at a time into one buffer: what reading
  the bytes costs, nothing kept (the limit; into a new buffer of the file's size the time moves
  with the kernel's page allocation, 0.3-1.3 s here);
- copy with sha256: the bytes read, hashed and written to a new file, 1 MB at a time, in one
  thread: the least any import into a checksummed format does (no transposes, no model);
- read, zeroed buffer: into one ``bytearray`` of the file's size (which Python fills with zeros
  first), as earlier measurements read it;
- load: ``safetensors.numpy.load_file`` (what reading it into memory as arrays costs: the
  fastest way here to hold the bytes);
- import: ``nnx_plugins.import_hf`` (timed around the call: Python, jax and the registry's
  start-up apart; ``nnx import hf`` adds them, about 2 s); its two parts are timed too:
  "fixed" (checking the config the converter made and building the abstract model: the same
  whatever the checkpoint's size) and "stream" (the tensors, from the source through their
  transforms and the sha256 into the checkpoint file);
- idle: the same process without the import, for its baseline peak RSS.

Peak RSS is the process's ``ru_maxrss``. The file is in the page cache for every measurement
(the first round warms it), so "read" is a memory-speed read: the strictest baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MAKE = """
import sys, torch, transformers
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
    num_hidden_layers=6, num_attention_heads=16, num_key_value_heads=4,
    max_position_embeddings=2048, tie_word_embeddings=False)
model = transformers.LlamaForCausalLM(config)
model.save_pretrained(sys.argv[1], max_shard_size="10GB")
"""

WORKERS = {
    "read": """
import os, sys, time, resource
path = sys.argv[1] + "/model.safetensors"
start = time.perf_counter()
buffer = bytearray(1 << 20)
with open(path, "rb", buffering=0) as handle:
    while handle.readinto(buffer):
        pass
seconds = time.perf_counter() - start
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""",
    "copy with sha256": """
import hashlib, os, sys, time, resource
path = sys.argv[1] + "/model.safetensors"
start = time.perf_counter()
buffer, digest = bytearray(1 << 20), hashlib.sha256()
with open(path, "rb", buffering=0) as handle, open(sys.argv[2] + ".copy", "wb") as out:
    while size := handle.readinto(buffer):
        piece = memoryview(buffer)[:size]
        digest.update(piece)
        out.write(piece)
seconds = time.perf_counter() - start
os.remove(sys.argv[2] + ".copy")
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""",
    "read, zeroed buffer": """
import os, sys, time, resource
path = sys.argv[1] + "/model.safetensors"
start = time.perf_counter()
buffer = bytearray(os.path.getsize(path))
with open(path, "rb", buffering=0) as handle:
    handle.readinto(buffer)
seconds = time.perf_counter() - start
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""",
    "load": """
import sys, time, resource
from safetensors.numpy import load_file
start = time.perf_counter()
tensors = load_file(sys.argv[1] + "/model.safetensors")
seconds = time.perf_counter() - start
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""",
    "import": """
import shutil, sys, time, resource
import nnx_plugins
from nnx_plugins import import_hf
nnx_plugins.load_train_config  # (the lazily imported names, before the clock)
nnx_plugins.default_registry().names("layer")  # (the installed packages' metadata, read once)
from nnx_plugins.pretrained import _import
parts = {}
def timed(name, function):
    def run(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            parts[name] = time.perf_counter() - begin
    return run
_import._abstract_model = timed("fixed", _import._abstract_model)
_import.write_checkpoint = timed("stream", _import.write_checkpoint)
start = time.perf_counter()
import_hf(sys.argv[1], sys.argv[2])
seconds = time.perf_counter() - start
print(parts["fixed"], parts["stream"], file=sys.stderr)
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
shutil.rmtree(sys.argv[2])
""",
    "idle": """
import sys, time, resource
import nnx_plugins
from nnx_plugins import import_hf
nnx_plugins.load_train_config
import jax, nnx_core, nnx_layers
print(0.0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""",
}


def _run(code: str, *args: str) -> tuple[float, int, list[float]]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    seconds, rss = out.stdout.split()[-2:]
    lines = out.stderr.strip().splitlines()
    try:
        parts = [float(x) for x in lines[-1].split()] if lines else []
    except ValueError:
        parts = []
    return float(seconds), int(rss) * 1024, parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default=os.path.join(tempfile.gettempdir(), "hf_import_bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hf-python", default="/work/hfvenv/bin/python")
    args = parser.parse_args()
    source = pathlib.Path(args.folder) / "llama-530mb"
    if not (source / "model.safetensors").is_file():
        subprocess.run([args.hf_python, "-c", MAKE, str(source)], check=True)
    size = (source / "model.safetensors").stat().st_size
    out = pathlib.Path(args.folder) / "imported"
    shutil.rmtree(out, ignore_errors=True)
    results: dict[str, list[tuple[float, int, list[float]]]] = {k: [] for k in WORKERS}
    _run(WORKERS["read"], str(source))  # (into the page cache)
    for _ in range(args.rounds):
        for name, code in WORKERS.items():
            results[name].append(_run(code, str(source), str(out)))
    read = statistics.median(s for s, _, _ in results["read"])
    print(f"checkpoint: {size / 1e6:.0f} MB ({source})")

    def line(name: str, seconds: float, rss: str = "") -> None:
        speed = f"{size / seconds / 1e9:.2f} GB/s, {seconds / read:.2f}x read" if seconds else ""
        print(f"{name:>20}: {seconds:7.3f} s {speed:>28}   {rss}")

    for name in WORKERS:
        rss = max(r for _, r, _ in results[name])
        line(
            name, statistics.median(s for s, _, _ in results[name]), f"peak RSS {rss / 1e6:.0f} MB"
        )
        if name == "import":
            for index, part in enumerate(("fixed", "stream")):
                line(f"({part})", statistics.median(p[index] for _, _, p in results[name]))
    print(json.dumps({k: v for k, v in results.items()}))


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"(benchmark took {time.perf_counter() - start:.0f} s)")
