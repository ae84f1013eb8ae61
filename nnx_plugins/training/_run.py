"""`Run`: what a run's loggers and callbacks see of it.

Example:
    >>> import pathlib
    >>> from nnx_plugins.training._run import Run
    >>> run = Run(config=None, run_dir=pathlib.Path("runs/x"), model=None, optimizer=None,
    ...           task=None, data=None, info=None, total=100)
    >>> run.step, run.finished, run.is_main
    (0, False, True)
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

__all__ = ["Run"]


@dataclasses.dataclass
class Run:
    """A run in progress.

    Attributes:
        config: the resolved `Config`.
        run_dir: the run directory.
        model, optimizer: the objects being trained.
        task, data: the task and dataset instances; ``info`` the data's `DataInfo`.
        total: the last step of the run (``train.steps`` or the epochs' steps).
        step: the step trained last.
        finished: set when the run ends for good (the last step, or a callback stopped it);
            not when it stops to resume later (``stop_at``).
        is_main: whether this process reports (process 0).
        records: every record logged so far (on a resume, those kept from before).
        stopped_by: the callback that stopped the run early, if any.
        saved: the step of the checkpoint written last by the loop.
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
