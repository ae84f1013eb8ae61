"""The first call of a train step, per model family: ours against flax.nnx and plain JAX, with
the time it takes again in a new process that finds the compile cache filled.

Run: python benchmarks/first_call.py [--families mlp cnn gpt repeat] [--depths 12 24 48]
         [--rounds 3] [--json FILE]

Families (each the same math three ways, parameters copied from ours; see the helper modules):

- ``mlp``: ``_models.py``'s MLP of Linear + BatchNorm blocks (width 32, batch 32, sgd), depth 5
  and 20;
- ``cnn``: ``_cnn.py``, the CNN of examples/digits_cnn.yaml (batch 64, adamw);
- ``gpt``: ``_gpt.py``'s GPT (width 256, sequence 128, batch 8, adamw), 12 blocks unrolled;
- ``repeat``: the same GPT's blocks stacked (ours: ``nnx_layers.Repeat``; flax.nnx:
  ``split_rngs`` + ``vmap`` + ``scan``; plain: ``lax.scan``), at ``--depths`` blocks.

Each figure is a fresh process that builds the model and its step (not timed), then times the
step's first call: wall and CPU seconds (all threads of the process), split by JAX's own
monitoring events into tracing (the rest), lowering to StableHLO
(``jaxpr_to_mlir_module_duration``) and the XLA compile (``backend_compile_duration``), and
the second call (one step). Three kinds of process per variant: without the compile cache (the
first call of any run before it), and two with `nnx_plugins.training._compile_cache` on over one
new folder: the first fills it, the second ("from the cache") loads the step's program instead
of compiling it: its compile column is the load. Medians over ``--rounds``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

sys.path.insert(0, str(Path(__file__).parent))

LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE = "/jax/core/compile/backend_compile_duration"
VARIANTS = ("ours", "flax", "plain")
KINDS = ("no cache", "cache filled", "from the cache")


def _mlp(variant: str, depth: int) -> Callable[[], Any]:
    import _models
    import train_step as ts

    if variant == "ours":
        objs, step, _ = _models.nnx_steps(depth)
        return lambda: ts.module_runner(objs, step)(1)
    if variant == "flax":
        objs, step, _ = _models.flax_steps(depth, "default")
        return lambda: ts.module_runner(objs, step)(1)
    state, step, _ = _models.plain_steps(depth, donate=True)
    box = [
        state
    ]  # (one box: the second call must take the first call's output, not the donated input)
    return lambda: ts.plain_runner(box, step)(1)


def _cnn(variant: str, depth: int) -> Callable[[], Any]:
    import _cnn

    import nnx_core as nnx

    x, labels = _cnn.data()
    model = _cnn.nnx_model()
    if variant == "ours":
        objs, step = _cnn.nnx_step(model)
        return lambda: jax.block_until_ready(step(*objs, x, labels))
    if variant == "flax":
        objs, step = _cnn.flax_step(nnx.state(model).to_pure_dict())
        return lambda: jax.block_until_ready(step(*objs, x, labels))
    params = nnx.state(model, nnx.Param).to_pure_dict()
    stats = nnx.state(model, nnx.BatchStat).to_pure_dict()
    box, step = _cnn.plain_step(params, stats)

    def run() -> Any:
        box[0], loss = step(box[0], x, labels)
        return jax.block_until_ready(loss)

    return run


def _gpt(variant: str, depth: int, stacked: bool) -> Callable[[], Any]:
    import _gpt
    import deep_compile

    cfg = _gpt.Config(layers=depth)
    unrolled = _gpt.nnx_model(cfg)
    if variant == "flax" and not stacked:
        import nnx_core as nnx

        model = _gpt.flax_model(cfg, seed=1)
        _gpt.copy_into_flax(nnx.state(unrolled).to_pure_dict(), model)
        objs, step = _gpt.flax_step(cfg, model)
        ids, targets = _gpt.data(cfg)
        return lambda: jax.block_until_ready(step(*objs, ids, targets))
    names = {
        ("ours", False): "ours-unrolled",
        ("plain", False): "plain-unrolled",
        ("ours", True): "ours-repeat",
        ("flax", True): "flax-scan",
        ("plain", True): "plain-scan",
    }
    built = deep_compile.build(names[variant, stacked], cfg, unrolled)
    return lambda: jax.block_until_ready(built.step())


def runner(family: str, variant: str, depth: int) -> Callable[[], Any]:
    if family == "mlp":
        return _mlp(variant, depth)
    if family == "cnn":
        return _cnn(variant, depth)
    return _gpt(variant, depth, stacked=family == "repeat")


def child(family: str, variant: str, depth: int, cache: bool) -> dict[str, float]:
    """In a fresh process: the phases of the step's first call, and its second call."""
    from nnx_plugins.training._compile_cache import compile_cache

    events: collections.Counter[str] = collections.Counter()
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, seconds, **_: events.update({name: seconds})
    )
    with compile_cache(cache):
        run = runner(family, variant, depth)
        events.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        lower, compiled = events[LOWER], events[COMPILE]
        second = time.perf_counter()
        run()
        second = time.perf_counter() - second
    return {
        "wall": wall,
        "cpu": cpu,
        "lower": lower,
        "compile": compiled,
        "second": second,
        "trace": wall - lower - compiled - second,
    }


