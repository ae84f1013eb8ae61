"""Deep models: the first call and the steady step, blocks unrolled vs stacked under scan.

Run: python benchmarks/deep_compile.py [--depths 12 24 48] [--rounds 3] [--steps 2] [--repeats 3]
     [--variants ...] [--first-variants ...] [--no-steady] [--json FILE]
The model is benchmarks/_gpt.py's GPT (width 256, 4 heads, sequence 128, batch 8, vocabulary
1024, adamw) at each depth, six ways:

- ours unrolled (a list of blocks) and ours stacked (``nnx_layers.Repeat``, also with
  ``remat=True``), under our default ``nnx_core.jit``;
- flax.nnx's hand-written stack (``split_rngs`` + ``vmap``, applied with ``nnx.scan``) under its
  default ``nnx.jit``;
- a plain ``jax.jit`` step on a pytree that donates its state: the blocks unrolled, and a
  ``jax.lax.scan`` over the stacked block parameters.

First call: each variant builds its model and step in a fresh process and times the first call
(trace, compile, one step) and the second (one step); "trace + compile" is their difference, in
wall and CPU seconds (all threads of the process). Median over ``--rounds`` processes per
variant and depth, the variants taking turns. Steady step: one process per depth builds every
variant from the same parameters (their first losses are checked equal), then the variants take
turns running ``--steps`` steps per repeat; median ms per step over ``--repeats``. Memory: the
compiled train step's ``memory_analysis()`` (arguments, outputs, aliased, temporaries) and, on
a device whose ``memory_stats()`` reports a peak (a GPU), each first-call process's peak over
its first two calls (one variant per process, so the peaks compare). It runs on the default
backend (a GPU when one is present).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _gpt  # noqa: E402
import _gpt_scan  # noqa: E402

VARIANTS = {
    "ours-unrolled": "(a) ours, unrolled blocks",
    "ours-repeat": "(b) ours, Repeat",
    "ours-repeat-remat": "(b') ours, Repeat(remat=True)",
    "flax-scan": "(c) flax.nnx, split_rngs + vmap + scan",
    "plain-unrolled": "(d) plain jax.jit, unrolled, donated",
    "plain-scan": "(e) plain jax.jit, lax.scan, donated",
}
RTOL = 1e-4


class Variant:
    """One way to build and run the train step: ``step()`` runs one step and returns its loss;
    ``lower()`` lowers the step for its memory analysis."""

    def __init__(self, step: Callable[[], Any], lower: Callable[[], Any] | None):
        self.step, self.lower = step, lower


def _ours(cfg: _gpt.Config, model: Any) -> Variant:
    ids, targets = _gpt.data(cfg)
    objs, step = _gpt.nnx_step(cfg, model)
    return Variant(lambda: step(*objs, ids, targets), lambda: step.lower(*objs, ids, targets))


def _plain(cfg: _gpt.Config, pure: dict[str, Any], scanned: bool) -> Variant:
    ids, targets = _gpt.data(cfg)
    if scanned:
        box, fn = (
            [_gpt.plain_state(cfg, _gpt_scan.stacked_pure(pure))],
            _gpt_scan.plain_scan_step(cfg),
        )
    else:
        box, fn = [_gpt.plain_state(cfg, pure)], _gpt.plain_step(cfg)

    def run() -> Any:
        box[0], loss = fn(box[0], ids, targets)
        return loss

    return Variant(run, lambda: fn.lower(box[0], ids, targets))


def build(name: str, cfg: _gpt.Config, unrolled: Any) -> Variant:
    """Variant ``name`` with the parameters of our unrolled model ``unrolled``."""
    import nnx_core as nnx

    if name == "ours-unrolled":
        return _ours(cfg, unrolled)
    if name in ("ours-repeat", "ours-repeat-remat"):
        model = _gpt_scan.nnx_repeat_model(cfg, seed=1, remat=name.endswith("remat"))
        _gpt_scan.copy_into_repeat(nnx.clone(unrolled), model)
        return _ours(cfg, model)
    pure = nnx.state(unrolled).to_pure_dict()
    if name == "flax-scan":
        ids, targets = _gpt.data(cfg)
        model = _gpt_scan.flax_scan_model(cfg, seed=1)
        _gpt.copy_into_flax(_gpt_scan.stacked_pure(pure), model)
        objs, step = _gpt.flax_step(cfg, model)
        lower = getattr(step, "lower", None)
        return Variant(
            lambda: step(*objs, ids, targets),
            None if lower is None else lambda: lower(*objs, ids, targets),
        )
    return _plain(cfg, pure, scanned=name == "plain-scan")


def timed(step: Callable[[], Any], n: int = 1) -> tuple[float, float, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    loss = None
    for _ in range(n):
        loss = step()
    jax.block_until_ready(loss)
    return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n, loss


def memory(variant: Variant) -> list[int] | None:
    if variant.lower is None:
        return None
    m = variant.lower().compile().memory_analysis()
    return [
        m.argument_size_in_bytes,
        m.output_size_in_bytes,
        m.alias_size_in_bytes,
        m.temp_size_in_bytes,
    ]


def _memory_stats() -> dict[str, Any]:
    stats = jax.devices()[0].memory_stats()
    return stats or {}


def child(name: str, cfg: _gpt.Config) -> dict[str, Any]:
    """One fresh process: the first and second call of one variant, and the device's peak
    memory (where it reports one) over the two calls, also above what was in use before."""
    variant = build(name, cfg, _gpt.nnx_model(cfg))
    before = _memory_stats().get("bytes_in_use")
    first = timed(variant.step)
    second = timed(variant.step)
    peak = _memory_stats().get("peak_bytes_in_use")
    return {
        "first_wall": first[0],
        "first_cpu": first[1],
        "second_wall": second[0],
        "second_cpu": second[1],
        "loss": float(first[2]),
        "peak_bytes": peak,
        "peak_above_state": None if peak is None or before is None else peak - before,
    }


def _spawn(name: str, cfg: _gpt.Config) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", name, "--depths", str(cfg.layers)]
    argv += ["--width", str(cfg.width), "--seq", str(cfg.seq), "--batch", str(cfg.batch)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} at depth {cfg.layers} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_calls(
    cfgs: list[_gpt.Config], names: list[str], rounds: int, log: Callable[[dict], None]
) -> dict[Any, dict]:
    """Median over ``rounds`` fresh processes of each variant's first call, per depth."""
    runs: dict[Any, list[dict[str, Any]]] = {}
    for r in range(rounds):
        for cfg in cfgs:
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                runs.setdefault((cfg.layers, name), []).append(_spawn(name, cfg))
                log({"first_runs": {f"{d}/{n}": v for (d, n), v in runs.items()}})
    out = {}
    for key, results in runs.items():
        tc_wall = [x["first_wall"] - x["second_wall"] for x in results]
        tc_cpu = [x["first_cpu"] - x["second_cpu"] for x in results]
        out[key] = {
            "first_wall": statistics.median(x["first_wall"] for x in results),
            "tc_wall": statistics.median(tc_wall),
            "tc_cpu": statistics.median(tc_cpu),
            "each_tc_cpu": tc_cpu,
            "peak_bytes": _median_of(results, "peak_bytes"),
            "peak_above_state": _median_of(results, "peak_above_state"),
        }
    return out


