"""What a run reports: ``metrics.jsonl`` (resumable), the ``metrics.png`` plot, the progress bar.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training._metrics import MetricsLog
    >>> log = MetricsLog(pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl", 0)
    >>> log.write({"step": 10, "split": "train", "loss": 0.5})
    >>> log.path.read_text().splitlines()
    ['{"step": 10, "split": "train", "loss": 0.5}']
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

__all__ = ["MetricsLog", "Progress", "plot_metrics"]


class MetricsLog:
    """``metrics.jsonl`` in the run directory; on resume, lines after the start step are dropped."""

    def __init__(self, path: pathlib.Path, start: int, *, writes: bool = True):
        self.path, self.writes = path, writes
        self.records: list[dict[str, Any]] = []
        if start > 0 and path.exists():
            with open(path, encoding="utf-8") as handle:
                lines = [_parse(line) for line in handle]
            self.records = [r for r in lines if r is not None and r.get("step", 0) <= start]
        if writes:
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(r) + "\n" for r in self.records)

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.writes:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


def _parse(line: str) -> dict[str, Any] | None:
    """A metrics line, or None for a blank or torn one (a run killed mid-write)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def plot_metrics(records: list[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write a PNG with the train/test loss and the test accuracy against the step.

    Drawn on an Agg canvas of its own: matplotlib's global backend (a notebook's) is untouched.
    """
    train_rows = [r for r in records if r["split"] == "train"]
    test_rows = [r for r in records if r["split"] == "test"]
    figure = Figure(figsize=(10, 4))
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    left.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label="train")
    left.plot([r["step"] for r in test_rows], [r["loss"] for r in test_rows], "o-", label="test")
    left.set(xlabel="step", ylabel="loss", yscale="log", title="loss")
    left.legend()
    right.plot([r["step"] for r in test_rows], [r["accuracy"] for r in test_rows], "o-")
    lowest = min([r["accuracy"] for r in test_rows], default=0.0)
    right.set(xlabel="step", ylabel="accuracy", title="test accuracy")
    right.set_ylim(max(0.0, lowest - 0.05), 1.0)
    figure.tight_layout()
    figure.savefig(path, dpi=80)


class Progress:
    """A rich progress bar with loss and throughput, or nothing."""

    def __init__(self, enabled: bool, total: int, start: int, console: Any):
        self.console = console or Console(highlight=False)
        self.bar = None
        if enabled:
            self.bar = RichProgress(
                TextColumn("train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[rate]} ex/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.task = self.bar.add_task("train", total=total, completed=start, loss="-", rate="-")

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, step: int, loss: float, rate: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=step, loss=f"{loss:.4f}", rate=f"{rate:,.0f}")

    def print(self, text: str) -> None:
        if self.bar is not None:
            self.console.print(text, soft_wrap=True)
