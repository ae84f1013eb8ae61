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


def timed(step: Step) -> tuple[float, Any]:
    t0 = time.perf_counter()
    loss = jax.block_until_ready(step())
    return time.perf_counter() - t0, loss


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


def first_calls(
    cfg: _gpt.Config, pure: dict[str, Any], rounds: int
) -> tuple[dict, dict[str, Step]]:
    """Per variant: first-call and second-call seconds per round; the last round's steps."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    steps: dict[str, Step] = {}
    for r in range(rounds):
        order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
        losses = {}
        for name in order:
            step = build(name, cfg, pure)
            t_first, loss1 = timed(step)
            t_second, loss2 = timed(step)
            times[name].append((t_first, t_second))
            losses[name] = [float(loss1), float(loss2)]
            steps[name] = step
            print(f"  round {r + 1} {name}: first call {t_first:.2f} s, second {t_second:.3f} s")
        np.testing.assert_allclose(
            [losses[n] for n in VARIANTS],
            [losses[PLAIN]] * 3,
            rtol=RTOL,
            err_msg="the three steps disagree on the first two losses",
        )
    return times, steps


def steady(steps: dict[str, Step], n: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per step for each variant per repeat, the variants taking turns."""
    out: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            t0 = time.perf_counter()
            loss = None
            for _ in range(n):
                loss = step()
            jax.block_until_ready(loss)
            out[name].append((time.perf_counter() - t0) / n)
    return out


def report(cfg: _gpt.Config, first: dict, per_step: dict[str, list[float]]) -> None:
    tokens = cfg.batch * cfg.seq
    med = {k: statistics.median(v) for k, v in per_step.items()}
    print("\n| call path | ms/step (median) | ms/step (min) | x donated plain | tokens/s |")
    print("|---|---|---|---|---|")
    for name in VARIANTS:
        print(
            f"| {name} | {med[name] * 1e3:.1f} | {min(per_step[name]) * 1e3:.1f} | "
            f"{med[name] / med[PLAIN]:.3f} | {tokens / med[name]:.0f} |"
        )
    f_med = {k: statistics.median(a for a, _ in v) for k, v in first.items()}
    c_med = {k: statistics.median(a - b for a, b in v) for k, v in first.items()}
    print(
        "\n| call path | first call s (median) | x donated plain | trace + compile s | x donated plain |"
    )
    print("|---|---|---|---|---|")
    for name in VARIANTS:
        print(
            f"| {name} | {f_med[name]:.2f} | {f_med[name] / f_med[PLAIN]:.3f} | "
            f"{c_med[name]:.2f} | {c_med[name] / c_med[PLAIN]:.3f} |"
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
    first, steps = first_calls(cfg, pure, a.rounds)
    per_step = steady(steps, a.steps, a.repeats)
    report(cfg, first, per_step)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