def _median_of(results: list[dict[str, Any]], key: str) -> float | None:
    values = [x[key] for x in results if x.get(key) is not None]
    return statistics.median(values) if values else None


def steady(cfg: _gpt.Config, names: list[str], steps: int, repeats: int) -> tuple[dict, dict]:
    """ms per step (median over repeats, the variants taking turns) and memory analyses."""
    unrolled = _gpt.nnx_model(cfg)
    variants = {name: build(name, cfg, unrolled) for name in names}
    losses = {name: float(timed(v.step)[2]) for name, v in variants.items()}
    reference = losses[names[0]]
    for loss in losses.values():
        if not np.isclose(loss, reference, rtol=RTOL):
            raise AssertionError(f"first losses differ: {losses}")
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name, variant in variants.items():
            times[name].append(timed(variant.step, steps)[0] * 1e3)
    mem = {name: memory(v) for name, v in variants.items()}
    return {name: statistics.median(ts) for name, ts in times.items()}, mem


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}"


def report(cfgs: list[_gpt.Config], names: list[str], first: dict, rows: dict) -> None:
    if first:
        report_first(cfgs, names, first)
    report_steady(rows)


def report_first(cfgs: list[_gpt.Config], names: list[str], first: dict) -> None:
    print("\nfirst call, median of fresh processes (seconds)")
    print(
        "| depth | call path | first call wall | trace + compile wall | trace + compile CPU | "
        "CPU x ours unrolled | CPU x plain scan | CPU x plain same layout |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for cfg in cfgs:
        d = cfg.layers
        for name in names:
            f = first[(d, name)]
            same = "plain-scan" if name in ("ours-repeat", "flax-scan") else "plain-unrolled"
            if name.startswith("plain") or (d, same) not in first:
                same_ratio = "-"
            else:
                same_ratio = _ratio(f["tc_cpu"], first[(d, same)]["tc_cpu"])
            ratios = [
                _ratio(f["tc_cpu"], first[(d, base)]["tc_cpu"]) if (d, base) in first else "-"
                for base in ("ours-unrolled", "plain-scan")
            ]
            print(
                f"| {d} | {VARIANTS[name]} | {f['first_wall']:.2f} | {f['tc_wall']:.2f} | "
                f"{f['tc_cpu']:.2f} | {ratios[0]} | {ratios[1]} | {same_ratio} |"
            )
    print("\nper process, trace + compile CPU seconds")
    for (d, name), f in sorted(first.items()):
        print(f"  depth {d} {name}: {', '.join(f'{x:.2f}' for x in f['each_tc_cpu'])}")
    if any(f["peak_bytes"] is not None for f in first.values()):
        print("\ndevice memory_stats() over the first two calls, one process per variant (MiB)")
        print("| depth | call path | peak in use | peak above the state before the call |")
        print("|---|---|---|---|")
        for (d, name), f in sorted(first.items()):
            print(
                f"| {d} | {VARIANTS[name]} | {_mib(f['peak_bytes'])} | "
                f"{_mib(f['peak_above_state'])} |"
            )


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def report_steady(rows: dict) -> None:
    for cfg, (ms, mem) in rows.items():
        print(f"\ndepth {cfg}: steady step, ms (median), and the compiled step's memory_analysis()")
        print(
            "| call path | ms/step | x ours unrolled | x plain scan | argument | output | "
            "alias | temp | output - alias + temp |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, t in ms.items():
            m = mem.get(name)
            cells = (
                " - | - | - | - | - |"
                if m is None
                else f" {m[0]} | {m[1]} | {m[2]} | {m[3]} | {m[1] - m[2] + m[3]} |"
            )
            base_u = _ratio(t, ms["ours-unrolled"]) if "ours-unrolled" in ms else "-"
            base_s = _ratio(t, ms["plain-scan"]) if "plain-scan" in ms else "-"
            print(f"| {VARIANTS[name]} | {t:.0f} | {base_u} | {base_s} |{cells}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", type=int, nargs="+", default=[12, 24, 48])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--first-variants", nargs="+", choices=list(VARIANTS), default=None)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--no-steady", action="store_true")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    cfgs = [_gpt.Config(layers=d, width=a.width, seq=a.seq, batch=a.batch) for d in a.depths]
    if a.child:
        print(json.dumps(child(a.child, cfgs[0])))
        return
    device = jax.devices()[0]
    print(
        f"jax {jax.__version__}, {device.platform} ({device.device_kind}), "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}"
    )
    record: dict[str, Any] = {"device": str(device.device_kind), "platform": device.platform}

    def log(update: dict[str, Any]) -> None:
        record.update(update)
        if a.json is not None:  # written as it goes, so a run cut short keeps what it measured
            a.json.write_text(json.dumps(record, indent=1, default=str))

    first = first_calls(cfgs, a.first_variants or a.variants, a.rounds, log)
    log({"first": {f"{d}/{n}": v for (d, n), v in first.items()}})
    rows = {}
    if not a.no_steady:
        for cfg in cfgs:
            rows[cfg.layers] = steady(cfg, a.variants, a.steps, a.repeats)
            log({"steady": {str(d): {"ms": ms, "memory": mem} for d, (ms, mem) in rows.items()}})
    report(cfgs, a.first_variants or a.variants, first, rows)
    stats = device.memory_stats()
    peak = stats.get("peak_bytes_in_use") if stats else None
    print(f"\ndevice memory_stats() peak: {peak if peak is not None else 'not reported'}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
