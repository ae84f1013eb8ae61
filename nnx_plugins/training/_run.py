"""`Run`: what a run's loggers and callbacks see of it (the ``run`` argument of every hook).

Example:
    >>> import pathlib
    >>> from nnx_plugins.training._run import Run
    >>> run = Run(config=None, run_dir=pathlib.Path("runs/x"), model=None, optimizer=None,
    ...           task=None, data=None, info=None, total=100)
    >>> run.step, run.finished, run.is_main, run.restored_step
    (0, False, True, None)
    >>> run.print("not shown: this run has no console")
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

__all__ = ["Run"]


@dataclasses.dataclass
class Run:
    """A run in progress: what a callback's hooks (and a logger's, through the records) see.

    A callback reads everything here and may change the values of ``model``'s Variables (an
    EMA, restoring the best weights) and `restored_step`; it must not replace ``model`` or
    ``optimizer`` themselves, nor the ``records`` list: the run keeps its own references.

    Attributes:
        config: the resolved `Config` (every section validated, defaults filled in).
        run_dir: the run directory.
        model, optimizer: the objects being trained (Variables updated in place each step).
        task, data: the task and dataset instances; ``info`` the data's `DataInfo`.
        total: the last step of the run (``train.steps`` or the epochs' steps).
        step: the step trained last.
        finished: set when the run ends for good (the last step, or a callback stopped it);
            not when it stops to resume later (``stop_at``).
        is_main: whether this process reports (process 0).
        records: every record logged so far (on a resume, those kept from before).
        stopped_by: the callback that stopped the run early, if any.
        saved: the step of the checkpoint written last by the loop.
        results: the last evaluation's values, by split (``val``, ``test``, ``val_ema``, ...),
            and ``results_step`` the step it was made at.
        restored_step: set by a callback that put the weights of an earlier evaluation back
            into ``model`` at the end (``early_stopping`` with ``restore_best``): the final
            test figures are then reported as that step's weights, not the last step's.
        printer: where `print` sends a line (the run's console; ``None``: nowhere).
    """

    config: Any
    run_dir: pathlib.Path
    model: Any
    optimizer: Any
    task: Any
    data: Any
    info: Any
    total: int
    step: int = 0
    finished: bool = False
    is_main: bool = True
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stopped_by: str | None = None
    saved: int | None = None
    results: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    results_step: int | None = None
    restored_step: int | None = None
    printer: Callable[[str], None] | None = dataclasses.field(default=None, repr=False)

    def print(self, text: str) -> None:
        """Print one line on the run's console (process 0 only; beside the progress bar)."""
        if self.printer is not None and self.is_main:
            self.printer(text)
