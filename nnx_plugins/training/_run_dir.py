"""The run directory: choosing it, owning it (one run at a time), and OS errors said plainly.

A run holds an advisory lock on ``<run dir>/.nnx-run.lock`` (``fcntl.flock``) from start to end,
so a second ``nnx train`` into the same directory stops at once with the first one's process
id, host and start time, before it reads or writes anything there. The lock is released by the
operating system when the process ends, however it ends.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training._run_dir import RunError, RunLock
    >>> where = pathlib.Path(tempfile.mkdtemp())
    >>> with RunLock(where):
    ...     try:
    ...         with RunLock(where):
    ...             pass
    ...     except RunError as error:
    ...         print(str(error).split(":")[0])
    another nnx train is using the run directory ...
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import time
from typing import Any

from .._errors import NnxError
from .._text import os_problem
from .checkpoints._save import latest_checkpoint

try:  # POSIX; elsewhere runs are not locked (documented in docs/limits.md)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["RunError", "RunLock", "LOCK_NAME", "choose_run_dir", "check_new_run"]

LOCK_NAME = ".nnx-run.lock"


class RunError(NnxError, ValueError):
    """A run cannot start or go on: its directory is unusable or in use, or the devices or
    batch do not fit. The message names the path (or process) and how to fix it."""


def choose_run_dir(
    config: Any, run_dir: str | os.PathLike[str] | None, resume: bool
) -> pathlib.Path:
    """The run directory; the default ``runs/<name>`` becomes ``runs/<name>-2``, ... rather than
    mixing a new run with an old run's checkpoints (``resume`` picks the newest of them).

    Raises:
        RunError: ``run_dir`` is a file.
    """
    subdir = config.sections["checkpoint"].dir
    if run_dir is not None:
        run_dir = pathlib.Path(run_dir)
        if run_dir.exists() and not run_dir.is_dir():
            raise RunError(
                f"--run-dir {run_dir} is a file, not a directory. Choose a directory "
                "(it is created if missing)."
            )
        return run_dir
    stem = pathlib.Path(config.source).stem if config.source != "<dict>" else "run"
    candidates = [
        pathlib.Path("runs") / (stem if i == 1 else f"{stem}-{i}") for i in range(1, 10_000)
    ]
    used = [c for c in candidates[:-1] if latest_checkpoint(c / subdir) is not None]
    if resume:
        return used[-1] if used else candidates[0]
    return next(c for c in candidates if latest_checkpoint(c / subdir) is None)


def check_new_run(run_dir: pathlib.Path, checkpoints: pathlib.Path, resume: bool) -> None:
    """Refuse to start a new run where one has checkpoints (call it holding the `RunLock`).

    Raises:
        RunError: ``checkpoints`` holds a checkpoint and ``resume`` is False.
    """
    found = latest_checkpoint(checkpoints)
    if found is not None and not resume:
        raise RunError(
            f"{run_dir} already holds checkpoints (newest: {found.name}). Pass --resume "
            "(resume=True) to continue that run, or choose another --run-dir."
        )


class RunLock:
    """Hold the run directory for this process (creating the directory if needed).

    Raises:
        RunError: another process holds it (named), or the directory cannot be created or
            written (the reason said plainly).
    """

    def __init__(self, run_dir: pathlib.Path):
        self.run_dir = pathlib.Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise RunError(
                f"cannot use the run directory {self.run_dir}: {os_problem(error)}. Choose "
                "another --run-dir, or fix its permissions."
            ) from error
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunError(
                    f"another nnx train is using the run directory {self.run_dir}: {holder}. "
                    "Wait for it to finish, or choose another --run-dir."
                ) from None
        self._fd = fd
        _write_holder(fd)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _write_holder(fd: int) -> None:
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
    except OSError:  # the lock itself is what counts; its note is for people
        pass


def _read_holder(fd: int) -> str:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"process {int(record['pid'])} on {record['host']}, started {record['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not say who it is"
