"""Writing an imported checkpoint one parameter at a time: `write_checkpoint`.

The result is the nnx checkpoint format `nnx_plugins.save` writes (``tensors.safetensors`` +
``manifest.json``, read by `nnx_plugins.load`), but streamed: the safetensors header is written
first (every shape is known from the abstract model), then each parameter's bytes, layer by
layer, straight from the memory-mapped source through its transform; the sha256 is computed as
the bytes go out. At no time does a whole model sit in memory (`nnx_plugins.save` holds the
model's arrays and their bytes: two copies): the most held at once is a few layers' tensors.
The tensor file is not fsync'ed (the manifest is): after a crash a torn file fails the sha256
check `nnx_plugins.load` makes, and the import is run again.

Example:
    >>> import numpy as np
    >>> from nnx_plugins.pretrained._write import safetensors_header
    >>> header = safetensors_header([("model/w", np.dtype("float32"), (2, 3))])
    >>> header[:8] == (len(header) - 8).to_bytes(8, "little"), len(header) % 8
    (True, 0)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import queue
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .._stopping import check, shielded
from ..training.checkpoints._entries import _entry, entry_key, header
from ..training.checkpoints._save import (
    FORMAT_VERSION,
    MANIFEST,
    TENSORS,
    _fsync,
    _write_manifest,
)

__all__ = ["Parameter", "write_checkpoint", "safetensors_header", "stored_dtype"]

_CODES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "uint16": "U16",
    "int16": "I16",
    "float16": "F16",
    "uint32": "U32",
    "int32": "I32",
    "float32": "F32",
    "uint64": "U64",
    "int64": "I64",
    "float64": "F64",
}


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """How the checkpoint stores ``dtype``: itself, or (bfloat16 & co., which safetensors'
    numpy API lacks) the unsigned integer of its width, as `nnx_plugins.save` does."""
    return dtype if dtype.name in _CODES else np.dtype(f"uint{8 * dtype.itemsize}")


def safetensors_header(entries: Sequence[tuple[str, np.dtype, tuple[int, ...]]]) -> bytes:
    """The 8-byte length and JSON header of a safetensors file holding ``entries`` (name,
    dtype, shape) in that order, padded to 8 bytes as the safetensors library pads it."""
    offset, described = 0, {}
    for name, dtype, shape in entries:
        stored = stored_dtype(np.dtype(dtype))
        size = math.prod(shape) * stored.itemsize
        described[name] = {
            "dtype": _CODES[stored.name],
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(described, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _arrays(parameters: Sequence[Parameter]) -> Iterator[np.ndarray]:
    for parameter in parameters:
        stored = stored_dtype(np.dtype(parameter.dtype))
        for array in parameter.arrays():
            yield np.ascontiguousarray(array).view(stored)


_JOIN_SECONDS = 30.0
"""The longest a stopped or failed write waits for the thread making tensors to end."""


def _ahead(arrays: Iterator[np.ndarray], depth: int = 2) -> Iterator[np.ndarray]:
    """``arrays``, made in a thread while the caller writes the previous ones: the transposes
    and the hashing and writing (all of which release the GIL) run on two cores. At most
    ``depth`` arrays wait, so memory stays bounded."""
    waiting: queue.Queue[Any] = queue.Queue(maxsize=depth)
    done = object()
    failure: list[BaseException] = []
    stop = threading.Event()

    def make() -> None:
        try:
            for array in arrays:
                while not stop.is_set():
                    try:
                        waiting.put(array, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the writing thread
            failure.append(error)
        waiting.put(done)

    worker = threading.Thread(target=make, name="nnx-import-tensors", daemon=True)
    with shielded():  # (a stop inside `Thread.start`'s own locks broke them: RuntimeError)
        worker.start()
    try:
        while (item := waiting.get()) is not done:
            yield item
        if failure:
            raise failure[0]
    finally:
        stop.set()
        with shielded():  # (the worker ends within a tensor; bounded: it is a daemon)
            worker.join(_JOIN_SECONDS)


class _Hashing:
    """A file writer that hashes what it writes, a piece of ``chunk`` bytes at a time: each
    piece is hashed and then written while it is still in the processor's cache, so the
    bytes come from memory once (hashing a whole array and then writing it reads it twice:
    on a memory-bound machine, 1.3x the import's time)."""

    def __init__(self, handle: Any, chunk: int = 1 << 20):
        self.handle, self.digest, self.written, self.chunk = handle, hashlib.sha256(), 0, chunk

    def write(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), self.chunk):
            piece = view[start : start + self.chunk]
            self.digest.update(piece)
            self.handle.write(piece)
        self.written += len(view)


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One parameter to write: its path, its abstract Variable (kind and metadata), dtype,
    shape, and a function giving its arrays in order (one per layer of a stacked parameter)."""

    path: tuple[Any, ...]
    variable: Any
    dtype: np.dtype
    shape: tuple[int, ...]
    arrays: Callable[[], Iterable[np.ndarray]]


def write_checkpoint(
    folder: str, parameters: Sequence[Parameter], *, config: dict[str, Any], run: dict[str, Any]
) -> int:
    """Write the checkpoint of ``parameters`` into the new, empty ``folder``; return the size
    of its tensor file.

    Args:
        folder: where ``tensors.safetensors`` and ``manifest.json`` go.
        parameters: every parameter of the model, in the model's order.
        config: the config the manifest records (`nnx_plugins.load` rebuilds the model from
            its ``model``).
        run: facts recorded as the manifest's ``run``.
    """
    entries: dict[str, Any] = {}
    providers: dict[type, Any] = {}
    names = []
    for parameter in parameters:
        dtype = np.dtype(parameter.dtype)
        info: dict[str, Any] = {"shape": list(parameter.shape), "dtype": dtype.name}
        if stored_dtype(dtype) != dtype:
            info["stored_as"] = stored_dtype(dtype).name
        key = entry_key("model", parameter.path)
        entries[key] = _entry(parameter.variable, parameter.path, info, providers)
        names.append((key, dtype, parameter.shape))
    with open(os.path.join(folder, TENSORS), "wb") as handle:
        out = _Hashing(handle)
        out.write(safetensors_header(names))
        for array in _ahead(_arrays(parameters)):
            check()  # (a stop whose own raise was lost ends the write here)
            out.write(array)
    manifest = {
        **header(None, config, None, FORMAT_VERSION, has_optimizer=False, run=run),
        "tensors": TENSORS,
        "sha256": out.digest.hexdigest(),
        "entries": entries,
    }
    _write_manifest(manifest, os.path.join(folder, MANIFEST))
    _fsync(folder)
    return out.written
