"""Generation speed of an imported Llama-shaped model against transformers' ``generate``.

Run: python benchmarks/hf_generate.py [--batch 1 8] [--prompt 32] [--new 128] [--rounds 5]
         [--device cpu|gpu] [--short] [--torch-python PATH] [--work DIR]

The model is the issue's: a ``LlamaForCausalLM`` of 8 layers, hidden 512, 8 heads, 2 key/value
heads, a vocabulary of 32,000, random weights drawn by transformers with a fixed seed and saved
with ``save_pretrained`` (``_hf_torch.py make``, run by a Python that has torch; once, kept in
``--work``), then imported with ``nnx import hf``. Both sides decode the same prompts (random
token ids, no padding) greedily for ``--new`` tokens, every row to the end:

- nnx: `nnx_plugins.generation._decode.decode` (in this process): one compiled program, the
  prompt as one chunk, then one token per step with the KV cache;
- transformers: ``model.generate(ids, attention_mask=ones, max_new_tokens=N,
  min_new_tokens=N, do_sample=False)`` in float32, its KV cache, in a worker process of
  ``--torch-python`` (``_hf_torch.py serve``) that loads the model once.

The first call of each is reported apart (ours: compilation; theirs: warm-up); then the two
take turns for ``--rounds`` rounds and the medians are compared, with the load average (the
machine may be shared). Both use every core (XLA's default; torch's ``set_num_threads`` set
to ``os.cpu_count()``). The greedy tokens of both are compared: on random weights near ties
may resolve differently in float32, so the table gives how many leading tokens agree.

``--device gpu`` runs jax on its default GPU and torch on ``cuda``; ``--short`` is 32 new
tokens, 2 rounds (a quick check, e.g. on a lent GPU).
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
from typing import Any

import jax
import numpy as np
from _hf_torch import prompt_ids

HERE = pathlib.Path(__file__).resolve().parent


def torch_python(given: str | None) -> str:
    """A Python with torch and transformers: ``given``, this one if it has them, or the
    project's benchmark environment (/work/hfvenv)."""
    if given:
        return given
    probe = subprocess.run(
        [sys.executable, "-c", "import torch, transformers"], capture_output=True, check=False
    )
    return sys.executable if probe.returncode == 0 else "/work/hfvenv/bin/python"


def checkpoint(work: pathlib.Path, python: str) -> tuple[pathlib.Path, pathlib.Path]:
    """``(transformers directory, imported nnx directory)``, made once in ``work``."""
    from nnx_plugins import import_hf

    source, imported = work / "llama-hf", work / "llama-nnx"
    if not (source / "config.json").is_file():
        subprocess.run([python, str(HERE / "_hf_torch.py"), "make", str(source)], check=True)
    if not (imported / "config.yaml").is_file():
        shutil.rmtree(imported, ignore_errors=True)
        started = time.perf_counter()
        import_hf(source, imported)
        print(f"imported in {time.perf_counter() - started:.1f} s", flush=True)
    return source, imported


class Torch:
    """The transformers worker: one ``generate`` per request, timed in its own process."""

    def __init__(self, python: str, source: pathlib.Path, device: str):
        command = [python, str(HERE / "_hf_torch.py"), "serve", str(source)]
        command += ["--device", "cuda" if device == "gpu" else "cpu"]
        command += ["--threads", str(os.cpu_count() or 1)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.hello = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the transformers worker stopped; see its errors above")
        return json.loads(line)

    def generate(self, batch: int, prompt: int, new: int) -> tuple[float, np.ndarray]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"batch": batch, "prompt": prompt, "new": new}) + "\n")
        answer = self._answer()
        return answer["seconds"], np.asarray(answer["tokens"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def nnx_side(imported: pathlib.Path) -> Any:
    """``generate(batch, prompt, new) -> (seconds, tokens)`` with the imported model."""
    import nnx_plugins
    from nnx_plugins.generation._decode import decode

    model = nnx_plugins.load(imported / "checkpoint")
    model.eval()
    vocab = model.vocab_size

    def generate(batch: int, prompt: int, new: int) -> tuple[float, np.ndarray]:
        ids = prompt_ids(batch, prompt, vocab).astype(np.int32)
        start = time.perf_counter()
        tokens = jax.block_until_ready(decode(model, ids, max_tokens=new, temperature=0.0))
        return time.perf_counter() - start, np.asarray(tokens)

    return generate


def agreement(ours: np.ndarray, theirs: np.ndarray) -> str:
    """``equal``, or how many leading tokens of each row agree."""
    if np.array_equal(ours, theirs):
        return "equal"
    differs = ours != theirs
    lead = [int(np.argmax(row)) if row.any() else len(row) for row in differs]
    return f"leading tokens equal per row: {lead}"


def measure(ours: Any, torch: Torch, batch: int, prompt: int, new: int, rounds: int) -> dict:
    first = {"nnx": ours(batch, prompt, new), "transformers": torch.generate(batch, prompt, new)}
    times: dict[str, list[float]] = {"nnx": [], "transformers": []}
    loads = []
    for r in range(rounds):
        order = ("nnx", "transformers") if r % 2 == 0 else ("transformers", "nnx")
        for side in order:
            call = ours if side == "nnx" else torch.generate
            times[side].append(call(batch, prompt, new)[0])
        loads.append(os.getloadavg()[0])
    same = agreement(first["nnx"][1], first["transformers"][1])
    print(f"  batch {batch}: greedy tokens {same}", flush=True)
    return {
        "batch": batch,
        "first": {side: seconds for side, (seconds, _) in first.items()},
        "steady": {side: statistics.median(v) for side, v in times.items()},
        "rounds": times,
        "load": statistics.median(loads),
        "tokens": same,
        "new": new,
    }


def report(results: list[dict], prompt: int) -> None:
    print(
        "\n| batch | prompt + new | nnx tokens/s | transformers tokens/s | nnx / transformers "
        "| nnx first call s (compile) | transformers first call s | load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        ours = r["batch"] * r["new"] / r["steady"]["nnx"]
        theirs = r["batch"] * r["new"] / r["steady"]["transformers"]
        print(
            f"| {r['batch']} | {prompt} + {r['new']} | {ours:,.0f} | {theirs:,.0f} | "
            f"{ours / theirs:.2f}x | {r['first']['nnx']:.1f} | {r['first']['transformers']:.1f} "
            f"| {r['load']:.1f} |"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--short", action="store_true", help="32 new tokens, 2 rounds")
    p.add_argument("--torch-python", default=None, help="a Python with torch and transformers")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "nnx-hf-generate"))
    a = p.parse_args(argv)
    if a.short:
        a.new, a.rounds = 32, 2
    if a.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    python = torch_python(a.torch_python)
    source, imported = checkpoint(work, python)
    ours = nnx_side(imported)
    torch = Torch(python, source, a.device)
    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}; {torch.hello['versions']} "
        f"on {torch.hello['device']} ({torch.hello['threads']} threads); {os.cpu_count()} "
        f"cores; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    try:
        results = [measure(ours, torch, b, a.prompt, a.new, a.rounds) for b in a.batch]
    finally:
        torch.close()
    report(results, a.prompt)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
