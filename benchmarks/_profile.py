"""A device profile of a few calls, summarised as text: the time per op name, per timeline.

``jax.profiler.trace`` writes an XSpace (``*.xplane.pb``); `summarise` reads it back with
``jax.profiler.ProfileData`` and lists, for each plane (the host's CPU, each GPU) and each of
its lines (Python, a GPU stream, "XLA Ops"...), the events by name: count, total and mean
microseconds. Copies (``copy``, ``memcpy``) are counted apart, as they are what a donation that
did not happen costs on a device.
"""

from __future__ import annotations

import collections
import glob
import shutil
from collections.abc import Callable
from pathlib import Path

import jax

__all__ = ["profile", "summarise"]


def _is_copy(name: str) -> bool:
    low = name.lower()
    return low.startswith("copy") or "memcpy" in low or "copy-start" in low


def summarise(directory: Path, calls: int, top: int = 25) -> str:
    """The text summary of the newest trace under ``directory`` (``calls`` calls were traced)."""
    found = sorted(glob.glob(str(directory / "**" / "*.xplane.pb"), recursive=True))
    if not found:
        return f"no trace under {directory}\n"
    data = jax.profiler.ProfileData.from_file(found[-1])
    out = []
    for plane in data.planes:
        for line in plane.lines:
            count: collections.Counter[str] = collections.Counter()
            total: collections.Counter[str] = collections.Counter()
            for event in line.events:
                count[event.name] += 1
                total[event.name] += event.duration_ns
            if not count:
                continue
            copies = [n for n in count if _is_copy(n)]
            copy_us = sum(total[n] for n in copies) / 1e3 / calls
            copy_n = sum(count[n] for n in copies) / calls
            out.append(
                f"\n## {plane.name} / {line.name}: {sum(count.values())} events; per call "
                f"{sum(total.values()) / 1e3 / calls:.1f} us in all, copies {copy_n:.1f} "
                f"taking {copy_us:.1f} us"
            )
            out.append("| event | per call | us per call | us each |")
            out.append("|---|---|---|---|")
            for name, t in total.most_common(top):
                out.append(
                    f"| {name[:90]} | {count[name] / calls:.2f} | {t / 1e3 / calls:.1f} | "
                    f"{t / 1e3 / count[name]:.2f} |"
                )
    return "\n".join(out) + "\n"


def profile(run: Callable[[int], None], calls: int, directory: Path) -> str:
    """Trace ``run(calls)`` (warmed up first) into ``directory``; the summary."""
    run(3)
    shutil.rmtree(directory, ignore_errors=True)
    with jax.profiler.trace(str(directory)):
        run(calls)
    return summarise(directory, calls)
