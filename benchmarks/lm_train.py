"""`nnx train`'s language-model step against a hand-written donated plain `jax.jit` loop.

Run: python benchmarks/lm_train.py [--config examples/text_gpt.yaml] [--windows 5]
         [--log-interval 10] [--rounds 3] [KEY=VALUE...]

Both train the config's model (examples/text_gpt.yaml: the 4-block byte-level GPT) from the same
initial parameters, with the config's optimizer, on the same batches (the config's ``text``
dataset, ``data.batch(step, batch_size, seed)``), data feeding included:

- ``nnx train``: the real `nnx_plugins.train` on the config (``train.steps`` set to
  ``(windows + 1) * log_interval``, evaluation and checkpoint at the end only). Its log has a
  train record every ``log_interval`` steps with the window's rate and the share of it spent
  reading and placing batches (``examples_per_second``, ``data_share``); the first window
  (compilation) is dropped, the others are the steady state.
- plain: a loop over the same batches calling a ``jax.jit`` step that takes the parameters and
  the optax state as one pytree of arrays with ``donate_argnums`` (updated in place), runs the
  same layers (``nnx.merge`` inside the trace, so the same XLA computation) and the same
  cross-entropy, and reads its losses back every ``log_interval`` steps as a log line would.

The two take turns over ``--rounds`` rounds; the table gives the medians over every steady
window: seconds per step, the ratio (target <= 1.1x) and the data-feeding share.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import nnx_core as nnx
from nnx_plugins import load_config, load_train_config, train
from nnx_plugins.training._assembly import assemble
from nnx_plugins.training._loop import build_model

OURS = "nnx train (language_model task)"
PLAIN = "plain jax.jit, donated (the limit)"


def configured(path: str, overrides: list[str], steps: int, log_interval: int) -> Any:
    """The config with ``steps`` steps, a log line every ``log_interval``, one evaluation (and
    one checkpoint: the config's ``checkpoint.interval`` is kept; the example has none)."""
    timing = [
        f"train.steps={steps}",
        f"train.log_interval={log_interval}",
        f"train.eval_interval={steps}",
    ]
    return load_train_config(load_config(path, overrides=[*overrides, *timing]))


def ours(config: Any) -> list[tuple[float, float]]:
    """Run `train` on ``config``; per steady window: (seconds per step, data-feeding share)."""
    with tempfile.TemporaryDirectory() as folder:
        train(config, run_dir=folder, progress=False)
        with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as log:
            records = [json.loads(line) for line in log]
    rows = config.sections["train"].batch_size
    windows = [r for r in records if r.get("split") == "train"][1:]  # (the first: compiling)
    return [(rows / r["examples_per_second"], r["data_share"]) for r in windows]


def plain_step(config: Any) -> tuple[Any, Any]:
    """The plain step (parameters and optax state donated) and its initial state."""
    model = build_model(config, seed=config.sections["train"].seed)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = config.sections["optimizer"].make()

    def loss_fn(params: Any, batch: Any) -> Any:
        logits = nnx.merge(graphdef, params, rest)(batch["inputs"]).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()

    @functools.partial(jax.jit, donate_argnums=(0,))
    def step(state: Any, batch: Any) -> Any:
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    params = jax.tree.map(jnp.array, params)  # (own buffers: they are donated)
    return step, (params, tx.init(params))


def plain(config: Any, data: Any) -> list[tuple[float, float]]:
    """The hand-written loop; per steady window: (seconds per step, data-feeding share)."""
    section = config.sections["train"]
    step, state = plain_step(config)
    windows, losses, feeding = [], [], 0.0
    started = time.perf_counter()
    for s in range(1, section.steps + 1):
        fed = time.perf_counter()
        batch = data.batch(s - 1, section.batch_size, section.seed)
        feeding += time.perf_counter() - fed
        state, loss = step(state, batch)
        losses.append(loss)
        if s % section.log_interval == 0:
            jax.device_get(losses)  # (the log line's read)
            now = time.perf_counter()
            windows.append(((now - started) / len(losses), feeding / (now - started)))
            losses, feeding, started = [], 0.0, now
    return windows[1:]


def check_same_losses(config: Any, data: Any) -> None:
    """The first losses of both, on the same parameters and batches, agree."""
    again = ["train.steps=2", "train.log_interval=1"]
    short = load_train_config(load_config(config.to_dict(), overrides=again))
    with tempfile.TemporaryDirectory() as folder:
        train(short, run_dir=folder, progress=False)
        with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as log:
            mine = [json.loads(line)["loss"] for line in log if '"train"' in line]
    step, state = plain_step(short)
    section = short.sections["train"]
    theirs = []
    for s in range(2):
        state, loss = step(state, data.batch(s, section.batch_size, section.seed))
        theirs.append(float(loss))
    np.testing.assert_allclose(mine, theirs, rtol=2e-5, err_msg="the two steps disagree")
    print(f"first two losses: nnx train {mine}, plain {theirs}", flush=True)


def report(samples: dict[str, list[tuple[float, float]]], config: Any, data: Any) -> None:
    section = config.sections["train"]
    tokens = section.batch_size * int(np.prod(data.describe().inputs.shape))
    per_step = {k: statistics.median(s for s, _ in v) for k, v in samples.items()}
    share = {k: statistics.median(d for _, d in v) for k, v in samples.items()}
    count = len(samples[OURS])
    print(
        f"\nsteady state, medians over {count} window{'s' * (count != 1)} of "
        f"{section.log_interval} steps"
    )
    print("| loop | ms / step (min) | x plain | data feeding share | tokens/s |")
    print("|---|---|---|---|---|")
    for name in (OURS, PLAIN):
        low = min(s for s, _ in samples[name])
        print(
            f"| {name} | {per_step[name] * 1e3:.0f} ({low * 1e3:.0f}) | "
            f"{per_step[name] / per_step[PLAIN]:.3f} | {share[name]:.2%} | "
            f"{tokens / per_step[name]:,.0f} |"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="examples/text_gpt.yaml")
    p.add_argument("--windows", type=int, default=5, help="steady windows per run")
    p.add_argument("--log-interval", type=int, default=10, help="steps per window")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    a = p.parse_args(argv)
    steps = (a.windows + 1) * a.log_interval
    config = configured(a.config, a.overrides, steps, a.log_interval)
    data = assemble(config).data
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}; {a.config} {a.overrides}; "
        f"{steps} steps per run; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    check_same_losses(config, data)
    samples: dict[str, list[tuple[float, float]]] = {OURS: [], PLAIN: []}
    for r in range(a.rounds):
        for name in (OURS, PLAIN) if r % 2 == 0 else (PLAIN, OURS):
            got = ours(config) if name == OURS else plain(config, data)
            samples[name] += got
            print(
                f"  round {r + 1} {name}: {statistics.median(s for s, _ in got) * 1e3:.0f} ms/step",
                flush=True,
            )
    report(samples, config, data)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
