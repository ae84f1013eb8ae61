"""The ``csv`` logger: ``metrics.csv``, one row per reported value (``step,split,name,value``).

A long table, so every split and metric fits one header whatever the task reports; a
spreadsheet or ``pandas.read_csv(...).pivot_table(index="step", columns=["split", "name"])``
makes it wide. On a resume the rows after the checkpoint's step are dropped.

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.loggers._csv import CsvLogger
    >>> run_dir = pathlib.Path(tempfile.mkdtemp())
    >>> logger = CsvLogger()
    >>> logger.open(run_dir, 0)
    >>> logger.write({"step": 10, "split": "test", "loss": 0.25, "accuracy": 0.9})
    >>> logger.close()
    >>> print((run_dir / "metrics.csv").read_text(), end="")
    step,split,name,value
    10,test,loss,0.25
    10,test,accuracy,0.9
"""

from __future__ import annotations

import csv
import io
import pathlib
from typing import IO, Any

from ._base import Logger, append, read_lines, start_file

__all__ = ["CsvLogger"]

_HEADER = ["step", "split", "name", "value"]


def _lines(rows: list[list[Any]]) -> list[str]:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue().splitlines(keepends=True)


class CsvLogger(Logger):
    """metrics.csv in the run directory: one row per value, step,split,name,value.

    See the module docstring.

    Args:
        file: the file name, inside the run directory.
    """

    def __init__(self, *, file: str = "metrics.csv"):
        if not file or "/" in file or "\\" in file or file in (".", ".."):
            raise ValueError(
                f"file must be a plain file name inside the run directory, got {file!r}."
            )
        self.file = file
        self.path: pathlib.Path | None = None
        self.handle: IO[bytes] | None = None

    def open(self, run_dir: pathlib.Path, start: int) -> None:
        self.path = run_dir / self.file
        kept: list[list[Any]] = []
        if start > 0:
            for row in csv.reader(read_lines(self.path)):
                if len(row) == 4 and row[0].isdigit() and int(row[0]) <= start:
                    kept.append(row)
        self.handle = start_file(self.path, _lines([_HEADER, *kept]))

    def write(self, record: dict[str, Any]) -> None:
        rows = [
            [record["step"], record.get("split", ""), key, value]
            for key, value in record.items()
            if key not in ("step", "split")
        ]
        append(self.handle, self.path, _lines(rows), "CsvLogger")

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
