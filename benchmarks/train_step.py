"""Steady-state time per train step: ours vs flax.nnx vs a plain jax.jit step on pytrees.

Run: python benchmarks/train_step.py [--depths 5 20] [--widths 32] [--batch 32] [--steps 200]
     [--repeats 7] [--no-flax] [--json FILE] [--profile DIR]
Prints µs/step (median of repeats, the variants taking turns within each repeat; compile
excluded; block_until_ready at the end of each repeat) and the ratio to the limit, also as the
median of each repeat's own ratio (steadier under a changing load): a plain
jax.jit step on pytrees that donates its buffers (params, statistics, count and optimizer
state). Also the no-op step on the same leaves, and the compiled steps' memory_analysis()
(argument, output, alias and temp bytes) plus the device's memory_stats() peak where it has one.

Device copies per step, for each variant: the ``copy`` instructions of the compiled step's HLO
(run on the device every step), the arrays copied on the host side before the call (our jit
copies a buffer it cannot donate safely; counted by the arrays that go through
``jax.device_put`` during ``--steps`` steady steps), the donations JAX refused (its "donated
buffers were not usable" warnings) and whether a step moves data between host and device
unasked (``jax.transfer_guard``). On a CPU these show a copy regression that a CPU hides
in its timings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
import _models  # noqa: E402
import _profile  # noqa: E402

OURS = "(a) nnx_core.jit (ours, default)"
OURS_DONATE = "(a') nnx_core.jit(donate_argnums=(0, 1))"
FLAX = "(b) flax nnx.jit (default)"
FLAX_PARTIAL = "(c) flax nnx.jit_partial"
PLAIN = "(d) plain jax.jit, donated (the limit)"
PLAIN_UNDONATED = "(e) plain jax.jit, not donated"

Runner = Callable[[int], None]


def interleaved(runners: dict[str, tuple[Runner, int]], repeats: int) -> dict[str, float]:
    """µs per step for each runner: median over repeats, the runners taking turns in each repeat
    (in reverse order every other repeat) so that a change in machine load hits all of them
    alike. ``RATIOS`` gets each runner's median over the repeats of its time over the donated
    plain step's in the same repeat: on a busy machine the steadier figure."""
    for run, _ in runners.values():
        run(3)  # compile + warm up
    times: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            run, steps = runners[name]
            t0 = time.perf_counter()
            run(steps)
            times[name].append((time.perf_counter() - t0) / steps * 1e6)
    if PLAIN in times:
        RATIOS.update(
            {
                name: statistics.median(a / b for a, b in zip(ts, times[PLAIN]))
                for name, ts in times.items()
            }
        )
    return {name: statistics.median(ts) for name, ts in times.items()}


RATIOS: dict[str, float] = {}


def module_runner(objs, step) -> Runner:
    x, y = _models.data()

    def run(n):
        out = None
        for _ in range(n):
            out = step(*objs, x, y)
        # one executable writes the loss and the state together: waiting for the loss (or, for
        # the no-op, for nothing) waits for the step
        jax.block_until_ready(out)

    return run


def partial_runner(step) -> Runner:
    x, y = _models.data()

    def run(n):
        out = None
        for _ in range(n):
            out = step(x, y)
        jax.block_until_ready(out)

    return run


def plain_runner(box: list, step) -> Runner:
    """``box[0]`` is the current state, shared by the runners of one variant (a donated state
    must not be used again)."""
    x, y = _models.data()

    def run(n):
        out = None
        for _ in range(n):
            out = step(box[0], x, y)
            if out is not None:
                box[0], _ = out
        jax.block_until_ready(out if out is not None else box[0])

    return run


def memory(lowered: jax.stages.Lowered) -> tuple[int, int, int, int]:
    m = lowered.compile().memory_analysis()
    return (
        m.argument_size_in_bytes,
        m.output_size_in_bytes,
        m.alias_size_in_bytes,
        m.temp_size_in_bytes,
    )


def hlo_copies(lowered: jax.stages.Lowered) -> int:
    """``copy`` instructions in the compiled program (each one a device copy per step)."""
    return len(re.findall(r"= \S+ copy(?:-start)?\(", lowered.compile().as_text()))


def copies_per_step(run: Runner, steps: int) -> tuple[float, float]:
    """Arrays put through ``jax.device_put`` and donations JAX refused, per step of ``run``."""
    put = jax.device_put
    counted = [0]

    def counting(x, *args, **kwargs):
        counted[0] += len(jax.tree_util.tree_leaves(x))
        return put(x, *args, **kwargs)

    jax.device_put = counting
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(steps)
    finally:
        jax.device_put = put
    refused = sum("donated buffers were not usable" in str(w.message) for w in caught)
    return counted[0] / steps, refused / steps


def implicit_transfers(run: Runner) -> str:
    """Whether two steps of ``run`` move data between host and device unasked: "none" when they
    pass under ``jax.transfer_guard("disallow")`` (a Python scalar or NumPy array among the
    step's inputs would be copied to the device on every call, which a CPU hides)."""
    try:
        with jax.transfer_guard("disallow"):
            run(2)
    except Exception as error:  # noqa: BLE001 - the guard's error type is jax's own
        return f"yes: {str(error).splitlines()[0][:60]}"
    return "none"


