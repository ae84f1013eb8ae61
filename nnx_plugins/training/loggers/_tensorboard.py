"""The ``tensorboard`` logger: event files TensorBoard reads, written by tensorboardX.

tensorboardX (a small, well-kept writer without TensorFlow) is an optional extra:
``pip install 'nnx-jax[tensorboard]'``. Each value is a scalar tagged ``split/name``
(``train/loss``, ``test/accuracy``); on a resume the events after the checkpoint's step are
purged (TensorBoard hides them). ``tensorboard --logdir runs`` shows every run.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.loggers._tensorboard import TensorBoardLogger
    >>> run_dir = pathlib.Path(tempfile.mkdtemp())
    >>> logger = TensorBoardLogger()
    >>> logger.open(run_dir, 0)
    >>> logger.write({"step": 10, "split": "train", "loss": 0.5})
    >>> logger.close()
    >>> [p.name.startswith("events.out.tfevents") for p in (run_dir / "tensorboard").iterdir()]
    [True]
"""

from __future__ import annotations

import importlib.util
import numbers
import pathlib
import time
from typing import Any

from ._base import Logger, reported

__all__ = ["TensorBoardLogger"]


class TensorBoardLogger(Logger):
    """Event files under ``RUN/<dir>`` (see the module docstring).

    Args:
        dir: the folder inside the run directory.
    """

    def __init__(self, *, dir: str = "tensorboard"):  # noqa: A002 - the config key
        if importlib.util.find_spec("tensorboardX") is None:
            raise ValueError(
                "the tensorboard logger writes through tensorboardX, which is not installed: "
                "pip install 'nnx-jax[tensorboard]' (or pip install tensorboardX)."
            )
        if not dir or dir.startswith("/") or ".." in pathlib.PurePath(dir).parts:
            raise ValueError(f"dir must be a folder inside the run directory, got {dir!r}.")
        self.dir = dir
        self.writer: Any = None

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        from tensorboardX import SummaryWriter  # (here: an optional extra)

        where = run_dir / self.dir
        with reported(where):
            self.writer = SummaryWriter(
                logdir=str(where),
                purge_step=start + 1 if start > 0 else None,  # (steps after the checkpoint)
                # (a resume in the same second must not overwrite the file of the run before)
                filename_suffix=f".{time.time_ns()}",
            )

    def write(self, record: dict[str, Any]) -> None:
        step, split = record["step"], record.get("split", "")
        for key, value in record.items():
            if key in ("step", "split") or isinstance(value, bool):
                continue
            if isinstance(value, numbers.Real):
                self.writer.add_scalar(f"{split}/{key}" if split else key, float(value), step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
