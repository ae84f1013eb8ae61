"""Steady-state time per train step: ours vs flax.nnx vs a plain jax.jit step on pytrees.

Run: python benchmarks/train_step.py [--depths 5 20] [--steps 200] [--repeats 7]
Prints µs/step (median of repeats, the variants taking turns within each repeat; compile
excluded; block_until_ready at the end of each repeat) and the ratio to the plain jax.jit step,
for the train step and for a no-op step on the same leaves.
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


def interleaved(runners: dict[str, tuple[object, int]], repeats: int) -> dict[str, float]:
    """µs per step for each runner: median over repeats, the runners taking turns in each repeat
    so that a change in machine load hits all of them alike."""
    for run, _ in runners.values():
        run(3)  # compile + warm up
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, (run, steps) in runners.items():
            t0 = time.perf_counter()
            run(steps)
            times[name].append((time.perf_counter() - t0) / steps * 1e6)
    return {name: statistics.median(ts) for name, ts in times.items()}


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
    step_runners: dict[str, tuple[object, int]] = {}
    noop_runners: dict[str, tuple[object, int]] = {}
    objs, step, noop = _models.nnx_steps(depth)
    step_runners[OURS] = (module_runner(objs, step), steps)
    noop_runners[OURS] = (module_runner(objs, noop), steps)
    if with_flax:
        objs, step, noop = _models.flax_steps(depth, "default")
        slow = max(steps // 10, 10)
        step_runners[FLAX] = (module_runner(objs, step), slow)
        noop_runners[FLAX] = (module_runner(objs, noop), slow)
        objs, step, noop = _models.flax_steps(depth, "jit_partial")
        step_runners[FLAX_PARTIAL] = (partial_runner(step), steps)
        noop_runners[FLAX_PARTIAL] = (partial_runner(noop), steps)
    state, step, noop = _models.plain_steps(depth)
    step_runners[PLAIN] = (plain_runner(state, step), steps)
    noop_runners[PLAIN] = (plain_runner(state, noop), steps)
    t_step = interleaved(step_runners, repeats)
    t_noop = interleaved(noop_runners, repeats)
    return {name: (t_step[name], t_noop[name]) for name in step_runners}


OURS = "(a) nnx_core.jit (ours, default)"
FLAX = "(b) flax nnx.jit (default)"
FLAX_PARTIAL = "(c) flax nnx.jit_partial"
PLAIN = "(d) plain jax.jit on a pytree"


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
        base_step, base_noop = rows[PLAIN]
        print(f"\ndepth {depth}")
        print("| call path | µs/step | x plain | no-op µs | no-op x plain |")
        print("|---|---|---|---|---|")
        for name, (t_step, t_noop) in rows.items():
            print(f"| {name} | {t_step:.0f} | {t_step / base_step:.2f} | {t_noop:.0f} | {t_noop / base_noop:.2f} |")


if __name__ == "__main__":
    main()
