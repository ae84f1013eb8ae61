"""Generation speed: decoding with the KV cache against full recomputation, tokens per second.

Run: python benchmarks/generate.py [--config examples/text_gpt.yaml] [--new 64 256]
         [--prompt 16] [--batch 1 8] [--rounds 3]

The model is the config's (random weights: speed does not depend on them), its position table
widened to ``prompt + new`` positions when it is shorter. Both paths are
`nnx_plugins.generation._decode`'s, each one compiled ``lax.scan`` over the steps:

- cached (`decode`): one position per step; attention reads the cache;
- recomputed (`decode_by_recomputation`): the whole buffer of ``T = prompt + new`` positions
  per step (one compiled shape; causality makes the positions not yet drawn irrelevant).

Per new token the recomputation does ``T`` positions' work where the cache does one (the
attention too: ``T`` queries against ``T`` keys, against one query against ``T`` cached keys),
so the predicted speed-up is ``T``. What it reaches depends on how a one-position step uses the
machine against a ``T``-position pass: the last column gives a cached step's time over the time
of one position of a full pass (``T * cached / recomputed``), so speed-up = ``T`` / that. The
greedy tokens of both are compared first; where they differ (on a GPU the default matmul
precision, TF32, rounds the two paths' differently shaped products differently, and random
weights give near ties) the comparison is repeated under
``jax.default_matmul_precision("highest")``. Timings are medians over rounds (the two paths
taking turns), compilation excluded (the first call is reported apart).
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
    agreement = {"default": same_tokens(calls)}
    if agreement["default"] != "equal":  # e.g. a GPU's TF32 matmuls: retry in full float32
        with jax.default_matmul_precision("highest"):
            agreement["highest"] = same_tokens(calls)
    print(f"  batch {batch}, {new} new tokens: greedy tokens of both paths {agreement}")
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        order = list(calls) if r % 2 == 0 else list(reversed(calls))
        for name in order:
            samples[name].append(timed(calls[name]))
    steady = {name: statistics.median(v) for name, v in samples.items()}
    return {"first": first, "steady": steady, "batch": batch, "prompt": prompt, "new": new}


def same_tokens(calls: dict[str, Callable[[], Any]]) -> str:
    """'equal', or where the greedy tokens of the two paths first differ."""
    a, b = (np.asarray(call()) for call in calls.values())
    if np.array_equal(a, b):
        return "equal"
    row, col = np.argwhere(a != b)[0]
    return f"differ first at sequence {row}, position {col} ({int((a != b).sum())} tokens)"


def report(results: list[dict[str, Any]]) -> None:
    """One row per batch size and length: tokens/s of both paths, the speed-up, the predicted
    one, and what a cached step costs against one position of a full pass."""
    print(
        "\n| batch | new tokens (T) | KV cache tokens/s | recomputation tokens/s | speed-up "
        "| predicted (T) | cached step / one position of a full pass | first call s, cached "
        "/ recomputed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        batch, new, total = r["batch"], r["new"], r["prompt"] + r["new"]
        cached, full = (r["steady"][name] for name in PATHS)
        first = " / ".join(f"{r['first'][name]:.1f}" for name in PATHS)
        print(
            f"| {batch} | {new} ({total}) | {batch * new / cached:,.0f} | "
            f"{batch * new / full:,.0f} | {full / cached:.1f}x | {total}x | "
            f"{total * cached / full:.1f}x | {first} |"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="examples/text_gpt.yaml")
    p.add_argument("--new", type=int, nargs="+", default=[64, 256], help="new tokens")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    a = p.parse_args(argv)
    model = make_model(a.config, a.prompt + max(a.new), a.overrides)
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}; {a.config} "
        f"(max_length {model_max_length(model)}); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(f"greedy decoding after a {a.prompt}-token prompt; T = prompt + new tokens")
    results = []
    for b in a.batch:
        for new in a.new:
            results.append(measure(model, b, a.prompt, new, a.rounds))
            print(f"  batch {b}, {new} new tokens: done", flush=True)
    report(results)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