def spawn(family: str, variant: str, depth: int, cache: str | None) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", family, variant, str(depth)]
    env = dict(os.environ)
    if cache is not None:
        env["NNX_CACHE_DIR"] = cache
        argv.append("--cache")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{family} {variant} {depth} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cases(a: argparse.Namespace) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for family in a.families:
        depths = {"mlp": [5, 20], "cnn": [2], "gpt": [12], "repeat": a.depths}[family]
        found += [(family, d) for d in depths]
    return found


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=["mlp", "cnn", "gpt", "repeat"])
    p.add_argument("--depths", type=int, nargs="+", default=[12, 24, 48])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--table", type=Path, default=None, help="print the table of a --json file (any part)"
    )
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--cache", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        family, variant, depth = a.child
        print(json.dumps(child(family, variant, int(depth), a.cache)))
        return
    if a.table is not None:
        table(a, json.loads(a.table.read_text()))
        return
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; load {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[dict[str, float]]] = {}
    for r in range(a.rounds):
        for family, depth in cases(a):
            for variant in a.variants:
                key = f"{family}/{depth}/{variant}"
                folder = tempfile.mkdtemp(prefix="nnx-first-call-")
                for kind, cache in zip(KINDS, (None, folder, folder)):
                    runs.setdefault(f"{key}/{kind}", []).append(
                        spawn(family, variant, depth, cache)
                    )
                print(f"  round {r + 1}: {key} done, load {os.getloadavg()[0]:.2f}", flush=True)
                if a.json is not None:
                    a.json.write_text(json.dumps(runs, indent=1))
    table(a, runs)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


def table(a: argparse.Namespace, runs: dict[str, list[dict[str, float]]]) -> None:
    """The Markdown table of ``runs`` (medians), the cases measured so far."""
    print(
        "\n| family | depth | path | process | first call wall s | CPU s | trace s | lower s | "
        "compile (or load) s | one step s | wall x plain |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for family, depth in cases(a):
        for variant in a.variants:
            for kind in KINDS:
                got = runs.get(f"{family}/{depth}/{variant}/{kind}")
                if not got:
                    continue
                med = {k: statistics.median(x[k] for x in got) for k in got[0]}
                plain = runs.get(f"{family}/{depth}/plain/{kind}")
                ratio = "-"
                if plain is not None:
                    ratio = f"{med['wall'] / statistics.median(x['wall'] for x in plain):.2f}x"
                print(
                    f"| {family} | {depth} | {variant} | {kind} | {med['wall']:.2f} | "
                    f"{med['cpu']:.2f} | {med['trace']:.2f} | {med['lower']:.2f} | "
                    f"{med['compile']:.2f} | {med['second']:.3f} | {ratio} |"
                )


if __name__ == "__main__":
    main()
