"""The ``csv`` dataset: tabular data from CSV files with a header, read by numpy.

The first line names the columns; every other line is one example. ``target`` names the
target column (or columns); the inputs are the other columns, or those ``inputs`` names (the
columns neither names, e.g. an ``id`` or a text column, are not read). Cells are numbers as
numpy reads them; the targets become integer class indices when every one is a whole number
(so the same file serves ``classification``; ``regression`` takes them too), else float32.
The test split is ``test_path`` (the same columns), or the last ``test_fraction`` of the rows.
Being an `ArrayDataset`, it also gets the run's validation split.

Reading is bounded: the file's size is checked against `data_limit` before it is read (numpy
streams it from the file), a header is at most 1 MiB, and the columns at most 100,000. When
numpy refuses a row, the row is found again with the standard library's ``csv`` reader, so the
error names the file's line and the column, never quoting a cell (a ragged row, a cell that is
no number, an empty cell, a NaN or infinity, bytes that are not UTF-8).

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.training.data._csv import CsvDataset
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "iris.csv"
    >>> rows = [f"{i % 7}.5,{i % 3}.25,{i % 2}" for i in range(10)]
    >>> _ = path.write_text("length,width,kind\\n" + "\\n".join(rows) + "\\n")
    >>> data = CsvDataset(str(path), target="kind")
    >>> info = data.describe()
    >>> info.inputs, info.targets.dtype.name, info.classes
    (ShapeDtypeStruct(shape=(2,), dtype=float32), 'int32', 2)
    >>> data.x_train.shape, data.x_test.shape, data.columns
    ((8, 2), (2, 2), ('length', 'width'))
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..._text import suggest
from ._base import ArrayDataset, DataError, check_split
from ._files import check_size, open_regular

__all__ = ["CsvDataset", "read_csv", "read_header", "MAX_HEADER_BYTES", "MAX_COLUMNS"]

MAX_HEADER_BYTES = 1 << 20
MAX_COLUMNS = 100_000
#: memory per byte of the file while numpy reads it: its float64 cells (at most one per two
#: bytes: "1,"), and its buffers
_EXPANSION = 5


def _problem(path: str, text: str, key: str = "path") -> DataError:
    return DataError(f"{path}: {text}", key=key)


class _Bounded(io.RawIOBase):
    """At most ``limit`` bytes of ``handle``: what its size was when it was checked (a file
    that grows while it is read, or a /proc file claiming size 0, is not read past it)."""

    def __init__(self, handle: Any, limit: int):
        self.handle, self.left = handle, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)[: self.left]
        got = self.handle.readinto(view) if len(view) else 0
        self.left -= got or 0
        return got or 0


@contextlib.contextmanager
def _opened(path: str) -> Iterator[tuple[io.TextIOWrapper, int]]:
    """The file as UTF-8 text (a byte-order mark dropped, line ends kept for the ``csv``
    reader) and its size, after checking that reading it fits `data_limit`; never more than
    that size is read."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        check_size(size * _EXPANSION, f"{path} (CSV, {size:,} bytes)")
        raw = io.BufferedReader(_Bounded(handle, size))
        yield io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""), size


def _not_utf_8(path: str) -> DataError:
    """Where the file stops being UTF-8: its line and byte offset, read in chunks."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0
    with open_regular(path) as handle:
        bounded = io.BufferedReader(_Bounded(handle, os.fstat(handle.fileno()).st_size))
        for chunk in iter(lambda: bounded.read(1 << 16), b""):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                at = max(error.start - len(decoder.getstate()[0]), 0)
                where = offset + at
                byte = chunk[at] if at < len(chunk) else 0
                line = lines + chunk.count(b"\n", 0, at) + 1
                return _problem(
                    path,
                    f"line {line} is not UTF-8 text (the byte "
                    f"0x{byte:02x} at offset {where:,}). Save the file as UTF-8.",
                )
            offset, lines = offset + len(chunk), lines + chunk.count(b"\n")
    return _problem(path, "it is not UTF-8 text. Save the file as UTF-8.")


def _header(path: str, text: io.TextIOWrapper, delimiter: str) -> list[str]:
    """The column names of the first line (at most `MAX_HEADER_BYTES` read)."""
    first = text.readline(MAX_HEADER_BYTES + 1)
    if len(first) > MAX_HEADER_BYTES:
        raise _problem(
            path,
            f"the first line is longer than {MAX_HEADER_BYTES:,} characters: it is not the "
            f"header of a CSV file (a header names the columns, separated by {delimiter!r}).",
        )
    names = [name.strip() for name in next(csv.reader([first], delimiter=delimiter), [])]
    if not any(names):
        raise _problem(
            path, "the first line is empty: a CSV file starts with a header naming its columns."
        )
    if len(names) > MAX_COLUMNS:
        raise _problem(path, f"the header names {len(names):,} columns, more than {MAX_COLUMNS:,}.")
    for index, name in enumerate(names):
        if not name:
            raise _problem(
                path, f"column {index + 1} of the header has no name; name every column."
            )
        if name in names[:index]:
            raise _problem(
                path,
                f"the header names the column {name[:40]!r} twice (columns "
                f"{names.index(name) + 1} and {index + 1}); column names must be unique.",
            )
    return names


def read_header(path: str, *, delimiter: str = ",") -> list[str]:
    """The column names of the CSV file ``path``.

    Raises:
        DataError: the file cannot be read, is not UTF-8, or its first line is no header.
    """
    try:
        with _opened(path) as (text, _):
            return _header(path, text, delimiter)
    except UnicodeDecodeError:
        raise _not_utf_8(path) from None


def _rows(path: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(line, cells)`` of every non-blank row after the header, streamed by the standard
    library's reader (to locate a problem and to check widths, not for the numbers)."""
    with _opened(path) as (text, _):
        text.readline(MAX_HEADER_BYTES + 1)
        reader = csv.reader(text, delimiter=delimiter)
        for cells in reader:
            if cells and any(cell.strip() for cell in cells):
                yield 1 + reader.line_num, cells


