"""``metrics.png``: the train and test loss, and the task's main test metric, against the step.

Drawn on an Agg canvas of its own: matplotlib's global backend (a notebook's) is untouched.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training._plot import plot_metrics
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "metrics.png"
    >>> plot_metrics([{"step": 1, "split": "train", "loss": 2.0},
    ...               {"step": 1, "split": "test", "loss": 1.5, "r2": 0.3}], path, metric="r2")
    >>> path.read_bytes()[:4]
    b'\\x89PNG'
"""

from __future__ import annotations

import os
from typing import Any

from .loggers._base import reported

__all__ = ["plot_metrics"]

_UNIT_INTERVAL = ("accuracy", "r2")


def plot_metrics(
    records: list[dict[str, Any]], path: str | os.PathLike[str], *, metric: str | None
) -> None:
    """Write a PNG with the train/test loss and the test ``metric`` (if any) against the step."""
    # (imported here: matplotlib costs about a second of every run's start, and only the end
    # of a run draws; the compile cache made that second a large part of a second run's start)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    train_rows = [r for r in records if r.get("split") == "train" and "loss" in r]
    test_rows = [r for r in records if r.get("split") == "test" and "loss" in r]
    figure = Figure(figsize=(10, 4))
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    left.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label="train")
    left.plot([r["step"] for r in test_rows], [r["loss"] for r in test_rows], "o-", label="test")
    losses = [r["loss"] for r in train_rows + test_rows]
    positive = bool(losses) and all(v > 0 for v in losses)
    left.set(xlabel="step", ylabel="loss", yscale="log" if positive else "linear", title="loss")
    left.legend()
    shown = [r for r in test_rows if metric is not None and metric in r]
    right.plot([r["step"] for r in shown], [r[metric] for r in shown], "o-")
    right.set(xlabel="step", ylabel=metric or "", title=f"test {metric}" if metric else "")
    if metric in _UNIT_INTERVAL and shown:
        lowest = min(r[metric] for r in shown)
        right.set_ylim(max(0.0, lowest - 0.05) if metric == "accuracy" else None, 1.0)
    figure.tight_layout()
    with reported(path):
        figure.savefig(path, dpi=80)
