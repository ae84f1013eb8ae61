"""Generation speed: decoding with the KV cache against full recomputation, tokens per second.

Run: python benchmarks/generate.py [--config examples/text_gpt.yaml] [--new 64 256]
         [--prompt 16] [--batch 1 8] [--rounds 3]

The model is the config's (random weights: speed does not depend on them), its position table
widened to ``prompt + new`` positions when it is shorter. Both paths are
`nnx_plugins.generation._decode`'s, each one compiled ``lax.scan`` over the steps:

- cached (`decode`): one position per step; attention reads the cache (a `Repeat`'s blocks
  unrolled, as `decode` does by default; with ``--scan-blocks`` also ``scan_blocks=True``);
- recomputed (`decode_by_recomputation`): the whole buffer of ``T = prompt + new`` positions
  per step (one compiled shape; causality makes the positions not yet drawn irrelevant);
- the physical limit (``benchmarks/_plain_decode.py``): the same GPT's cached decoding
  hand-written in plain JAX (pure functions of its weights, one compiled ``lax.scan``), for
  models of the example's layout.

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
from _plain_decode import plain_decode, plain_weights

import nnx_core as nnx
from nnx_plugins import build, load_config
from nnx_plugins.generation._decode import decode, decode_by_recomputation, model_max_length

CACHED, SCANNED, PLAIN, FULL = (
    "KV cache (decode)",
    "KV cache, Repeat scanned (scan_blocks=True)",
    "plain jax.jit KV cache (the limit)",
    "full recomputation",
)


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


def paths(model: Any, scan_blocks: bool) -> dict[str, Callable[[Any, int], Any]]:
    """The decoders timed: ``name -> fn(prompt ids, new tokens)``, greedy."""
    found: dict[str, Callable[[Any, int], Any]] = {
        CACHED: lambda ids, new: decode(model, ids, max_tokens=new, temperature=0.0)
    }
    if scan_blocks:
        found[SCANNED] = lambda ids, new: decode(
            model, ids, max_tokens=new, temperature=0.0, scan_blocks=True
        )
    try:
        weights = plain_weights(model)
    except (ValueError, KeyError) as error:
        print(f"(no plain decoder for this model's layout: {error!r})")
    else:
        found[PLAIN] = lambda ids, new: plain_decode(weights, ids, max_tokens=new)
    found[FULL] = lambda ids, new: decode_by_recomputation(
        model, ids, max_tokens=new, temperature=0.0
    )
    return found


def measure(
    decoders: dict[str, Callable[[Any, int], Any]],
    vocab: int,
    batch: int,
    prompt: int,
    new: int,
    rounds: int,
) -> dict[str, Any]:
    """First call and median steady seconds of each path for one batch size."""
    ids = np.random.default_rng(0).integers(0, vocab, (batch, prompt)).astype(np.int32)
    calls = {name: (lambda fn=fn: fn(ids, new)) for name, fn in decoders.items()}
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
    """'equal', or where the greedy tokens of a path first differ from the recomputation's."""
    reference = np.asarray(calls[FULL]())
    found = []
    for name, call in calls.items():
        a = np.asarray(call())
        if name != FULL and not np.array_equal(a, reference):
            row, col = np.argwhere(a != reference)[0]
            found.append(f"{name}: first at sequence {row}, position {col}")
    return "; ".join(found) if found else "equal"


def report(results: list[dict[str, Any]]) -> None:
    """One row per batch size, length and path: tokens/s, the speed-up over the recomputation,
    the predicted one, the time against the plain decoder's, and what a cached step costs
    against one position of a full pass."""
    print(
        "\n| batch | new tokens (T) | path | tokens/s | speed-up over recomputation "
        "| predicted (T) | time / plain limit | step / one position of a full pass "
        "| first call s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        batch, new, total = r["batch"], r["new"], r["prompt"] + r["new"]
        full, plain = r["steady"][FULL], r["steady"].get(PLAIN)
        for name, seconds in r["steady"].items():
            if name == FULL:
                continue
            limit = f"{seconds / plain:.2f}x" if plain else "-"
            print(
                f"| {batch} | {new} ({total}) | {name} | {batch * new / seconds:,.0f} | "
                f"{full / seconds:.1f}x | {total}x | {limit} | {total * seconds / full:.1f}x "
                f"| {r['first'][name]:.1f} |"
            )
        print(
            f"| {batch} | {new} ({total}) | {FULL} | {batch * new / full:,.0f} | 1.0x | - | - "
            f"| - | {r['first'][FULL]:.1f} |"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="examples/text_gpt.yaml")
    p.add_argument("--new", type=int, nargs="+", default=[64, 256], help="new tokens")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--scan-blocks", action="store_true", help="also time decode(..., scan_blocks=True)"
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    a = p.parse_args(argv)
    model = make_model(a.config, a.prompt + max(a.new), a.overrides)
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}; {a.config} "
        f"(max_length {model_max_length(model)}); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(f"greedy decoding after a {a.prompt}-token prompt; T = prompt + new tokens")
    vocab = int(jax.eval_shape(model, jax.ShapeDtypeStruct((1, 1), np.int32)).shape[-1])
    decoders = paths(model, a.scan_blocks)
    results = []
    for b in a.batch:
        for new in a.new:
            results.append(measure(decoders, vocab, b, a.prompt, new, a.rounds))
            print(f"  batch {b}, {new} new tokens: done", flush=True)
    report(results)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
