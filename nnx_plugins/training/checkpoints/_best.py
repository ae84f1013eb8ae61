"""``checkpoint.keep_best``: which checkpoint is the best so far, kept beside the newest ones.

``CHECKPOINTS/best.json`` names it (``{"step", "directory", "metric", "mode", "value"}``),
written atomically by process 0 after the checkpoint itself; rotation never deletes it. The
best checkpoint is a normal checkpoint: ``nnx eval FILE --checkpoint CHECKPOINTS/step_N``.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.checkpoints._best import improves, read_best, write_best
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> improves(0.5, None, "min"), improves(0.5, 0.4, "min"), improves(0.5, 0.4, "max")
    (True, False, True)
    >>> write_best(root, step=20, metric="test.loss", mode="min", value=0.25)
    >>> read_best(root)["directory"]
    'step_00000020'
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any

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


def read_best(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The best-checkpoint record under ``root``, or ``None`` (none, or unreadable: a new
    best is then chosen from the next evaluations)."""
    path = pathlib.Path(root) / BEST_FILE
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fields = ("step", "directory", "value")
    if not isinstance(record, dict) or not all(k in record for k in fields):
        return None
    return record


def write_best(
    root: str | os.PathLike[str], *, step: int, metric: str, mode: str, value: float
) -> None:
    """Record the checkpoint of ``step`` as the best (atomically)."""
    root = pathlib.Path(root)
    record = {
        "step": step,
        "directory": f"step_{step:08d}",
        "metric": metric,
        "mode": mode,
        "value": value,
    }
    temporary = root / f".{BEST_FILE}.tmp"
    temporary.write_text(json.dumps(record) + "\n", encoding="utf-8")
    os.replace(temporary, root / BEST_FILE)
