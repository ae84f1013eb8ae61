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

import contextlib
import json
import os
import pathlib
from collections.abc import Iterator
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

from .._text import os_problem
from ._run_dir import RunError

__all__ = ["MetricsLog", "Progress", "plot_metrics"]


class MetricsLog:
    """``metrics.jsonl`` in the run directory; on resume, lines after the start step are dropped."""

    def __init__(self, path: pathlib.Path, start: int, *, writes: bool = True):
        self.path, self.writes = path, writes
        self.records: list[dict[str, Any]] = []
        with _reported(path):
            if start > 0 and path.exists():
                with open(path, encoding="utf-8") as handle:
                    lines = [_parse(line) for line in handle]
                self.records = [r for r in lines if r is not None and r.get("step", 0) <= start]
            if writes:  # (replaced whole, so that a failed write cannot truncate the old log)
                temporary = path.with_name(f".{path.name}.tmp")
                with open(temporary, "w", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(r) + "\n" for r in self.records)
                os.replace(temporary, path)

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.writes:
            with _reported(self.path), open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


@contextlib.contextmanager
def _reported(path: str | os.PathLike[str]) -> Iterator[None]:
    """OS errors while writing a run's report files become a `RunError` naming the file."""
    try:
        yield
    except OSError as error:
        raise RunError(
            f"cannot write {path}: {os_problem(error)}. The checkpoints written so far are "
            "intact; free space or fix permissions, then continue with --resume."
        ) from error


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
    with _reported(path):
        figure.savefig(path, dpi=80)


class Progress:
    """A rich progress bar with loss and throughput (or none), and the run's report lines."""

    def __init__(self, enabled: bool, total: int, start: int, console: Any):
        # lines (evaluations, resume notes) go to `console`; without one, to stdout while a
        # bar is shown and nowhere otherwise
        self.lines = console is not None or enabled
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
        if self.lines:
            self.console.print(text, soft_wrap=True)
