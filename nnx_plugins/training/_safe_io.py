"""Writing and reading a run's own files without being led elsewhere.

A run directory may hold what someone else put there: a symbolic link named like a temporary
file (``.metrics.csv.tmp -> ~/thesis.tex``) or like a log, a FIFO, a folder. Every file a run
writes is therefore created anew, exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``: never through
a link, never over an existing file), filled, flushed, and only then renamed over its name
(`os.replace` replaces a link itself, not what it points to); a file a run reads back (its log,
on a resume) is opened without following a link and must be a regular file. Errors are the
`OSError` of the operation, for the caller to report.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training._safe_io import read_regular, write_whole
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> victim = folder / "thesis.tex"
    >>> _ = victim.write_text("years of work")
    >>> (folder / ".log.txt.tmp").symlink_to(victim)      # planted
    >>> write_whole(folder / "log.txt", b"step 1\\n")
    >>> victim.read_text(), read_regular(folder / "log.txt")
    ('years of work', b'step 1\\n')
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import stat
from typing import IO

__all__ = ["write_whole", "open_whole", "read_regular"]

_CREATE = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _temporary(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name}.tmp")


def open_whole(path: str | os.PathLike[str], data: bytes = b"") -> IO[bytes]:
    """``path`` written anew with ``data`` (see the module docstring), returned open for
    appending: the handle holds the file this call created, whatever is renamed there later.

    Raises:
        OSError: it cannot be created or written (a full disk, no permission, a folder of
            that name), or something was planted at its temporary name while it was made.
    """
    path = pathlib.Path(path)
    temporary = _temporary(path)
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(temporary) and not os.path.islink(temporary):
            raise IsADirectoryError(errno.EISDIR, "a folder holds its temporary name", temporary)
        os.unlink(temporary)  # (a leftover, or a planted link: the link goes, not its target)
    fd = os.open(temporary, _CREATE, 0o644)
    handle = os.fdopen(fd, "ab")
    try:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
        if os.path.isdir(path) and not os.path.islink(path):
            raise IsADirectoryError(errno.EISDIR, "a folder holds that name", str(path))
        os.replace(temporary, path)
    except BaseException:
        handle.close()
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return handle


def write_whole(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``path`` anew with ``data`` (see the module docstring)."""
    open_whole(path, data).close()


def read_regular(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (``None`` if nothing is there).

    Raises:
        OSError: it is a symbolic link, a FIFO, a folder or another non-regular file
            (``EINVAL`` naming what it is), or cannot be read.
    """
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "it is a symbolic link: the run reads its own files only", str(path)
            ) from None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file", str(path))
        os.set_blocking(handle.fileno(), True)
        return handle.read()
