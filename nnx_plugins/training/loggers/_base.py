"""The `Logger` interface, and the file handling the built-in loggers share.

A logger is a class whose ``__init__`` arguments are its config (``loggers: [{type: NAME,
...}]``). The run calls ``open(run_dir, start_step)`` once (on a resume, ``start_step`` is the
checkpoint's step: what was logged after it is dropped), ``write(record)`` for each record
(``{"step", "split", ...values}``; ``split`` is ``train``, ``val``, ``test``, or ``val_<model>``
and ``test_<model>`` for a model a callback adds), and ``close()`` at the end. Only process 0
of a multi-process run logs.

A logger writes only files of its own (``files()``, checked before the run starts: `_run_files`)
and creates them safely: `start_file` makes a file anew (never through a symbolic link, never
truncating a file someone planted) and keeps it open for the records; `read_lines` reads its
previous records back on a resume.

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
from typing import IO, Any

from ..._text import os_problem
from .._run_dir import RunError
from .._safe_io import open_whole, read_regular, write_whole

__all__ = [
    "Logger",
    "reported",
    "replace_file",
    "start_file",
    "read_lines",
    "append",
]


class Logger:
    """Base class of loggers: `write` is required, `open`, `close` and `files` optional."""

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        """Start logging into ``run_dir``, keeping only what was logged up to step ``start``."""

    def write(self, record: dict[str, Any]) -> None:
        """Log one record."""
        raise NotImplementedError(f"{type(self).__name__} does not define write().")

    def close(self) -> None:
        """Flush and release what `open` took."""

    def files(self) -> list[str]:
        """The files (or folders) it writes, relative to the run directory; checked before
        the run starts (none may be the run's own, nor another part's). By default, those its
        ``file`` or ``dir`` attribute names."""
        return [v for k in ("file", "dir") if isinstance(v := getattr(self, k, None), str)]

    @staticmethod
    def create(path: pathlib.Path, lines: list[str]) -> IO[bytes]:
        """``path`` written anew with ``lines``, open for appending: never through a symbolic
        link planted in the run directory, never truncating someone's file (`start_file`)."""
        return start_file(path, lines)

    @staticmethod
    def read(path: pathlib.Path) -> list[str]:
        """The lines of the logger's own file (none if missing); a link or FIFO planted there
        is refused, not followed (`read_lines`)."""
        return read_lines(path)


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
    """Write ``lines`` to ``path`` whole (created anew, never through a link: `_safe_io`), so
    that a failed write cannot truncate what was there."""
    with reported(path):
        write_whole(path, "".join(lines).encode("utf-8"))


def start_file(path: pathlib.Path, lines: list[str]) -> IO[bytes]:
    """``path`` written anew with ``lines`` (as `replace_file`), open for appending records:
    the handle holds the file it created, whatever is later renamed or planted at ``path``."""
    with reported(path):
        return open_whole(path, "".join(lines).encode("utf-8"))


def read_lines(path: pathlib.Path) -> list[str]:
    """The lines of the run's own file ``path`` (none if it is missing); a link or a FIFO
    planted there is refused, never followed.

    Raises:
        RunError: it is not a regular file, or cannot be read.
    """
    try:
        data = read_regular(path)
    except OSError as error:
        raise RunError(
            f"cannot read {path}: {os_problem(error)}. Remove it if it is not the run's own "
            "log, then continue with --resume."
        ) from error
    return [] if data is None else data.decode("utf-8", errors="replace").splitlines(True)


def append(handle: IO[bytes] | None, path: Any, lines: list[str], logger: str) -> None:
    """Append ``lines`` to the file `start_file` opened (flushed: a killed run keeps them)."""
    if handle is None:
        raise RuntimeError(f"{logger}.write before open().")
    with reported(path):
        handle.write("".join(lines).encode("utf-8"))
        handle.flush()