def _is_number(cell: str) -> bool:
    text = cell.strip()
    try:
        float(text)
    except ValueError:
        return False
    return "_" not in text


def _locate(path: str, names: list[str], use: list[int], delimiter: str) -> DataError:
    """The first row numpy could not read, said by line and column (its cells not quoted)."""
    for line, cells in _rows(path, delimiter):
        if len(cells) != len(names):
            return _problem(
                path,
                f"line {line} has {len(cells):,} cells but the header names {len(names):,} "
                "columns; every row needs one cell per column.",
            )
        for index in use:
            if not cells[index].strip():
                return _problem(
                    path,
                    f"line {line}, column {names[index][:40]!r}: the cell is empty; every cell "
                    "of the columns read must hold a number.",
                )
            if not _is_number(cells[index]):
                return _problem(
                    path,
                    f"line {line}, column {names[index][:40]!r}: the cell ({len(cells[index]):,} "
                    "characters) is not a number. Cells are numbers such as 3, -0.5 or 1e-3; "
                    "turn categories into numbers first, or leave the column out with "
                    "data.inputs.",
                )
    return _problem(path, "numpy cannot read its rows as numbers (a quoted cell spanning lines?).")


def _nonfinite(path: str, name: str, row: int, delimiter: str) -> DataError:
    """The error for a NaN or infinity in the ``row``-th row read, column ``name``, located
    at the file's line."""
    line = next((ln for i, (ln, _) in enumerate(_rows(path, delimiter)) if i == row), None)
    where = f"line {line}" if line is not None else f"row {row + 1}"
    return _problem(
        path,
        f"{where}, column {name[:40]!r}: a NaN or infinity; inputs and targets must be finite "
        "(one NaN makes every loss after it NaN). Fix or drop that row.",
    )


def _columns(path: str, names: list[str], columns: Sequence[str], key: str) -> list[int]:
    use = []
    for column in columns:
        if column not in names and len(names) == 1:  # (no CSV: its first line is not shown)
            raise _problem(
                path,
                f"the header is one column of {len(names[0]):,} characters and has no column "
                f"{column[:40]!r}: it is not a CSV file with the delimiter given (set "
                "data.delimiter to the character between its cells).",
                key,
            )
        if column not in names:
            shown = ", ".join(repr(n[:40]) for n in names[:20]) + (
                " ..." if len(names) > 20 else ""
            )
            raise _problem(
                path,
                f"the header has no column {column[:40]!r}.{suggest(column, names)} Its "
                f"columns: {shown}.",
                key,
            )
        use.append(names.index(column))
    return use


def read_csv(
    path: str, columns: Sequence[str], *, delimiter: str = ",", key: str = "path"
) -> np.ndarray:
    """The ``columns`` of the CSV file ``path`` (a header, then one row per example) as a
    float64 array ``(rows, len(columns))``, every cell checked to be a finite number.

    Raises:
        DataError: the file cannot be read, is larger than `data_limit` allows, is not UTF-8,
            has no header or a bad one, lacks a column (with a suggestion), has no rows, or
            a row is ragged or holds a cell that is empty, not a number, NaN or infinite
            (named by its line and column).
    """
    try:
        with _opened(path) as (text, _):
            names = _header(path, text, delimiter)
            use = _columns(path, names, columns, key)
            every = sorted(use) == list(range(len(names)))  # (numpy checks each row's width)
            table = _numbers(path, text, names, use, every, delimiter)
    except UnicodeDecodeError:
        raise _not_utf_8(path) from None
    if table.shape[0] == 0:
        raise _problem(path, "it holds a header but no rows: give one row per example.")
    if table.shape[1] != (len(names) if every else len(use)) or (
        not every and any(len(cells) != len(names) for _, cells in _rows(path, delimiter))
    ):
        raise _locate(path, names, use, delimiter)
    if every:
        table = table[:, use]
    finite = np.isfinite(table)
    if not finite.all():
        row, column = np.unravel_index(int(np.argmin(finite)), table.shape)
        raise _nonfinite(path, names[use[int(column)]], int(row), delimiter)
    return table


