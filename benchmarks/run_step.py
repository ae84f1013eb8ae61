"""`nnx train`'s own step: time per step with train.precision float32 against bfloat16, and the
share of the step time spent feeding data (making the batch of the step and placing it).

Run: python benchmarks/run_step.py [--steps 100] [--repeats 5] [--models mlp cnn text]
Builds each model, its optimizer, task and dataset exactly as `nnx train` does (the same
sections, the same jitted step), then times `steps` steps per repeat, steady state (compile
excluded; block_until_ready at the end of each repeat), the two precisions taking turns within
each repeat; prints the median µs/step, the bfloat16/float32 ratio, and the median share of the
wall time spent in `dataset.batch` plus placement.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from nnx_plugins.training._assembly import assemble
from nnx_plugins.training._config import load_train_config
from nnx_plugins.training._mesh import batch_placer
from nnx_plugins.training._plan import make_plan, setup, steps_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

MODELS: dict[str, dict[str, Any]] = {
    "mlp": {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": 64, "out_features": 1024},
                {"type": "relu"},
                {"type": "Linear", "in_features": 1024, "out_features": 1024},
                {"type": "relu"},
                {"type": "Linear", "in_features": 1024, "out_features": 10},
            ],
        },
        "data": {"type": "digits", "layout": "flat"},
        "train": {"batch_size": 256},
    },
    "cnn": {"file": str(EXAMPLES / "digits_cnn.yaml"), "train": {"batch_size": 64}},
    "text": {
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Embed", "num_embeddings": 256, "features": 256},
                {"type": "Linear", "in_features": 256, "out_features": 1024},
                {"type": "gelu"},
                {"type": "Linear", "in_features": 1024, "out_features": 256},
            ],
        },
        "task": {"type": "language_model"},
        "data": {"type": "text", "path": "stdlib:json", "seq_len": 128},
        "train": {"batch_size": 32},
    },
}


def make_run(name: str, precision: str, run_dir: str) -> tuple[Any, Any, Any, Any]:
    """The plan, model and optimizer `nnx train` would make for ``MODELS[name]``, and its placer."""
    spec = dict(MODELS[name])
    source = spec.pop("file", None)
    train_section = {**spec.pop("train", {}), "precision": precision}
    if source is not None:
        import yaml

        with open(source, encoding="utf-8") as handle:
            spec = {**yaml.safe_load(handle), **spec}
    spec["train"] = {**spec.get("train", {}), **train_section}
    spec.setdefault("optimizer", {"type": "adam", "learning_rate": 1e-3})
    config = load_train_config(spec)
    parts = assemble(config)
    plan = make_plan(config, parts, Path(run_dir))
    plan.steps = steps_of(plan)
    model, optimizer = setup(plan, None)
    return plan, model, optimizer, batch_placer(None, plan.rows)


def runner(plan: Any, model: Any, optimizer: Any, place: Any) -> Any:
    """``run(n) -> (seconds, seconds feeding)``: n steps of the loop's body, from step 0 on."""
    seed = plan.config.sections["train"].seed
    state = {"step": 0, "bad": jax.numpy.int32(0)}

    def run(n: int) -> tuple[float, float]:
        feeding, out = 0.0, None
        started = time.perf_counter()
        for _ in range(n):
            fed = time.perf_counter()
            batch = place(plan.parts.data.batch(state["step"], plan.rows, seed))
            feeding += time.perf_counter() - fed
            state["step"] += 1
            out = plan.steps.train(model, optimizer, batch, state["bad"], np.int32(state["step"]))
        jax.block_until_ready(out)
        return time.perf_counter() - started, feeding

    return run


def measure(name: str, *, steps: int, repeats: int) -> dict[str, tuple[float, float]]:
    """``{precision: (µs per step, feeding share)}``, medians over ``repeats``."""
    runs = {}
    with tempfile.TemporaryDirectory() as run_dir:
        for precision in ("float32", "bfloat16"):
            runs[precision] = runner(*make_run(name, precision, run_dir))
            runs[precision](3)  # (compile and warm up)
        times: dict[str, list[float]] = {p: [] for p in runs}
        shares: dict[str, list[float]] = {p: [] for p in runs}
        for _ in range(repeats):
            for precision, run in runs.items():
                seconds, feeding = run(steps)
                times[precision].append(seconds / steps * 1e6)
                shares[precision].append(feeding / seconds)
    return {p: (statistics.median(times[p]), statistics.median(shares[p])) for p in runs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    print(f"device: {device.platform} ({device.device_kind}), {len(jax.devices())} device(s)")
    print(
        f"{'model':<6} {'float32 µs/step':>16} {'bfloat16 µs/step':>17} {'bf16/f32':>9} {'feeding share f32':>18} {'bf16':>6}"
    )
    for name in args.models:
        found = measure(name, steps=args.steps, repeats=args.repeats)
        (f32, share32), (bf16, share16) = found["float32"], found["bfloat16"]
        print(
            f"{name:<6} {f32:>16.0f} {bf16:>17.0f} {bf16 / f32:>9.2f} {share32:>18.1%} {share16:>6.1%}"
        )


if __name__ == "__main__":
    main()