def measure(depth: int, steps: int, repeats: int, with_flax: bool, profile_dir: Path | None):
    step_runners: dict[str, tuple[Runner, int]] = {}
    noop_runners: dict[str, tuple[Runner, int]] = {}
    mem: dict[str, tuple[int, int, int, int]] = {}
    hlo: dict[str, int] = {}
    x, y = _models.data()
    for name, donate in ((OURS, False), (OURS_DONATE, True)):
        objs, step, noop = _models.nnx_steps(depth, donate=donate)
        mem[name] = memory(step.lower(*objs, x, y))
        hlo[name] = hlo_copies(step.lower(*objs, x, y))
        step_runners[name] = (module_runner(objs, step), steps)
        noop_runners[name] = (module_runner(objs, noop), steps)
    if with_flax:
        objs, step, noop = _models.flax_steps(depth, "default")
        slow = max(steps // 10, 10)
        step_runners[FLAX] = (module_runner(objs, step), slow)
        noop_runners[FLAX] = (module_runner(objs, noop), slow)
        objs, step, noop = _models.flax_steps(depth, "jit_partial")
        step_runners[FLAX_PARTIAL] = (partial_runner(step), steps)
        noop_runners[FLAX_PARTIAL] = (partial_runner(noop), steps)
    for name, donate in ((PLAIN, True), (PLAIN_UNDONATED, False)):
        state, step, noop = _models.plain_steps(depth, donate=donate)
        mem[name] = memory(step.lower(state, x, y))
        hlo[name] = hlo_copies(step.lower(state, x, y))
        box = [state]
        step_runners[name] = (plain_runner(box, step), steps)
        noop_runners[name] = (plain_runner(box, noop), steps)
    t_step = interleaved(step_runners, repeats)
    ratios = dict(RATIOS)
    t_noop = interleaved(noop_runners, repeats)
    if profile_dir is not None:
        for name in (OURS, PLAIN):
            tag = f"depth{depth}_{'ours' if name == OURS else 'plain'}"
            summary = _profile.profile(step_runners[name][0], 20, profile_dir / tag)
            (profile_dir / f"{tag}.md").write_text(f"# {name}, depth {depth}, 20 steps\n{summary}")
    copies = {
        name: (hlo[name], *copies_per_step(run, n), implicit_transfers(run))
        for name, (run, n) in step_runners.items()
        if name in hlo
    }
    rows = {name: (t_step[name], t_noop[name], ratios[name]) for name in step_runners}
    return rows, mem, copies


def report(title: str, rows: dict, mem: dict, copies: dict) -> None:
    base_step, base_noop, _ = rows[PLAIN]
    print(f"\n{title}; load average {os.getloadavg()[0]:.2f}")
    print(
        "| call path | µs/step | x donated plain | x donated plain, per round | no-op µs | "
        "no-op x donated plain |"
    )
    print("|---|---|---|---|---|---|")
    for name, (t_step, t_noop, ratio) in rows.items():
        print(
            f"| {name} | {t_step:.0f} | {t_step / base_step:.2f} | {ratio:.2f} | {t_noop:.0f} | "
            f"{t_noop / base_noop:.2f} |"
        )
    print(f"\n{title}: compiled train step, memory_analysis() in bytes")
    print("| call path | argument | output | alias | temp | output - alias + temp |")
    print("|---|---|---|---|---|---|")
    for name, (arg, out, alias, temp) in mem.items():
        print(f"| {name} | {arg} | {out} | {alias} | {temp} | {out - alias + temp} |")
    print(f"\n{title}: device copies per train step")
    print(
        "| call path | HLO copy ops | arrays copied before the call | donations refused | "
        "implicit host transfers |"
    )
    print("|---|---|---|---|---|")
    for name, (ops, before, refused, transfers) in copies.items():
        print(f"| {name} | {ops} | {before:.2f} | {refused:.2f} | {transfers} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", type=int, nargs="+", default=[5, 20])
    p.add_argument("--widths", type=int, nargs="+", default=[32], help="hidden widths")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--no-flax", action="store_true")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="trace 20 steps of ours and of the donated plain step per depth into this folder "
        "and write each trace summarised (time per op name, per timeline) as DIR/depthN_*.md",
    )
    a = p.parse_args(argv)
    device = jax.devices()[0]
    print(
        f"jax {jax.__version__}, {device.platform}, {len(jax.devices())} device(s); "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    record: dict = {"device": str(device.device_kind), "platform": device.platform}
    for width in a.widths:
        _models.configure(width=width, batch=a.batch)
        for depth in a.depths:
            rows, mem, copies = measure(depth, a.steps, a.repeats, not a.no_flax, a.profile)
            record[f"{depth}/{width}/{a.batch}"] = {"us": rows, "memory": mem, "copies": copies}
            if a.json is not None:
                a.json.write_text(json.dumps(record, indent=1))
            report(f"depth {depth}, width {width}, batch {a.batch}", rows, mem, copies)
    stats = device.memory_stats()
    peak = stats.get("peak_bytes_in_use") if stats else None
    print(
        f"\ndevice memory_stats() peak: {peak if peak is not None else 'not reported by this device'}"
    )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
