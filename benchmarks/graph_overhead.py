"""Python cost of split / merge / state / update: ours vs flax.nnx (graph mode), same model.

Run: python benchmarks/graph_overhead.py [--depths 5 20 100] [--number 200]
The model is the MLP of flax's own graph-overhead benchmark (Linear + BatchNorm blocks,
width 32). "ours" is the steady state (structure cached); "ours, cold" forces a full
re-traversal before every call (what a call costs right after the structure changed).
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _models  # noqa: E402


def per_call(fn, number: int) -> float:
    fn()
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def ours(depth: int, number: int) -> dict[str, float]:
    import nnx_core as nnx
    from nnx_core._graph import bump_epoch

    m = _models.nnx_model(depth)
    g, s = nnx.split(m)

    def cold(fn):
        def run():
            bump_epoch()
            return fn()
        return run

    return {
        "split": per_call(lambda: nnx.split(m), number),
        "state": per_call(lambda: nnx.state(m), number),
        "merge": per_call(lambda: nnx.merge(g, s), number),
        "update": per_call(lambda: nnx.update(m, s), number),
        "split (cold)": per_call(cold(lambda: nnx.split(m)), number),
        "state (cold)": per_call(cold(lambda: nnx.state(m)), number),
        "update (cold)": per_call(cold(lambda: nnx.update(m, s)), number),
    }


def flax(depth: int, number: int) -> dict[str, float]:
    from flax import nnx as fnnx

    m = _models.flax_model(depth)
    g, s = fnnx.split(m)
    return {
        "split": per_call(lambda: fnnx.split(m), number),
        "state": per_call(lambda: fnnx.state(m), number),
        "merge": per_call(lambda: fnnx.merge(g, s), number),
        "update": per_call(lambda: fnnx.update(m, s), number),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", type=int, nargs="+", default=[5, 20, 100])
    p.add_argument("--number", type=int, default=200)
    a = p.parse_args(argv)
    print("| depth | op | ours µs | ours cold µs | flax.nnx µs | flax / ours | flax / ours cold |")
    print("|---|---|---|---|---|---|---|")
    for depth in a.depths:
        n = max(a.number // max(depth // 5, 1), 10)
        o, f = ours(depth, n), flax(depth, n)
        for op in ("split", "state", "merge", "update"):
            c = o.get(f"{op} (cold)")
            cold = f"{c:.0f}" if c else "-"
            ratio_cold = f"{f[op] / c:.1f}x" if c else "-"
            print(f"| {depth} | {op} | {o[op]:.0f} | {cold} | {f[op]:.0f} | {f[op] / o[op]:.1f}x | {ratio_cold} |")


if __name__ == "__main__":
    main()
