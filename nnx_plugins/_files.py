"""Files and folders made under a temporary name get the permissions a plain ``open`` or
``mkdir`` would have given them.

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

__all__ = ["usual_mode", "umask"]


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
