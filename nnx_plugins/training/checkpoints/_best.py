"""``checkpoint.keep_best``: which checkpoint is the best so far, kept beside the newest ones.

``CHECKPOINTS/best.json`` names it (``{"step", "directory", "metric", "mode", "value"}``),
written atomically by process 0 after the checkpoint itself; rotation never deletes it. The
best checkpoint is a normal checkpoint: ``nnx eval FILE --checkpoint CHECKPOINTS/step_N``.
A record chosen by another metric or mode (a resumed run that watches something else) or one
that is malformed is ignored: the best is then chosen anew, never compared across metrics.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.checkpoints._best import improves, read_best, write_best
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> improves(0.5, None, "min"), improves(0.5, 0.4, "min"), improves(0.5, 0.4, "max")
    (True, False, True)
    >>> write_best(root, step=20, metric="val.loss", mode="min", value=0.25)
    >>> read_best(root)["directory"], read_best(root, metric="val.accuracy")
    ('step_00000020', None)
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any

from .._safe_io import read_regular, write_whole

__all__ = ["BEST_FILE", "improves", "read_best", "write_best"]

BEST_FILE = "best.json"
_MAX_BYTES = 65536


def improves(value: float, best: float | None, mode: str, min_delta: float = 0.0) -> bool:
    """Whether ``value`` beats ``best`` (``None``: nothing yet) by more than ``min_delta``;
    a non-finite value never does."""
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if mode == "min" else value > best + min_delta


def read_best(
    root: str | os.PathLike[str], *, metric: str | None = None, mode: str | None = None
) -> dict[str, Any] | None:
    """The best-checkpoint record under ``root``, or ``None``: none, unreadable or malformed
    (a value that is not a finite number, a step that is not a whole number, a directory
    that is not that step's), or chosen by another ``metric`` or ``mode`` than those given. A
    new best is then chosen from the next evaluations.

    Example:
        >>> import pathlib, tempfile
        >>> from nnx_plugins.training.checkpoints._best import read_best
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (root / "best.json").write_text('{"step": 2, "directory": "step_00000002", '
        ...     '"metric": "val.loss", "mode": "min", "value": "0.5"}')
        >>> read_best(root) is None  # (the value is a string)
        True
    """
    path = pathlib.Path(root) / BEST_FILE
    try:
        data = read_regular(path)
        if data is None or len(data) > _MAX_BYTES:
            return None
        record = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not _well_formed(record):
        return None
    if (metric is not None and record.get("metric") != metric) or (
        mode is not None and record.get("mode") != mode
    ):
        return None
    return record


def _well_formed(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    step, value, directory = record.get("step"), record.get("value"), record.get("directory")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return False
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return directory == f"step_{step:08d}" and record.get("mode", "min") in ("min", "max")


def write_best(
    root: str | os.PathLike[str], *, step: int, metric: str, mode: str, value: float
) -> None:
    """Record the checkpoint of ``step`` as the best (atomically; never through a link)."""
    record = {
        "step": step,
        "directory": f"step_{step:08d}",
        "metric": metric,
        "mode": mode,
        "value": value,
    }
    write_whole(pathlib.Path(root) / BEST_FILE, (json.dumps(record) + "\n").encode("utf-8"))
