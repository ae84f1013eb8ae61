"""Steady-state time per train step: ours vs flax.nnx vs a plain jax.jit step on pytrees.

Run: python benchmarks/train_step.py [--depths 5 20] [--steps 200] [--repeats 7]
Prints µs/step (median of repeats, compile excluded, block_until_ready at the end of each
repeat) and the ratio to the plain jax.jit step, for the train step and for a no-op step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
import _models  # noqa: E402


def timeit(run_steps, steps: int, repeats: int) -> float:
    run_steps(3)  # compile + warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_steps(steps)
        times.append((time.perf_counter() - t0) / steps * 1e6)
    return statistics.median(times)


def module_runner(objs, step):
    x, y = _models.data()

    def run(n):
        out = None
        for _ in range(n):
            out = step(*objs, x, y)
        jax.block_until_ready(out)
        jax.block_until_ready(jax.tree_util.tree_leaves(objs[0]))

    return run


def partial_runner(step):
    x, y = _models.data()

    def run(n):
        out = None
        for _ in range(n):
            out = step(x, y)
        jax.block_until_ready(out)

    return run


def plain_runner(state, step):
    x, y = _models.data()
    box = [state]

    def run(n):
        out = None
        for _ in range(n):
            out = step(box[0], x, y)
            if out is not None:
                box[0], _ = out
        jax.block_until_ready(out if out is not None else box[0])

    return run


def measure(depth: int, steps: int, repeats: int, with_flax: bool) -> dict[str, tuple[float, float]]:
    rows: dict[str, tuple[float, float]] = {}
    state, step, noop = _models.plain_steps(depth)
    plain = (timeit(plain_runner(state, step), steps, repeats),
             timeit(plain_runner(state, noop), steps, repeats))
    objs, step, noop = _models.nnx_steps(depth)
    rows["(a) nnx_core.jit (ours, default)"] = (
        timeit(module_runner(objs, step), steps, repeats),
        timeit(module_runner(objs, noop), steps, repeats),
    )
    if with_flax:
        objs, step, noop = _models.flax_steps(depth, "default")
        rows["(b) flax nnx.jit (default)"] = (
            timeit(module_runner(objs, step), max(steps // 5, 20), repeats),
            timeit(module_runner(objs, noop), max(steps // 5, 20), repeats),
        )
        objs, step, noop = _models.flax_steps(depth, "jit_partial")
        rows["(c) flax nnx.jit_partial"] = (
            timeit(partial_runner(step), steps, repeats),
            timeit(partial_runner(noop), steps, repeats),
        )
    rows["(d) plain jax.jit on a pytree"] = plain
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", type=int, nargs="+", default=[5, 20])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--no-flax", action="store_true")
    a = p.parse_args(argv)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {len(jax.devices())} device(s)")
    for depth in a.depths:
        rows = measure(depth, a.steps, a.repeats, not a.no_flax)
        base_step, base_noop = rows["(d) plain jax.jit on a pytree"]
        print(f"\ndepth {depth}")
        print("| call path | µs/step | x plain | no-op µs | no-op x plain |")
        print("|---|---|---|---|---|")
        for name, (t_step, t_noop) in rows.items():
            print(f"| {name} | {t_step:.0f} | {t_step / base_step:.2f} | {t_noop:.0f} | {t_noop / base_noop:.2f} |")


if __name__ == "__main__":
    main()
