"""The progress bar of a run (loss and throughput) and its report lines.

Example:
    >>> from nnx_plugins.training._progress import Progress
    >>> with Progress(False, 10, 0, None) as bar:
    ...     bar.update(5, 0.25, 100.0)
    ...     bar.print("not shown: no bar and no console")
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

__all__ = ["Progress"]


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