def _numbers(
    path: str, text: io.TextIOWrapper, names: list[str], use: list[int], every: bool, delimiter: str
) -> np.ndarray:
    """The rows after the header as float64, read by numpy (streamed from the file)."""
    try:
        with warnings.catch_warnings():  # (no rows: said by the caller, in our words)
            warnings.simplefilter("ignore", UserWarning)
            return np.loadtxt(
                text,
                delimiter=delimiter,
                dtype=np.float64,
                ndmin=2,
                usecols=None if every else use,
                comments=None,
                quotechar='"',
            )
    except ValueError as error:
        if isinstance(error, UnicodeDecodeError):
            raise
        raise _locate(path, names, use, delimiter) from None


class CsvDataset(ArrayDataset):
    """Tabular data from a CSV file: a header naming the columns, then one row per example.

    The target column(s) are named by target; the inputs are the other columns, or those
    named by inputs. Every cell read must be a finite number. The targets are integer class
    indices when every one is a whole number, else floats. The test split is test_path, or
    the last test_fraction of the rows (shuffle a file whose rows are ordered).

    Args:
        path: the CSV file (relative to the config file).
        target: the target column, or a list of target columns.
        inputs: the input columns (default: every column but the targets).
        test_path: a CSV file of the test split, with the same columns (default: the last
            ``test_fraction`` of the rows of ``path``).
        test_fraction: the share of the rows of ``path`` held out for testing when there is
            no ``test_path``.
        delimiter: the character between cells.
    """

    path_arguments = ("path", "test_path")

    def __init__(
        self,
        path: str,
        *,
        target: str | list[str],
        inputs: list[str] | None = None,
        test_path: str | None = None,
        test_fraction: float = 0.2,
        delimiter: str = ",",
    ):
        super().__init__(name=os.path.basename(path))
        targets = [target] if isinstance(target, str) else list(target)
        if not targets or not all(isinstance(t, str) and t for t in targets):
            raise DataError("target must name a column (or a list of columns).", key="target")
        if inputs is not None and not inputs:
            raise DataError("inputs must name at least one column (or be left out).", key="inputs")
        overlap = sorted(set(targets) & set(inputs or ()))
        if overlap:
            raise DataError(
                f"the column {overlap[0][:40]!r} is both a target and an input.", key="inputs"
            )
        if not 0 < test_fraction < 1:
            raise DataError(
                f"test_fraction must be in (0, 1), got {test_fraction}.", key="test_fraction"
            )
        if len(delimiter) != 1 or delimiter in '"\r\n':
            raise DataError(
                f"delimiter must be one character other than a quote or a line break, got "
                f"{delimiter[:10]!r}.",
                key="delimiter",
            )
        self.path, self.test_path, self.delimiter = path, test_path, delimiter
        self.targets, self.inputs, self.test_fraction = targets, inputs, test_fraction
        self.columns: tuple[str, ...] = tuple(inputs or ())

    def _input_columns(self) -> list[str]:
        if self.inputs is not None:
            return list(self.inputs)
        names = read_header(self.path, delimiter=self.delimiter)
        _columns(self.path, names, self.targets, "target")
        inputs = [n for n in names if n not in self.targets]
        if not inputs:
            raise _problem(
                self.path, "every column is a target: no column is left for the inputs.", "target"
            )
        return inputs

    def _split(self, path: str, inputs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        table = read_csv(path, [*inputs, *self.targets], delimiter=self.delimiter)
        x, y = table[:, : len(inputs)], table[:, len(inputs) :]
        if len(self.targets) == 1:
            y = y[:, 0]
        return x, y

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        inputs = self._input_columns()
        self.columns = tuple(inputs)
        x, y = self._split(self.path, inputs)
        if self.test_path is not None:
            x_test, y_test = self._split(self.test_path, inputs)
        else:
            cut = len(x) - max(1, int(round(len(x) * self.test_fraction)))
            if cut < 1:
                raise _problem(
                    self.path,
                    f"it holds {len(x)} row{'s' * (len(x) != 1)}: too few for a training and a "
                    "test split. Give more rows, or a test_path.",
                )
            x, x_test, y, y_test = x[:cut], x[cut:], y[:cut], y[cut:]
        check_split(x, y, self.name, ("inputs", "targets"))
        whole = bool(np.all(np.mod(y, 1) == 0) and np.all(np.mod(y_test, 1) == 0))
        kind = np.int64 if whole else np.float64
        return x, y.astype(kind), x_test, y_test.astype(kind)
