"""The `Logger` interface, and the file handling the built-in loggers share.

A logger is a class whose ``__init__`` arguments are its config (``loggers: [{type: NAME,
...}]``). The run calls ``open(run_dir, start_step)`` once (on a resume, ``start_step`` is the
checkpoint's step: what was logged after it is dropped), ``write(record)`` for each record
(``{"step", "split", ...values}``; ``split`` is ``train``, ``test`` or ``test_<model>``), and
``close()`` at the end. Only process 0 of a multi-process run logs.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.loggers._base import Logger
    >>> class Remember(Logger):
    ...     def __init__(self):
    ...         self.seen = []
    ...     def write(self, record):
    ...         self.seen.append(record["step"])
    >>> logger = Remember()
    >>> logger.open(pathlib.Path(tempfile.mkdtemp()), 0); logger.write({"step": 1, "split": "train"})
    >>> logger.seen
    [1]
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from ..._text import os_problem
from .._run_dir import RunError

__all__ = ["Logger", "reported", "replace_file"]


class Logger:
    """Base class of loggers: `write` is required, `open` and `close` optional."""

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        """Start logging into ``run_dir``, keeping only what was logged up to step ``start``."""

    def write(self, record: dict[str, Any]) -> None:
        """Log one record."""
        raise NotImplementedError(f"{type(self).__name__} does not define write().")

    def close(self) -> None:
        """Flush and release what `open` took."""


@contextlib.contextmanager
def reported(path: str | os.PathLike[str]) -> Iterator[None]:
    """OS errors while writing a run's report files become a `RunError` naming the file."""
    try:
        yield
    except OSError as error:
        raise RunError(
            f"cannot write {path}: {os_problem(error)}. The checkpoints written so far are "
            "intact; free space or fix permissions, then continue with --resume."
        ) from error


def replace_file(path: pathlib.Path, lines: list[str]) -> None:
    """Write ``lines`` to ``path`` whole (a temporary file renamed over it), so that a failed
    write cannot truncate what was there."""
    temporary = path.with_name(f".{path.name}.tmp")
    with reported(path):
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            handle.writelines(lines)
        os.replace(temporary, path)
