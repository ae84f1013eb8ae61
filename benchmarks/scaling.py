"""Per-call overhead against model size: the default jit and a cold split, ours vs flax.nnx.

Run: python benchmarks/scaling.py [--sizes 10 30 100 300 1000 3000 10000] [--repeats 5]
         [--figure docs/images/scaling.png]

The model is a list of small Modules with two Params each (shapes (4,) so the arrays cost
nothing); its size is its number of Variables. Per size, three call paths:

- jit no-op: a jitted function that takes the model and returns nothing, i.e. pure per-call
  overhead (ours; flax's default ``nnx.jit``; a plain ``jax.jit`` on a list of the arrays);
- jit update: a jitted step that adds one to every Variable (ours, which donates by default;
  flax's default ``nnx.jit``; a plain ``jax.jit`` that donates its list of arrays);
- cold split: the first ``split`` of a newly built model (ours vs flax.nnx).

Each figure is the median over ``--repeats`` rounds, the variants taking turns in each round;
the slope (µs per Variable) is a least-squares fit over all sizes. Prints a Markdown table, the
first call of each jitted path (trace, compile and one call; once per size), and writes the
figure.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx as fnnx

import nnx_core as nnx


def ours_model(n: int):
    class Unit(nnx.Module):
        def __init__(self, i):
            self.w = nnx.Param(jnp.full((4,), float(i)))
            self.b = nnx.Param(jnp.zeros((4,)))

    class Stack(nnx.Module):
        def __init__(self, n):
            self.units = [Unit(i) for i in range(n // 2)]

    return Stack(n)


def flax_model(n: int):
    class Unit(fnnx.Module):
        def __init__(self, i):
            self.w = fnnx.Param(jnp.full((4,), float(i)))
            self.b = fnnx.Param(jnp.zeros((4,)))

    class Stack(fnnx.Module):
        def __init__(self, n):
            self.units = fnnx.List([Unit(i) for i in range(n // 2)])

    return Stack(n)


def _add_one(model) -> None:
    for unit in model.units:  # `v[...]`: the spelling both libraries accept without a warning
        unit.w[...] = unit.w[...] + 1
        unit.b[...] = unit.b[...] + 1


def runners(n: int) -> dict[str, Callable[[], object]]:
    """One callable per (call path, library); each runs one call and waits for it."""
    ours, theirs = ours_model(n), flax_model(n)
    plain = [jnp.full((4,), float(i)) for i in range(n)]
    box = [plain]
    ours_noop, ours_step = nnx.jit(lambda m: None), nnx.jit(_add_one)
    flax_noop, flax_step = fnnx.jit(lambda m: None), fnnx.jit(_add_one)
    plain_noop = jax.jit(lambda xs: None)
    plain_step = jax.jit(lambda xs: [x + 1 for x in xs], donate_argnums=0)

    def plain_update():
        box[0] = plain_step(box[0])
        jax.block_until_ready(box[0][-1])

    def ours_update():
        ours_step(ours)
        jax.block_until_ready(ours.units[-1].b._raw_value)  # waits without reading it out

    def flax_update():
        flax_step(theirs)
        jax.block_until_ready(theirs.units[-1].b[...])

    return {
        "jit no-op, ours": lambda: ours_noop(ours),
        "jit no-op, flax.nnx": lambda: flax_noop(theirs),
        "jit no-op, plain jax.jit": lambda: plain_noop(box[0]),
        "jit update, ours": ours_update,
        "jit update, flax.nnx": flax_update,
        "jit update, plain jax.jit (donated)": plain_update,
    }


def cold_split(n: int, copies: int) -> dict[str, Callable[[], float]]:
    """µs of the first split of each of ``copies`` newly built models (made beforehand)."""
    sides = {
        "cold split, ours": (nnx, ours_model(n)),
        "cold split, flax.nnx": (fnnx, flax_model(n)),
    }

    def timer(lib, model):
        def run() -> float:
            fresh = [lib.clone(model) for _ in range(copies)]
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                for m in fresh:
                    lib.split(m)
                return (time.perf_counter() - t0) / copies * 1e6
            finally:
                gc.enable()

        return run

    return {name: timer(lib, model) for name, (lib, model) in sides.items()}


def measure(n: int, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median µs per call of every call path, and the seconds of each jitted path's first call
    (trace, compile and one call)."""
    calls = runners(n)
    first: dict[str, float] = {}
    for name, call in calls.items():
        t0 = time.perf_counter()
        call()
        first[name] = time.perf_counter() - t0
        call()
    splits = cold_split(n, copies=max(2, min(50, 2000 // n)))
    number = max(3, min(200, 20000 // n))
    times: dict[str, list[float]] = {name: [] for name in [*calls, *splits]}
    for _ in range(repeats):
        for name, call in calls.items():
            count = max(1, number // 20) if "flax" in name else number  # flax is ~100x slower
            gc.disable()
            t0 = time.perf_counter()
            for _ in range(count):
                call()
            times[name].append((time.perf_counter() - t0) / count * 1e6)
            gc.enable()
        for name, split in splits.items():
            times[name].append(split())
    return {name: statistics.median(ts) for name, ts in times.items()}, first


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 100, 300, 1000, 3000, 10000])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--figure", type=Path, default=Path("docs/images/scaling.png"))
    a = p.parse_args(argv)
    print(f"jax {jax.__version__}; load average {os.getloadavg()[0]:.2f}")
    rows, firsts = {}, {}
    for n in a.sizes:
        rows[n], firsts[n] = measure(n, a.repeats)
        print(
            f"measured {n} Variables: " + ", ".join(f"{k} {v:.0f}" for k, v in rows[n].items()),
            flush=True,
        )
    names = list(rows[a.sizes[0]])
    print("\n| Variables | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for n, row in rows.items():
        print(f"| {n} | " + " | ".join(f"{row[k]:.0f}" for k in names) + " |")
    sizes = np.array(a.sizes, dtype=float)
    print("\n| call path | µs per Variable (slope) | µs at 0 (intercept) |")
    print("|---|---|---|")
    fits = {}
    for k in names:
        slope, intercept = np.polyfit(sizes, [rows[n][k] for n in a.sizes], 1)
        fits[k] = slope
        print(f"| {k} | {slope:.3f} | {intercept:.0f} |")
    first_names = list(firsts[a.sizes[0]])
    print("\nFirst call (trace, compile and one call), seconds:\n")
    print("| Variables | " + " | ".join(first_names) + " |")
    print("|---|" + "---|" * len(first_names))
    for n, row in firsts.items():
        print(f"| {n} | " + " | ".join(f"{row[k]:.2f}" for k in first_names) + " |")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    plot(rows, names, fits, a.figure)


def plot(
    rows: dict[int, dict[str, float]], names: list[str], fits: dict[str, float], path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(rows)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, group in zip(axes, ("jit no-op", "jit update", "cold split")):
        for k in names:
            if k.startswith(group):
                label = f"{k.split(', ', 1)[1]} ({fits[k]:.2f} µs/Variable)"
                ax.loglog(sizes, [rows[n][k] for n in sizes], marker="o", label=label)
        ax.set_title(group)
        ax.set_xlabel("Variables in the model")
        ax.set_ylabel("µs per call")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"figure: {path}")


if __name__ == "__main__":
    main()
