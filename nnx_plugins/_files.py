"""Files: reading a regular file bounded (`read_regular`); and files and folders made under a
temporary name get the permissions a plain ``open`` or ``mkdir`` would have given them.

`tempfile.mkdtemp` and `tempfile.mkstemp` make what they create private (0700, 0600) whatever
the user's umask: right for a scratch file, wrong for a checkpoint, an imported model or an
export renamed into place for others (a group, a serving job) to read. `usual_mode` gives the
temporary the mode ``0o777 & ~umask`` (a folder) or ``0o666 & ~umask`` (a file) before the
rename.

Example:
    >>> import os, pathlib, stat, tempfile
    >>> from nnx_plugins._files import umask, usual_mode
    >>> made = pathlib.Path(tempfile.mkdtemp())
    >>> stat.S_IMODE(made.stat().st_mode) == 0o700
    True
    >>> usual_mode(made)
    >>> stat.S_IMODE(made.stat().st_mode) == 0o777 & ~umask()
    True
"""

from __future__ import annotations

import os
import pathlib
import stat
from typing import IO

__all__ = [
    "usual_mode",
    "umask",
    "NotRegularFile",
    "open_regular",
    "read_regular",
    "file_kind",
    "plain_name",
]

_KINDS = {
    stat.S_ISFIFO: "a FIFO (named pipe)",
    stat.S_ISCHR: "a character device (a terminal or /dev/...)",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
    stat.S_ISDIR: "a directory",
}


def plain_name(name: object) -> bool:
    """Whether ``name`` (read from a manifest or an index) is a plain file name: one that
    stays inside the folder it is joined to (no separator, no ``..``, no NUL).

    Example:
        >>> from nnx_plugins._files import plain_name
        >>> plain_name("model-00001.safetensors"), plain_name("../x"), plain_name("..")
        (True, False, False)
    """
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and name == os.path.basename(name)
        and "\\" not in name
        and "\x00" not in name
    )


def file_kind(mode: int) -> str:
    """What a non-regular file of ``mode`` (``st_mode``) is, in words."""
    return next((text for test, text in _KINDS.items() if test(mode)), "not a file")


class NotRegularFile(ValueError):
    """``path`` is not a regular file; ``.kind`` says what it is (`file_kind`)."""

    def __init__(self, kind: str):
        self.kind = kind
        super().__init__(f"it is {kind}, not a regular file")


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` opened for reading in binary, refusing anything but a regular file before a
    byte is read (a device's size is 0 and its bytes endless; opening a FIFO for reading would
    wait for a writer: it is opened non-blocking, checked, then made blocking).

    Raises:
        NotRegularFile: it is not a regular file (a ValueError naming what it is).
        OSError: it cannot be opened.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(os.fspath(path), flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(file_kind(mode))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    # (outside the try: from the moment it exists the file object owns ``fd``, and closes it
    # when dropped, as it is when a stop lands just after this call; closing ``fd`` again
    # here raised EBADF in place of the stop, or closed a file another thread had opened)
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file ``path`` (`open_regular`), at most ``limit`` of them.

    Raises:
        ValueError: it is not a regular file (naming what it is), or holds over ``limit`` bytes.
        OSError: it cannot be opened or read.

    Example:
        >>> from nnx_plugins._files import read_regular
        >>> try:
        ...     read_regular("/dev/zero", 100)
        ... except ValueError as error:
        ...     print(error)
        it is a character device (a terminal or /dev/...), not a regular file
    """
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise ValueError(f"it holds {size:,} bytes, more than {limit:,}")
        data = handle.read(size + 1)  # (one more: a file growing meanwhile is read no further)
        while len(data) <= limit and (more := handle.read(1 << 20)):
            data += more
    if len(data) > limit:
        raise ValueError(f"it holds more than {limit:,} bytes")
    return data


def umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux's
    ``/proc/self/status``); elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def usual_mode(path: str | os.PathLike[str]) -> None:
    """Give ``path`` (a folder or a file) the mode ``mkdir``/``open`` would have given it."""
    path = pathlib.Path(path)
    base = 0o777 if path.is_dir() else 0o666
    os.chmod(path, base & ~umask())
