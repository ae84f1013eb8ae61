"""Generation speed: decoding with the KV cache against full recomputation, tokens per second.

Run: python benchmarks/generate.py [--config examples/text_gpt.yaml] [--new 256] [--prompt 16]
         [--batch 1 8] [--rounds 3]

The model is the config's (random weights: speed does not depend on them), its position table
widened to ``prompt + new`` positions when it is shorter. Both paths are
`nnx_plugins.generation._decode`'s, each one compiled ``lax.scan`` over the steps:

- cached (`decode`): one position per step; attention reads the cache;
- recomputed (`decode_by_recomputation`): the whole buffer of ``T = prompt + new`` positions
  per step (one compiled shape; causality makes the positions not yet drawn irrelevant).

Per new token the recomputation does ``T`` positions' work where the cache does one (the
attention too: ``T`` queries against ``T`` keys, against one query against ``T`` cached keys),
so the predicted speed-up is ``T``. The greedy tokens of both are checked equal first. Timings
are medians over rounds (the two paths taking turns), compilation excluded and reported apart.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import nnx_core as nnx
from nnx_plugins import build, load_config
from nnx_plugins.generation._decode import decode, decode_by_recomputation, model_max_length

PATHS: dict[str, Callable[..., Any]] = {
    "KV cache (decode)": decode,
    "full recomputation": decode_by_recomputation,
}


def widened(model_config: dict[str, Any], length: int) -> dict[str, Any]:
    """A copy of ``model_config`` whose PositionEmbed layers hold at least ``length`` positions."""
    config = copy.deepcopy(model_config)
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "PositionEmbed" and node["max_length"] < length:
                node["max_length"] = length
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return config


def make_model(config_path: str, length: int, overrides: list[str]) -> Any:
    config = load_config(config_path, overrides=overrides).to_dict()
    return build(widened(config["model"], length), rngs=nnx.Rngs(0))


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def measure(model: Any, batch: int, prompt: int, new: int, rounds: int) -> dict[str, Any]:
    """First call and median steady seconds of each path for one batch size."""
    vocab = int(jax.eval_shape(model, jax.ShapeDtypeStruct((1, 1), np.int32)).shape[-1])
    ids = np.random.default_rng(0).integers(0, vocab, (batch, prompt)).astype(np.int32)
    calls = {
        name: (lambda fn=fn: fn(model, ids, max_tokens=new, temperature=0.0))
        for name, fn in PATHS.items()
    }
    first = {name: timed(call) for name, call in calls.items()}
    tokens = {name: np.asarray(call()) for name, call in calls.items()}
    a, b = tokens.values()
    if not np.array_equal(a, b):
        raise AssertionError("the cached and the recomputed greedy tokens differ")
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        order = list(calls) if r % 2 == 0 else list(reversed(calls))
        for name in order:
            samples[name].append(timed(calls[name]))
    steady = {name: statistics.median(v) for name, v in samples.items()}
    return {"first": first, "steady": steady, "batch": batch}


def report(results: list[dict[str, Any]], prompt: int, new: int) -> None:
    total = prompt + new
    print(f"\n{new} new tokens after a {prompt}-token prompt (T = {total} positions)")
    print(
        "| batch | path | tokens/s | ms per token | first call s (compile + run) "
        "| speed-up | predicted (T) |"
    )
    print("|---|---|---|---|---|---|---|")
    for result in results:
        batch, steady = result["batch"], result["steady"]
        cached, full = steady["KV cache (decode)"], steady["full recomputation"]
        for name, seconds in steady.items():
            speedup = f"{full / cached:.1f}x" if name.startswith("KV") else "1.0x"
            print(
                f"| {batch} | {name} | {batch * new / seconds:,.0f} | "
                f"{seconds / new * 1e3:.2f} | {result['first'][name]:.1f} | {speedup} | "
                f"{total if name.startswith('KV') else 1}x |"
            )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="examples/text_gpt.yaml")
    p.add_argument("--new", type=int, default=256, help="new tokens per generation")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    a = p.parse_args(argv)
    model = make_model(a.config, a.prompt + a.new, a.overrides)
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}; {a.config} "
        f"(max_length {model_max_length(model)}); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results = [measure(model, b, a.prompt, a.new, a.rounds) for b in a.batch]
    report(results, a.prompt, a.new)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
