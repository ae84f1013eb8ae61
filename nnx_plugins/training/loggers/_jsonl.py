"""The ``jsonl`` logger (the default): one JSON object per line in ``metrics.jsonl``.

On a resume the lines after the checkpoint's step are dropped (a torn last line of a killed
run too), so the log of a resumed run is that of an uninterrupted one.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.loggers._jsonl import JsonlLogger, read_records
    >>> run_dir = pathlib.Path(tempfile.mkdtemp())
    >>> logger = JsonlLogger()
    >>> logger.open(run_dir, 0)
    >>> logger.write({"step": 10, "split": "train", "loss": 0.5})
    >>> (run_dir / "metrics.jsonl").read_text().splitlines()
    ['{"step": 10, "split": "train", "loss": 0.5}']
    >>> read_records(run_dir / "metrics.jsonl", start=5)
    []
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from ._base import Logger, replace_file, reported

__all__ = ["JsonlLogger", "read_records", "FILE"]

FILE = "metrics.jsonl"


def _parse(line: str) -> dict[str, Any] | None:
    """A metrics line, or None for a blank or torn one (a run killed mid-write)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def read_records(path: pathlib.Path, *, start: int) -> list[dict[str, Any]]:
    """The records of ``path`` up to step ``start`` (none when it does not exist)."""
    if start <= 0 or not path.exists():
        return []
    with reported(path), open(path, encoding="utf-8") as handle:
        lines = [_parse(line) for line in handle]
    return [
        r
        for r in lines
        if r is not None and isinstance(r.get("step", 0), int) and r.get("step", 0) <= start
    ]


class JsonlLogger(Logger):
    """``metrics.jsonl`` in the run directory: ``{"step", "split", ...values}`` per line."""

    def __init__(self) -> None:
        self.path: pathlib.Path | None = None

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        self.path = run_dir / FILE
        kept = read_records(self.path, start=start)
        replace_file(self.path, [json.dumps(r) + "\n" for r in kept])

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            raise RuntimeError("JsonlLogger.write before open().")
        with reported(self.path), open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
