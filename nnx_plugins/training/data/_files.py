"""Opening data files safely: regular files only, opened without blocking, sizes bounded.

A FIFO, a terminal, ``/dev/stdin`` or a directory named as a data file is refused at once
(opening a FIFO with ``O_NONBLOCK`` returns at once instead of waiting for a writer), and no
data source reads more than `data_limit` bytes into memory: the host's available memory, or
``NNX_DATA_MAX_BYTES``.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.data._files import open_regular
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_text("hi")
    >>> with open_regular(path) as handle:
    ...     handle.read()
    b'hi'
"""

from __future__ import annotations

import os
from typing import IO

from ..._files import NotRegularFile
from ..._files import open_regular as open_file
from ..._text import os_problem
from .._memory import human_bytes
from ._base import DataError

__all__ = ["LIMIT_VARIABLE", "data_limit", "open_regular", "check_size"]

LIMIT_VARIABLE = "NNX_DATA_MAX_BYTES"


def data_limit() -> int:
    """The most bytes a data source may hold in memory: ``NNX_DATA_MAX_BYTES``, else the
    host's available memory.

    Raises:
        DataError: ``NNX_DATA_MAX_BYTES`` is not a positive whole number.
    """
    raw = os.environ.get(LIMIT_VARIABLE)
    if raw is None:
        from .._memory import _host_available  # (the host figure, not a device's)

        return _host_available()
    if not raw.strip().isdigit() or int(raw) < 1:
        raise DataError(f"{LIMIT_VARIABLE}={raw!r} is not a positive whole number of bytes.")
    return int(raw)


def check_size(nbytes: int, what: str) -> None:
    """Refuse to read ``nbytes`` into memory when it is past `data_limit`."""
    limit = data_limit()
    if nbytes > limit:
        source = (
            f"{LIMIT_VARIABLE}={limit}"
            if LIMIT_VARIABLE in os.environ
            else "the available host memory"
        )
        raise DataError(
            f"{what} needs {human_bytes(nbytes)} ({nbytes:,} bytes) in memory, more than "
            f"{source} ({human_bytes(limit)}). Use a smaller file, a dataset that streams "
            f"from disk, or raise {LIMIT_VARIABLE}.",
            key="path",
        )


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open ``path`` for reading in binary, refusing anything but a regular file
    (`nnx_plugins._files.open_regular`, its errors as `DataError`).

    Raises:
        DataError: no such file, not a regular file (naming what it is), or unreadable.
    """
    name = os.fspath(path)
    try:
        return open_file(name)
    except FileNotFoundError:
        raise DataError(f"no such file {name!r}.", key="path") from None
    except IsADirectoryError:
        raise DataError(f"{name!r} is a directory, not a data file.", key="path") from None
    except OSError as error:
        raise DataError(f"cannot open {name!r}: {os_problem(error)}.", key="path") from None
    except NotRegularFile as error:
        raise DataError(
            f"{name!r} is {error.kind}, not a regular file; data is read from regular files "
            "only (save it to a file first).",
            key="path",
        ) from None
