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

_INSTALL = "pip install 'nnx-jax[tensorboard]' (or pip install tensorboardX)"


def _summary_writer() -> Any:
    """tensorboardX's ``SummaryWriter``, imported now: a missing or broken tensorboardX (one
    that raises anything on import, e.g. a protobuf mismatch) is refused when the config is
    read, before a run directory exists.

    Raises:
        ValueError: tensorboardX is not installed, or fails to import (its error quoted).
    """
    if importlib.util.find_spec("tensorboardX") is None:
        raise ValueError(
            f"the tensorboard logger writes through tensorboardX, which is not installed: {_INSTALL}."
        )
    try:
        from tensorboardX import SummaryWriter  # (here: an optional extra)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - broken, not missing: any error
        text = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        raise ValueError(
            "the tensorboard logger writes through tensorboardX, which is installed but fails "
            f"to import ({type(error).__name__}{': ' + text if text else ''}); reinstall it "
            f"and its dependencies (e.g. protobuf): {_INSTALL}, or remove the logger."
        ) from None
    return SummaryWriter


def _own_folder(run_dir: pathlib.Path, relative: pathlib.PurePath) -> None:
    """Make ``run_dir / relative`` folder by folder, never through a symbolic link.

    Raises:
        OSError: a part of it is a link or a file.
    """
    where = run_dir
    for part in relative.parts:
        where = where / part
        if where.is_symlink() or (where.exists() and not where.is_dir()):
            raise NotADirectoryError(
                20, "it is a symbolic link or a file, not the logger's own folder", str(where)
            )
        where.mkdir(exist_ok=True)


class TensorBoardLogger(Logger):
    """TensorBoard event files under RUN/<dir>, written by tensorboardX (an optional extra).

    See the module docstring.

    Args:
        dir: the folder inside the run directory.
    """

    def __init__(self, *, dir: str = "tensorboard"):  # noqa: A002 - the config key
        self.writer_type = _summary_writer()
        if not dir or dir.startswith("/") or ".." in pathlib.PurePath(dir).parts:
            raise ValueError(f"dir must be a folder inside the run directory, got {dir!r}.")
        self.dir = dir
        self.writer: Any = None

    def files(self) -> list[str]:
        return [self.dir]

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        where = run_dir / self.dir
        with reported(where):
            _own_folder(run_dir, pathlib.PurePath(self.dir))
            self.writer = self.writer_type(
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
