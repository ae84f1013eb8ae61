"""A transformer-sized train step: ours vs flax.nnx vs a donated plain jax.jit step.

Run: python benchmarks/transformer_step.py [--layers 12] [--steps 5] [--repeats 5] [--rounds 3]
The model is benchmarks/_gpt.py's GPT-style decoder (12 blocks, width 256, 4 heads, sequence
128, batch 8, vocabulary 1024, adamw). First the three versions are checked to give equal losses
on the same parameters. Then:

- first call: each round builds every variant afresh (a new model and a new jitted step, the
  variants taking turns, starting with a different one each round) and times its first call
  (trace, compile and one step) and its second call (one step); "trace + compile" is the first
  call minus the second. Median over rounds. The first two losses of every variant are compared
  too (equal parameters, then one adamw update).
- steady state: the variants take turns running ``--steps`` steps per repeat; median (and
  minimum) ms per step over repeats, and tokens per second from the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _gpt  # noqa: E402

OURS = "(a) nnx_core.jit (ours, default)"
FLAX = "(b) flax nnx.jit (default)"
PLAIN = "(d) plain jax.jit, donated (the limit)"
VARIANTS = (OURS, FLAX, PLAIN)
RTOL = 1e-5

Step = Callable[[], Any]  # runs one train step, returns its loss


def build(name: str, cfg: _gpt.Config, pure: dict[str, Any]) -> Step:
    """A fresh model (parameters equal to ``pure``) and a fresh jitted step for ``name``."""
    ids, targets = _gpt.data(cfg)
    if name == OURS:
        objs, step = _gpt.nnx_step(cfg, _gpt.nnx_model(cfg))
        return lambda: step(*objs, ids, targets)
    if name == FLAX:
        model = _gpt.flax_model(cfg, seed=1)
        _gpt.copy_into_flax(pure, model)
        objs, step = _gpt.flax_step(cfg, model)
        return lambda: step(*objs, ids, targets)
    box = [_gpt.plain_state(cfg, pure)]
    plain = _gpt.plain_step(cfg)

    def run() -> Any:
        box[0], loss = plain(box[0], ids, targets)
        return loss

    return run


def timed(step: Step, n: int = 1) -> tuple[float, float, Any]:
    """Wall and CPU seconds (this process, all threads) per step over ``n`` steps, and the
    last loss."""
    t0, c0 = time.perf_counter(), time.process_time()
    loss = None
    for _ in range(n):
        loss = step()
    jax.block_until_ready(loss)
    return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n, loss


def check_losses(cfg: _gpt.Config) -> dict[str, Any]:
    """The three models' losses on the same parameters and batch (no jit); returns the
    parameters (ours, as a pure dict) after asserting that the losses are equal."""
    import nnx_core as nnx

    ids, targets = _gpt.data(cfg)
    model = _gpt.nnx_model(cfg)
    pure = nnx.state(model).to_pure_dict()
    flax_model = _gpt.flax_model(cfg, seed=1)
    _gpt.copy_into_flax(pure, flax_model)
    losses = {
        OURS: float(_gpt.nnx_loss(model, ids, targets)),
        FLAX: float(_gpt.nnx_loss(flax_model, ids, targets)),
        PLAIN: float(_gpt._cross_entropy(_gpt.plain_logits(pure, ids, cfg.epsilon), targets)),
    }
    print(
        "loss on equal parameters: "
        + ", ".join(f"{k.split()[0]} {v:.6f}" for k, v in losses.items())
    )
    np.testing.assert_allclose(list(losses.values()), losses[PLAIN], rtol=RTOL)
    return pure


Times = dict[str, list[tuple[float, float]]]  # per variant, per sample: (wall s, CPU s)


def first_calls(cfg: _gpt.Config, pure: dict[str, Any], rounds: int) -> tuple[Times, Times, dict]:
    """Per variant and round: (wall, CPU) of the first call and of the second; the last
    round's steps (warm, for the steady-state runs)."""
    first: Times = {name: [] for name in VARIANTS}
    second: Times = {name: [] for name in VARIANTS}
    steps: dict[str, Step] = {}
    for r in range(rounds):
        order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
        losses = {}
        for name in order:
            step = build(name, cfg, pure)
            *t1, loss1 = timed(step)
            *t2, loss2 = timed(step)
            first[name].append(tuple(t1))
            second[name].append(tuple(t2))
            losses[name] = [float(loss1), float(loss2)]
            steps[name] = step
            print(
                f"  round {r + 1} {name}: first call {t1[0]:.2f} s wall / {t1[1]:.2f} s CPU, "
                f"second {t2[0]:.2f} / {t2[1]:.2f}",
                flush=True,
            )
        np.testing.assert_allclose(
            [losses[n] for n in VARIANTS],
            [losses[PLAIN]] * 3,
            rtol=RTOL,
            err_msg="the three steps disagree on the first two losses",
        )
    return first, second, steps


def steady(steps: dict[str, Step], n: int, repeats: int) -> Times:
    """(wall, CPU) seconds per step for each variant per repeat, the variants taking turns."""
    out: Times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            wall, cpu, _ = timed(step, n)
            out[name].append((wall, cpu))
    return out


def _median(samples: list[tuple[float, float]], i: int) -> float:
    return statistics.median(x[i] for x in samples)


def report(cfg: _gpt.Config, first: Times, second: Times, per_step: Times) -> None:
    tokens = cfg.batch * cfg.seq
    wall = {k: _median(v, 0) for k, v in per_step.items()}
    cpu = {k: _median(v, 1) for k, v in per_step.items()}
    print("\nsteady state, per step (median over repeats; min wall in brackets)")
    print("| call path | wall ms | x donated plain | CPU ms | x donated plain | tokens/s |")
    print("|---|---|---|---|---|---|")
    for name in VARIANTS:
        low = min(x[0] for x in per_step[name])
        print(
            f"| {name} | {wall[name] * 1e3:.0f} ({low * 1e3:.0f}) | "
            f"{wall[name] / wall[PLAIN]:.3f} | {cpu[name] * 1e3:.0f} | "
            f"{cpu[name] / cpu[PLAIN]:.3f} | {tokens / wall[name]:.0f} |"
        )
    compile_ = {
        k: [(a[0] - b[0], a[1] - b[1]) for a, b in zip(v, second[k])] for k, v in first.items()
    }
    print("\nfirst call (median over rounds); trace + compile = first call - second call")
    print(
        "| call path | first call wall s | x plain | trace + compile wall s | x plain "
        "| trace + compile CPU s | x plain |"
    )
    print("|---|---|---|---|---|---|---|")
    f_wall = {k: _median(v, 0) for k, v in first.items()}
    c_wall = {k: _median(v, 0) for k, v in compile_.items()}
    c_cpu = {k: _median(v, 1) for k, v in compile_.items()}
    for name in VARIANTS:
        print(
            f"| {name} | {f_wall[name]:.2f} | {f_wall[name] / f_wall[PLAIN]:.3f} | "
            f"{c_wall[name]:.2f} | {c_wall[name] / c_wall[PLAIN]:.3f} | "
            f"{c_cpu[name]:.2f} | {c_cpu[name] / c_cpu[PLAIN]:.3f} |"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    cfg = _gpt.Config(layers=a.layers)
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}; {cfg}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    pure = check_losses(cfg)
    first, second, steps = first_calls(cfg, pure, a.rounds)
    per_step = steady(steps, a.steps, a.repeats)
    report(cfg, first, second, per_step)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
