"""Decoding a deep GPT: the first call (trace, lower, compile) and the steady tokens per second
of `decode` against the hand-written plain-JAX decoder, at several depths.

Run: python benchmarks/decode_compile.py [--depths 12 24 48] [--rounds 3] [--new 64]
         [--batch 1] [--repeats 5] [--json FILE]

The model is ``examples/text_gpt.yaml``'s GPT with ``model.layers.2.count`` blocks in its
`Repeat` (random weights; the position table widened to the prompt of 16 tokens plus ``--new``),
greedy decoding. Two paths:

- ours: `nnx_plugins.generation._decode.decode` (the Repeat's blocks unrolled, their weights
  taken apart before the program by `_unroll.unstack`);
- plain: ``benchmarks/_plain_decode.py``, the same decoding hand-written in plain JAX, each
  block's weights and caches arrays of their own (the limit).

First call: each path in a fresh process (nothing compiled before it), ``--rounds`` processes
per path and depth, the paths taking turns; the phases timed apart in wall and CPU seconds (all
threads of the process): for ours the unrolling of an abstract copy ("plan") and the first
taking apart of the weights (which compiles its small program), then for both the trace, the
lowering and the compile of the decoding program, and its first run. Medians. Steady: one
process per depth holds both paths and alternates them over ``--repeats`` (the tokens of both
checked equal first); median seconds per call, every call through the public entry point
(for ours `decode`, which takes the weights apart at each call).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _plain_decode import _loop, plain_decode, plain_weights  # noqa: E402
from generate import make_model  # noqa: E402

import nnx_core as nnx  # noqa: E402
from nnx_plugins.generation import _decode  # noqa: E402
from nnx_plugins.generation._unroll import unrolling, unstack  # noqa: E402

PROMPT = 16
PATHS = ("ours", "plain")
PHASES = ("plan", "take", "trace", "lower", "compile", "run")


class Clock:
    """Wall and CPU seconds of consecutive phases."""

    def __init__(self) -> None:
        self.times: dict[str, tuple[float, float]] = {}
        self.last = (time.perf_counter(), time.process_time())

    def lap(self, name: str) -> None:
        now = (time.perf_counter(), time.process_time())
        self.times[name] = (now[0] - self.last[0], now[1] - self.last[1])
        self.last = now


def model_of(depth: int, new: int) -> Any:
    return make_model("examples/text_gpt.yaml", PROMPT + new, [f"model.layers.2.count={depth}"])


def prompt_of(batch: int) -> jax.Array:
    ids = np.random.default_rng(0).integers(0, 50, (batch, PROMPT)).astype(np.int32)
    return jax.numpy.asarray(ids)


def first_call(path: str, depth: int, new: int, batch: int) -> dict[str, Any]:
    """One fresh process: the phases of the first call of ``path``."""
    model, ids = model_of(depth, new), prompt_of(batch)
    jax.block_until_ready(ids)
    clock = Clock()
    if path == "ours":
        graphdef, state = nnx.split(model)
        leaves, treedef = jax.tree.flatten(state)
        plan = unrolling(graphdef, treedef, leaves)
        clock.lap("plan")
        leaves = jax.block_until_ready(unstack(plan, leaves))
        clock.lap("take")
        args = (leaves, ids, jax.random.key(0))
        options = dict(graphdef=plan.graphdef, treedef=plan.treedef, new=new, temperature=0.0)
        options["top_k"] = None
        traced = _decode._cached.trace(*args, **options)
    else:
        weights = plain_weights(model)
        clock.lap("plan")
        clock.lap("take")
        args = (weights, ids)
        traced = _loop.trace(weights, ids, new)
    clock.lap("trace")
    lowered = traced.lower()
    clock.lap("lower")
    compiled = lowered.compile()
    clock.lap("compile")
    jax.block_until_ready(compiled(*args))
    clock.lap("run")
    return {name: list(t) for name, t in clock.times.items()}


def spawn(path: str, depth: int, a: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", path, "--depths", str(depth)]
    argv += ["--new", str(a.new), "--batch", str(a.batch)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{path} at depth {depth} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def steady(depth: int, new: int, batch: int, repeats: int) -> dict[str, float]:
    """Median seconds per call of each path, side by side in this process."""
    model, ids = model_of(depth, new), prompt_of(batch)
    weights = plain_weights(model)
    calls = {
        "ours": lambda: _decode.decode(model, ids, max_tokens=new, temperature=0.0),
        "plain": lambda: plain_decode(weights, ids, max_tokens=new),
    }
    tokens = {name: np.asarray(call()) for name, call in calls.items()}
    if not np.array_equal(tokens["ours"], tokens["plain"]):
        print(f"  depth {depth}: the greedy tokens differ between the paths")
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(repeats):
        for name in PATHS if r % 2 == 0 else PATHS[::-1]:
            start = time.perf_counter()
            jax.block_until_ready(calls[name]())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def report(a: argparse.Namespace, first: dict[Any, list[dict]], rows: dict[int, dict]) -> None:
    print("\nfirst call, median of fresh processes: wall s / CPU s per phase")
    print("| depth | path | " + " | ".join(PHASES) + " | total wall | total CPU | CPU x plain |")
    print("|---|---|" + "---|" * (len(PHASES) + 3))
    for depth in a.depths:
        totals = {}
        for path in PATHS:
            runs = first[(depth, path)]
            totals[path] = [
                statistics.median(sum(r[p][k] for p in PHASES) for r in runs) for k in (0, 1)
            ]
        for path in PATHS:
            runs = first[(depth, path)]
            cells = []
            for phase in PHASES:
                wall = statistics.median(r[phase][0] for r in runs)
                cpu = statistics.median(r[phase][1] for r in runs)
                cells.append(f"{wall:.2f} / {cpu:.2f}")
            ratio = totals[path][1] / totals["plain"][1]
            print(
                f"| {depth} | {path} | {' | '.join(cells)} | {totals[path][0]:.2f} | "
                f"{totals[path][1]:.2f} | {ratio:.2f}x |"
            )
    if rows:
        print(f"\nsteady, batch {a.batch}, {a.new} new tokens (median of {a.repeats} calls each)")
        print("| depth | ours tokens/s | plain tokens/s | ours time x plain |")
        print("|---|---|---|---|")
        for depth, t in rows.items():
            rate = {k: a.batch * a.new / v for k, v in t.items()}
            print(
                f"| {depth} | {rate['ours']:,.0f} | {rate['plain']:,.0f} | "
                f"{t['ours'] / t['plain']:.2f}x |"
            )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", type=int, nargs="+", default=[12, 24, 48])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-steady", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(first_call(a.child, a.depths[0], a.new, a.batch)))
        return
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}; load average "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    first: dict[Any, list[dict]] = {}
    for r in range(a.rounds):
        for depth in a.depths:
            for path in PATHS if r % 2 == 0 else PATHS[::-1]:
                first.setdefault((depth, path), []).append(spawn(path, depth, a))
        print(f"  round {r + 1} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = {}
    if not a.no_steady:
        for depth in a.depths:
            rows[depth] = steady(depth, a.new, a.batch, a.repeats)
    if a.json is not None:
        a.json.write_text(
            json.dumps({"first": {f"{d}/{p}": v for (d, p), v in first.items()}, "steady": rows})
        )
    report(a, first, rows)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
