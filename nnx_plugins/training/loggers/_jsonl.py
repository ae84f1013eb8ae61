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
    >>> logger.close()
    >>> (run_dir / "metrics.jsonl").read_text().splitlines()
    ['{"step": 10, "split": "train", "loss": 0.5}']
    >>> read_records(run_dir / "metrics.jsonl", start=5)
    []
"""

from __future__ import annotations

import json
import pathlib
from typing import IO, Any

from ._base import Logger, append, read_lines, start_file

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
    """The records of ``path`` up to step ``start`` (none when it does not exist).

    Raises:
        RunError: something other than a regular file is at ``path`` (a link, a FIFO).
    """
    if start <= 0:
        return []
    lines = [_parse(line) for line in read_lines(path)]
    return [
        r
        for r in lines
        if r is not None and isinstance(r.get("step", 0), int) and r.get("step", 0) <= start
    ]


class JsonlLogger(Logger):
    """metrics.jsonl in the run directory: one JSON object per record.

    Each line is ``{"step", "split", ...values}``.
    """

    def __init__(self) -> None:
        self.path: pathlib.Path | None = None
        self.handle: IO[bytes] | None = None

    def files(self) -> list[str]:
        return [FILE]

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        self.path = run_dir / FILE
        kept = read_records(self.path, start=start)
        self.handle = start_file(self.path, [json.dumps(r) + "\n" for r in kept])

    def write(self, record: dict[str, Any]) -> None:
        append(self.handle, self.path, [json.dumps(record) + "\n"], "JsonlLogger")

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
