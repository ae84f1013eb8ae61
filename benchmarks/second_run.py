"""The compile cache: a run's time to its first train step (and ``nnx generate``'s time to its
text) in a process that finds the cache empty, then in one that finds it filled.

Run: python benchmarks/second_run.py [--configs examples/text_gpt.yaml examples/digits_cnn.yaml]
         [--rounds 3] [--generate] [--json FILE]

Each figure is a fresh Python process, timed from its start (the parent's clock before it
starts the child) to the end of the first train step (the step's outputs ready on the device;
the child then exits), with ``NNX_CACHE_DIR`` a new empty folder per round:

- first: the cache empty (what every run paid before the cache);
- second: the same command again, the cache filled by the first;
- off: ``compile_cache=False`` (``--no-compile-cache``), for reference.

With ``--generate``, the same for ``nnx_plugins.generate`` on the text config (greedy, 64
tokens) from a checkpoint a short run wrote first (not timed): start to the text. Medians over
``--rounds``; the second run's share of the first is the figure the cache is for. Each child
also stamps its start: Python, jax and the run's nnx modules imported (the same in both
processes, and beyond the cache's reach); the last column compares what comes after it. nnx's
own packages are byte-compiled first (`compiled_packages`), as an installed copy is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("first", "second", "off")
PROFILE = None
if os.environ.get("BENCH_PROFILE"):
    import cProfile

    PROFILE = cProfile.Profile()
    PROFILE.enable()


def child_train(config: str, cache: bool) -> None:
    """In the child: train until the end of step 1, print the wall clock then, exit."""
    import jax

    import nnx_core as nnx
    from nnx_plugins import Callback, register_callback, train

    @register_callback("bench.first_step")
    class FirstStep(Callback):
        def after_step(self, run: Any, step: int) -> None:
            jax.block_until_ready(nnx.state(run.model))
            print(json.dumps({"end": time.time()}), flush=True)
            if PROFILE is not None:  # (BENCH_PROFILE=FILE: the child's profile, for a look)
                PROFILE.disable()
                PROFILE.dump_stats(os.environ["BENCH_PROFILE"])
            os._exit(0)

    overrides = {"callbacks": [{"type": "bench.first_step"}]}
    from nnx_plugins import load_config
    from nnx_plugins.training import _loop  # noqa: F401 (the run's modules: the start)

    print(json.dumps({"started": time.time()}), flush=True)
    loaded = load_config(config).to_dict()
    loaded.update(overrides)
    run_dir = tempfile.mkdtemp()
    train(loaded, run_dir=run_dir, progress=False, compile_cache=cache)


def child_generate(config: str, checkpoint: str, cache: bool) -> None:
    from nnx_plugins import generate
    from nnx_plugins.generation import _generate  # noqa: F401 (its modules: the start)

    print(json.dumps({"started": time.time()}), flush=True)

    generate(
        config,
        checkpoint=checkpoint,
        prompt="def ",
        max_tokens=64,
        temperature=0.0,
        compile_cache=cache,
    )
    print(json.dumps({"end": time.time()}), flush=True)


def spawn(argv: list[str], cache_dir: str) -> tuple[float, float]:
    """Seconds from starting ``argv`` (this script as a child) to the end it prints, and to
    its start (Python, jax and nnx imported)."""
    env = dict(os.environ, NNX_CACHE_DIR=cache_dir)
    start = time.time()
    done = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True, env=env, check=False
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{argv} failed:\n{done.stderr[-3000:]}")
    stamps = {k: v for line in lines for k, v in json.loads(line).items()}
    return stamps["end"] - start, stamps["started"] - start


def checkpoint_for(config: str) -> str:
    """A checkpoint of ``config`` from a 5-step run (in this process; not timed)."""
    from nnx_plugins import load_config, train

    loaded = load_config(config).to_dict()
    loaded["train"] = {**loaded.get("train", {}), "steps": 5}
    loaded["train"].pop("epochs", None)
    loaded["train"]["eval_interval"] = 5
    result = train(loaded, run_dir=tempfile.mkdtemp(), progress=False, compile_cache=False)
    return str(result.checkpoint)


def compiled_packages() -> None:
    """Write the bytecode of nnx's packages, as ``pip install`` does for an installed copy:
    an editable install under ``PYTHONDONTWRITEBYTECODE`` (this machine's environment) would
    otherwise compile them from source in every process (0.5 s of each start)."""
    import compileall
    import importlib.util

    for name in ("nnx_core", "nnx_layers", "nnx_plugins"):
        spec = importlib.util.find_spec(name)
        for folder in spec.submodule_search_locations or ():
            compileall.compile_dir(folder, quiet=1)


def measure(what: str, argv: list[str], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {m: [] for mode in MODES for m in (mode, f"{mode} start")}
    for r in range(rounds):
        cache = tempfile.mkdtemp(prefix="nnx-cache-")
        for mode, folder in zip(MODES, (cache, cache, tempfile.mkdtemp())):
            flag = "off" if mode == "off" else "on"
            end, started = spawn([*argv, "--cache", flag], folder)
            times[mode].append(end)
            times[f"{mode} start"].append(started)
        entries = sum(1 for _ in Path(cache).rglob("*.nnx"))
        print(
            f"  {what}, round {r + 1}: "
            + ", ".join(f"{m} {times[m][-1]:.2f} s" for m in MODES)
            + f"; {entries} programs in the cache; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    return times


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--configs", nargs="+", default=["examples/text_gpt.yaml", "examples/digits_cnn.yaml"]
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--generate", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--child", choices=["train", "generate"], help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--cache", choices=["on", "off"], help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child == "train":
        child_train(a.config, a.cache == "on")
        return
    if a.child == "generate":
        child_generate(a.config, a.checkpoint, a.cache == "on")
        return
    import jax

    compiled_packages()
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; load {os.getloadavg()[0]:.2f}")
    results: dict[str, dict[str, list[float]]] = {}
    for config in a.configs:
        results[f"train {config}"] = measure(
            f"train {config}", ["--child", "train", "--config", config], a.rounds
        )
    if a.generate:
        text = next(c for c in a.configs if "text" in c)
        ckpt = checkpoint_for(text)
        argv_g = ["--child", "generate", "--config", text, "--checkpoint", ckpt]
        results[f"generate {text}"] = measure(f"generate {text}", argv_g, a.rounds)
    print(
        "\n| command | first process s | second process s | second / first | cache off s | "
        "start s (first, second) | after the start: second / first |"
    )
    print("|---|---|---|---|---|---|---|")
    for what, t in results.items():
        first, second, off = (statistics.median(t[m]) for m in MODES)
        start_1, start_2 = (statistics.median(t[f"{m} start"]) for m in ("first", "second"))
        after = (second - start_2) / (first - start_1)
        print(
            f"| {what} | {first:.2f} | {second:.2f} | {second / first:.2f} | {off:.2f} | "
            f"{start_1:.2f}, {start_2:.2f} | {after:.2f} |"
        )
    if a.json is not None:
        a.json.write_text(json.dumps(results))
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
