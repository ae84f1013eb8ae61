"""The run directory: choosing it, owning it (one run at a time), and OS errors said plainly.

A run holds an advisory lock on ``<run dir>/.nnx-run.lock`` (``fcntl.flock``) from start to end,
so a second ``nnx train`` into the same directory stops at once with the first one's process
id, host and start time, before it reads or writes anything there. The lock is released by the
operating system when the process ends, however it ends.

A run writes only into a directory that is new, empty, or a run directory already (it holds the
lock file every run leaves): never among a user's own files, never over the config it reads.
The lock file is opened without following a symbolic link and must be a plain file of one link,
so a planted link cannot make a run write outside its directory.

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

import contextlib
import errno
import itertools
import json
import os
import pathlib
import re
import socket
import stat
import time
from typing import Any

from .._errors import NnxError
from .._text import os_problem
from .checkpoints._save import latest_checkpoint

try:  # POSIX; elsewhere runs are not locked (documented in docs/limits.md)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "RunError",
    "RunLock",
    "LOCK_NAME",
    "RUN_FILES",
    "choose_run_dir",
    "check_new_run",
    "remove_unstarted",
]

LOCK_NAME = ".nnx-run.lock"
RUN_FILES = (
    "config.yaml",
    ".config.yaml.tmp",
    "metrics.jsonl",
    ".metrics.jsonl.tmp",
    "metrics.png",
)
"""The files a run writes in its directory (besides the lock and the checkpoints)."""
_NOTE_BYTES = 4096  # the most of a lock note that is read
_PATH_MAX, _NAME_MAX = 4096, 255  # (Linux's; checked before a directory is made)
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_FLAT_OBJECT = re.compile(rb"\{[^\[\]{}]*\}\Z")  # (its strings blanked: one object, nothing deeper)
_OPEN_LOCK = (
    os.O_RDWR
    | os.O_CREAT
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


class RunError(NnxError, ValueError):
    """A run cannot start or go on: its directory is unusable or in use, or the devices or
    batch do not fit. The message names the path (or process) and how to fix it."""


def choose_run_dir(
    config: Any, run_dir: str | os.PathLike[str] | None, resume: bool
) -> pathlib.Path:
    """The run directory, checked before anything is read or written.

    Without ``run_dir``: ``runs/<config name>``, or when that exists the first free
    ``runs/<config name>-N`` (N = 1, 2, ...); with ``resume``, the one of them whose newest
    checkpoint was written last.

    Raises:
        RunError: ``run_dir`` is empty, a file or a dangling link, or its ``config.yaml`` is a
            file the config is read from.
    """
    if run_dir is None:
        stem = pathlib.Path(config.source).stem if config.source != "<dict>" else "run"
        chosen = _newest_run("runs", stem, config) if resume else None
        chosen = chosen or _first_free("runs", stem)
    else:
        if not os.fspath(run_dir).strip():
            raise RunError(
                "--run-dir is empty (an unset shell variable?). Give the directory the run "
                "writes to, or leave the option out for runs/<config name>."
            )
        chosen = pathlib.Path(run_dir)
        _check_explicit(chosen)
    _refuse_own_config(chosen, config)
    return chosen


def _check_explicit(chosen: pathlib.Path) -> None:
    """Refuse a ``--run-dir`` that cannot be a directory (a file, a dangling link, a path the
    system refuses, e.g. too long)."""
    try:
        info = os.stat(chosen)
    except FileNotFoundError:
        if os.path.islink(chosen):
            raise RunError(
                f"--run-dir {chosen} is a symbolic link to {os.readlink(chosen)}, which does "
                "not exist. Create its target, or choose another directory."
            ) from None
        return
    except OSError as error:
        raise RunError(
            f"cannot use --run-dir {str(chosen)[:200]}: {os_problem(error)}. Choose another "
            "directory."
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise RunError(
            f"--run-dir {chosen} is a file, not a directory. Choose a directory "
            "(it is created if missing)."
        )


def _candidates(root: str, stem: str) -> Any:
    yield pathlib.Path(root) / stem
    for number in itertools.count(1):
        yield pathlib.Path(root) / f"{stem}-{number}"


def _first_free(root: str, stem: str) -> pathlib.Path:
    """The first of ``root/stem``, ``root/stem-1``, ... that does not exist or is empty."""
    for candidate in _candidates(root, stem):
        if not os.path.lexists(candidate) or (
            candidate.is_dir() and not candidate.is_symlink() and not any(candidate.iterdir())
        ):
            return candidate
    raise AssertionError("unreachable")  # pragma: no cover - the candidates never end


def _newest_run(root: str, stem: str, config: Any) -> pathlib.Path | None:
    """Of ``root/stem`` and ``root/stem-N``, the one whose newest checkpoint was written last."""
    pattern = re.compile(rf"{re.escape(stem)}(?:-[1-9][0-9]*)?\Z")
    try:
        with os.scandir(root) as entries:
            names = [entry.name for entry in entries if pattern.match(entry.name)]
    except OSError:
        return None
    found = []
    for name in names:
        latest = latest_checkpoint(pathlib.Path(root) / name / config.sections["checkpoint"].dir)
        if latest is not None:
            found.append((latest.stat().st_mtime, _number(name, stem), pathlib.Path(root) / name))
    return max(found)[2] if found else None


def _number(name: str, stem: str) -> int:
    return int(name[len(stem) + 1 :]) if name != stem else 0


def _refuse_foreign(run_dir: pathlib.Path) -> None:
    """Refuse a directory that holds files but is not a run directory (no lock file in it)."""
    if os.path.lexists(run_dir / LOCK_NAME):
        return
    try:
        with os.scandir(run_dir) as entries:
            names = sorted(entry.name for entry in itertools.islice(entries, 4))
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as error:
        raise RunError(
            f"cannot use the run directory {run_dir}: {os_problem(error)}. Choose another "
            "--run-dir, or fix its permissions."
        ) from error
    if names:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise RunError(
            f"--run-dir {run_dir} holds files that are not a run's ({shown}). A run writes "
            "config.yaml, metrics.jsonl, metrics.png and checkpoints/ into its directory, "
            "replacing files of those names: choose a new or empty directory, e.g. "
            f"--run-dir {run_dir / 'run'}."
        )


def _refuse_own_config(run_dir: pathlib.Path, config: Any) -> None:
    """Refuse a run whose ``config.yaml`` (the resolved config it saves) is a file it reads."""
    target = run_dir / "config.yaml"
    try:
        os.stat(target)
    except OSError:  # (none there; a path too long is refused when the directory is made)
        return
    for read in getattr(config, "files", ()):
        try:
            same = os.path.samefile(read, target)
        except OSError:
            continue
        if same:
            raise RunError(
                f"the run would replace {target}, a config file it reads ({read}), with the "
                "resolved config (comments and includes lost). Choose another --run-dir, "
                "or copy the config elsewhere and train from the copy."
            )


def check_new_run(run_dir: pathlib.Path, checkpoints: pathlib.Path, resume: bool) -> None:
    """Check the run's files and checkpoint directory before training (holding the `RunLock`).

    Raises:
        RunError: a file the run writes is a symbolic link; ``checkpoints`` (or a folder on
            the way to it) is a file or a dangling symbolic link; or it holds a checkpoint and
            ``resume`` is False.
    """
    for name in RUN_FILES:
        if (run_dir / name).is_symlink():
            raise RunError(
                f"{run_dir / name} is a symbolic link (to {os.readlink(run_dir / name)}): the "
                "run writes that file, and never through a link. Remove the link, or choose "
                "another --run-dir."
            )
    here = run_dir
    for part in checkpoints.relative_to(run_dir).parts:
        here = here / part
        if here.is_symlink() and not here.exists():
            raise RunError(
                f"{here} is a symbolic link to {os.readlink(here)}, which does not exist: "
                "checkpoints could not be saved there. Remove the link or create its target, "
                "or choose another --run-dir."
            )
        if here.exists() and not here.is_dir():
            raise RunError(
                f"{here} is a file, not a directory: checkpoints could not be saved there. "
                "Move the file away, or choose another --run-dir (or checkpoint.dir)."
            )
    found = latest_checkpoint(checkpoints)
    if found is not None and not resume:
        raise RunError(
            f"{run_dir} already holds checkpoints (newest: {found.name}). Pass --resume "
            "(resume=True) to continue that run, or choose another --run-dir."
        )


class RunLock:
    """Hold the run directory for this process (creating the directory if needed).

    Raises:
        RunError: the directory holds files but is not a run directory (no lock file in it),
            another process holds it (named), the lock path is not a plain file of its
            own (a symbolic link, a directory, a hard link: named), or the directory cannot be
            created or written (the reason said plainly).
    """

    def __init__(self, run_dir: pathlib.Path):
        self.run_dir = pathlib.Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        _refuse_foreign(self.run_dir)  # (before anything is created there)
        try:
            _make_directories(self.run_dir)
            fd = os.open(self.path, _OPEN_LOCK, 0o644)  # (never through a symbolic link)
        except OSError as error:
            raise RunError(self._open_problem(error)) from error
        try:
            self._check_plain(fd)
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise RunError(
                        f"another nnx train is using the run directory {self.run_dir}: "
                        f"{_read_holder(fd)}. Wait for it to finish, or choose another --run-dir."
                    ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        _write_holder(fd)
        return self

    def _open_problem(self, error: OSError) -> str:
        if os.path.islink(self.path):
            return (
                f"the lock file {self.path} is a symbolic link (to {os.readlink(self.path)}); "
                "nnx never follows a link there, so that a run cannot write outside its "
                "directory. Remove the link if no run is using the directory, or choose "
                "another --run-dir."
            )
        if os.path.isdir(self.path):
            return (
                f"the lock file {self.path} is a directory. Remove it if no run is using the "
                "directory, or choose another --run-dir."
            )
        return (
            f"cannot use the run directory {str(self.run_dir)[:200]}: {os_problem(error)}. "
            "Choose another --run-dir, or fix its permissions."
        )

    def _check_plain(self, fd: int) -> None:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            what = "has other hard links" if stat.S_ISREG(info.st_mode) else "is not a file"
            raise RunError(
                f"the lock file {self.path} {what}: nnx writes its note there and would change "
                "another file. Remove it if no run is using the directory, or choose another "
                "--run-dir."
            )

    def __exit__(self, *exc: Any) -> None:
        fd, self._fd = self._fd, None  # (first: a stop in between never closes it twice)
        if fd is not None:
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)  # (for a forked child's copy too)
            finally:
                os.close(fd)


def remove_unstarted(run_dir: pathlib.Path) -> None:
    """Remove a run directory this run created and that holds only what its start wrote (the
    lock file and ``config.yaml``): a run refused before its first step leaves nothing behind,
    and the next run without ``--run-dir`` takes the same name. Anything else in it (another
    file, a checkpoint) keeps the whole directory as it is."""
    ours = {LOCK_NAME, "config.yaml"}
    try:
        if not set(os.listdir(run_dir)) <= ours:
            return
        for name in ours:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(run_dir / name)
        os.rmdir(run_dir)
    except OSError:  # (what cannot be removed stays: the run's own error is the one to report)
        pass


def _make_directories(path: pathlib.Path) -> None:
    """``mkdir -p`` without recursion (a path of thousands of parts is an OSError, not a
    RecursionError), creating nothing when the lock file's path would be too long."""
    whole = os.fsencode(os.path.abspath(path / LOCK_NAME))
    if len(whole) >= _PATH_MAX or any(len(part) > _NAME_MAX for part in whole.split(b"/")):
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(path)[:200])
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                raise


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
    """Who holds the lock, from its note: at most 4 KiB read, one flat JSON object parsed."""
    unknown = "a process that did not say who it is"
    try:
        raw = os.pread(fd, _NOTE_BYTES, 0).strip()
    except OSError:
        return unknown
    if not _FLAT_OBJECT.match(_JSON_STRING.sub(b'""', raw)):
        return unknown
    try:
        record = json.loads(raw)
        pid = record["pid"]
        host, started = _printable(record["host"]), _printable(record["started"])
    except (ValueError, KeyError, TypeError):
        return unknown
    if isinstance(pid, bool) or not isinstance(pid, int):
        return unknown
    return f"process {pid} on {host}, started {started}"


def _printable(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    text = "".join(c for c in value if c.isprintable())
    return text if len(text) <= 80 else text[:77] + "..."
