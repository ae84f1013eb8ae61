"""A bounded, memory-mapped reader of safetensors files that does not trust them.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the bytes. `SafetensorsFile` checks all of it before any
tensor is read: a header length past `MAX_HEADER_BYTES` or past the file (a header bomb), a
header that is not a JSON object of well-formed entries, a byte range that does not match its
dtype and shape, ranges that overlap, and data shorter than the header promises (a truncated
file) are each a `PretrainedError` naming the file. Tensors are then views of a read-only
memory map: reading one copies nothing, and the operating system pages the bytes in as they
are used.

Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> from safetensors.numpy import save_file
    >>> from nnx_plugins.pretrained._safetensors import SafetensorsFile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3)}, path)
    >>> tensors = SafetensorsFile(path)
    >>> tensors.names(), tensors.shape("a"), tensors.array("a")[1].tolist()
    (['a'], (2, 3), [3.0, 4.0, 5.0])
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct

import ml_dtypes
import numpy as np

from .._text import os_problem
from ._errors import PretrainedError

__all__ = ["MAX_HEADER_BYTES", "DTYPES", "SafetensorsFile", "TensorInfo"]

MAX_HEADER_BYTES = 100_000_000
"""The largest header read (the safetensors library's own limit); a larger one is refused."""

#: safetensors dtype names -> numpy dtypes
DTYPES = {
    "BOOL": np.dtype(bool),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "U32": np.dtype(np.uint32),
    "I32": np.dtype(np.int32),
    "F32": np.dtype(np.float32),
    "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64),
    "F64": np.dtype(np.float64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One tensor of a file: its dtype, shape and byte range in the data section."""

    dtype: np.dtype
    shape: tuple[int, ...]
    start: int
    stop: int


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SafetensorsFile:
    """The tensors of one safetensors file, checked, as read-only memory-mapped arrays.

    Args:
        path: the file.

    Raises:
        PretrainedError: the file cannot be read, or is not a well-formed safetensors file
            (see the module docstring).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as handle:
                head = handle.read(8)
                if len(head) < 8:
                    raise self._error(
                        f"is {size} bytes long: too short for a safetensors file (8 bytes of "
                        "header length, then the header)"
                    )
                (length,) = struct.unpack("<Q", head)
                if length > MAX_HEADER_BYTES or 8 + length > size:
                    raise self._error(
                        f"declares a header of {length:,} bytes, more than "
                        + (
                            f"the {MAX_HEADER_BYTES:,} a header may have"
                            if length > MAX_HEADER_BYTES
                            else f"the file holds ({size:,} bytes)"
                        )
                        + ": it is corrupt or not a safetensors file"
                    )
                raw = handle.read(length)
        except OSError as error:
            raise self._error(f"cannot be read: {os_problem(error)}") from None
        self._data_start = 8 + length
        self._data_size = size - self._data_start
        self.entries = self._parse(raw)
        self._map: np.memmap | None = None

    def _error(self, problem: str) -> PretrainedError:
        return PretrainedError(self.path, problem)

    def _parse(self, raw: bytes) -> dict[str, TensorInfo]:
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise self._error(f"its header is not JSON ({str(error)[:100]})") from None
        if not isinstance(header, dict):
            raise self._error(f"its header is not a JSON object but {type(header).__name__}")
        entries = {}
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            entries[name] = self._entry(name, entry)
        spans = sorted((e.start, e.stop, n) for n, e in entries.items() if e.stop > e.start)
        for (_, stop, first), (start, _, second) in zip(spans, spans[1:]):
            if start < stop:
                raise self._error(
                    f"the tensors {first!r} and {second!r} overlap in the data: the header is "
                    "corrupt"
                )
        end = max((e.stop for e in entries.values()), default=0)
        if end > self._data_size:
            raise self._error(
                f"is truncated: its header places tensor data up to byte {end:,} of the data "
                f"section, which holds {self._data_size:,} bytes. Download or copy it again"
            )
        return entries

    def _entry(self, name: str, entry: object) -> TensorInfo:
        where = f"the header entry {_short(name)}"
        if not isinstance(entry, dict):
            raise self._error(f"{where} is not an object: {_short(entry)}")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in DTYPES:
            raise self._error(
                f"{where} has dtype {_short(dtype)}; known dtypes: {', '.join(DTYPES)}"
            )
        if not isinstance(shape, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
        ):
            raise self._error(f"{where} has shape {_short(shape)}, not a list of sizes")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise self._error(f"{where} has data_offsets {_short(offsets)}, not [begin, end]")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise self._error(
                f"{where}: a {dtype} tensor of shape {shape} is {nbytes:,} bytes, but its "
                f"data_offsets span {offsets[1] - offsets[0]:,}"
            )
        return TensorInfo(DTYPES[dtype], tuple(shape), offsets[0], offsets[1])

    def names(self) -> list[str]:
        """The tensor names, sorted."""
        return sorted(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name].shape

    def array(self, name: str) -> np.ndarray:
        """The tensor ``name`` as a read-only view of the memory-mapped file (no copy)."""
        info = self.entries[name]
        if info.stop == info.start:
            return np.zeros(info.shape, info.dtype)
        if self._map is None:
            try:
                self._map = np.memmap(
                    self.path, np.uint8, mode="r", offset=self._data_start, shape=(self._data_size,)
                )
            except (OSError, ValueError) as error:
                raise self._error(f"cannot be memory-mapped: {error}") from None
        # (a plain ndarray over the map: slices of an ``np.memmap`` run Python code each, 0.3 s
        # of a 500 MB import's blocked transposes)
        data = np.asarray(self._map)[info.start : info.stop]
        return data.view(info.dtype).reshape(info.shape)
