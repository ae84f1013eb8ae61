"""``metrics.png``: the train, validation and test loss, and the task's main metric on the
validation and test splits, against the step.

Drawn on an Agg canvas of its own: matplotlib's global backend (a notebook's) is untouched.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training._plot import plot_metrics
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "metrics.png"
    >>> plot_metrics([{"step": 1, "split": "train", "loss": 2.0},
    ...               {"step": 1, "split": "val", "loss": 1.6, "r2": 0.25},
    ...               {"step": 1, "split": "test", "loss": 1.5, "r2": 0.3}], path, metric="r2")
    >>> path.read_bytes()[:4]
    b'\\x89PNG'
"""

from __future__ import annotations

import io
import os
from typing import Any

from ._safe_io import write_whole
from .loggers._base import reported

__all__ = ["plot_metrics"]

_UNIT_INTERVAL = ("accuracy", "r2")


def plot_metrics(
    records: list[dict[str, Any]], path: str | os.PathLike[str], *, metric: str | None
) -> None:
    """Write a PNG with the train, validation and test loss and the validation and test
    ``metric`` (if any) against the step (written anew: never through a planted link)."""
    # (imported here: matplotlib costs about a second of every run's start, and only the end
    # of a run draws; the compile cache made that second a large part of a second run's start)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = {
        split: [r for r in records if r.get("split") == split and "loss" in r]
        for split in ("train", "val", "test")
    }
    figure = Figure(figsize=(10, 4))
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    for split, style in (("train", "-"), ("val", "o-"), ("test", "s-")):
        if rows[split] or split == "train":
            steps = [r["step"] for r in rows[split]]
            left.plot(steps, [r["loss"] for r in rows[split]], style, label=split)
    losses = [r["loss"] for split in rows for r in rows[split]]
    positive = bool(losses) and all(v > 0 for v in losses)
    left.set(xlabel="step", ylabel="loss", yscale="log" if positive else "linear", title="loss")
    left.legend()
    shown = []
    for split, style in (("val", "o-"), ("test", "s-")):
        found = [r for r in rows[split] if metric is not None and metric in r]
        if found:
            right.plot([r["step"] for r in found], [r[metric] for r in found], style, label=split)
            shown += found
    right.set(xlabel="step", ylabel=metric or "", title=metric or "")
    if shown:
        right.legend()
    if metric in _UNIT_INTERVAL and shown:
        lowest = min(r[metric] for r in shown)
        right.set_ylim(max(0.0, lowest - 0.05) if metric == "accuracy" else None, 1.0)
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=80)
    with reported(path):
        write_whole(path, image.getvalue())
