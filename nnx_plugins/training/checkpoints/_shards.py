"""Reading a checkpoint that several processes wrote, on any mesh and any number of processes.

Such a checkpoint has one tensor file per writing process (``tensors-00001-of-00002.safetensors``)
and, for every entry, the blocks it was cut into and the file each block is in. A `ShardReader`
opens a file only when a block in it is needed, after checking its sha256 against the manifest;
it checks every block's shape and dtype in the file's header against the manifest before
reading anything, then builds each array with `jax.make_array_from_callback`: every process
assembles, from the blocks that overlap them, only the regions its own devices hold in the
model's current sharding.

Example:
    >>> import os, tempfile
    >>> import nnx_plugins
    >>> from nnx_plugins.training.checkpoints._save import save_sharded
    >>> from nnx_plugins.training.checkpoints._shards import ShardReader
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> where = save_sharded(model, os.path.join(tempfile.mkdtemp(), "c"), step=1)
    >>> sorted(os.listdir(where))                      # (here written by a single process)
    ['manifest.json', 'tensors-00000-of-00001.safetensors']
    >>> manifest = nnx_plugins.read_manifest(where)
    >>> problems = []
    >>> with ShardReader(where, manifest) as reader:
    ...     kernel = reader.value(manifest["entries"]["model/kernel"], model.kernel.value,
    ...                           "model.kernel", problems)
    >>> problems, bool((kernel == model.kernel.value).all())
    ([], True)
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from safetensors import SafetensorError, safe_open

from ..._files import NotRegularFile
from ._blocks import Block, assemble, block_of
from ._manifest import confined_file, dtype_of, unreadable
from ._save import CheckpointError, _sha256

__all__ = ["ShardReader"]

# safetensors' dtype names -> numpy's
_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "F16": "float16",
    "U32": "uint32",
    "I32": "int32",
    "F32": "float32",
    "U64": "uint64",
    "I64": "int64",
    "F64": "float64",
}

Piece = tuple[Block, Callable[[tuple[slice, ...]], np.ndarray]]


class ShardReader:
    """The tensor files of a sharded checkpoint, opened on demand and checked before use.

    Raises (from `value`):
        CheckpointError: a file the manifest names is missing, outside the checkpoint
            directory, corrupt or truncated (its sha256 differs), or unreadable.
    """

    def __init__(self, where: str | pathlib.Path, manifest: Mapping[str, Any]):
        self.where = pathlib.Path(where)
        self._sha256 = {f["name"]: f["sha256"] for f in manifest["files"]}
        self._stack = contextlib.ExitStack()
        self._files: dict[str, tuple[Any, set[str]]] = {}

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def _file(self, name: str) -> tuple[Any, set[str]]:
        if name not in self._files:
            path = confined_file(self.where, name, "tensor file")
            try:
                digest = _sha256(path)
            except (OSError, NotRegularFile) as error:
                raise CheckpointError(self.where, [unreadable(path, error)]) from None
            if digest != self._sha256[name]:
                raise CheckpointError(
                    self.where,
                    [
                        f"{name} is corrupt or truncated: its sha256 is {digest[:16]}... but the "
                        f"manifest records {self._sha256[name][:16]}... ({path.stat().st_size} "
                        "bytes on disk). Load an earlier checkpoint instead."
                    ],
                )
            try:
                handle = self._stack.enter_context(safe_open(str(path), framework="numpy"))
                self._files[name] = handle, set(handle.keys())
            except (SafetensorError, OSError) as error:
                raise CheckpointError(self.where, [f"{name} cannot be read: {error}"]) from None
        return self._files[name]

    def _pieces(
        self, info: Mapping[str, Any], where: str, problems: list[str]
    ) -> tuple[list[Piece], tuple[int, ...]] | None:
        """The entry's blocks with a reader each, and the key data's trailing dimensions."""
        pieces: list[Piece] = []
        trailing: set[tuple[int, ...]] = set()
        for block in info["blocks"]:
            handle, names = self._file(block["file"])
            if block["tensor"] not in names:
                problems.append(f"{where}: listed in the manifest but absent from {block['file']}.")
                return None
            part = handle.get_slice(block["tensor"])
            shape, dtype = tuple(part.get_shape()), _DTYPES.get(part.get_dtype(), "?")
            extent = tuple(zip(block["start"], block["stop"]))
            trouble = _stored_problem(shape, dtype, tuple(b - a for a, b in extent), info)
            if trouble:
                problems.append(
                    f"{where}: {trouble}; the checkpoint is corrupt. Load an earlier one."
                )
                return None
            trailing.add(shape[len(extent) :])
            pieces.append((extent, part.__getitem__))
        if len(trailing) != 1:
            problems.append(
                f"{where}: its blocks disagree on the PRNG key data's shape {trailing}."
            )
            return None
        return pieces, trailing.pop()

    def value(self, info: Mapping[str, Any], target: Any, where: str, problems: list[str]) -> Any:
        """The entry ``info`` as an array placed like ``target`` (the model's current value), or
        ``None`` after adding to ``problems`` what is wrong with it."""
        found = self._pieces(info, where, problems)
        if found is None:
            return None
        pieces, trailing = found
        is_key = info["dtype"] == "key"
        current = jax.random.key_data(target) if is_key else target
        sharding = getattr(current, "sharding", None) or jax.sharding.SingleDeviceSharding(
            jax.local_devices()[0]
        )
        shape = tuple(info["shape"])
        stored = np.dtype("uint32" if is_key else info.get("stored_as") or info["dtype"])
        view = dtype_of(info["dtype"]) if "stored_as" in info else None

        def read(index: tuple[slice, ...]) -> np.ndarray:
            out = assemble(block_of(index[: len(shape)], shape), pieces, stored, trailing)
            return out if view is None else out.view(view)

        try:
            array = jax.make_array_from_callback(shape + trailing, sharding, read)
        except (SafetensorError, OSError) as error:
            problems.append(
                f"{where}: its blocks cannot be read ({error}); the checkpoint is corrupt."
            )
            return None
        if not is_key:
            return array
        try:
            return jax.random.wrap_key_data(array, impl=info["key_impl"])
        except (ValueError, TypeError, KeyError) as error:
            problems.append(
                f"{where}: its PRNG key data cannot be restored with key_impl "
                f"{info.get('key_impl')!r} ({error}); the checkpoint is corrupt. Load an earlier one."
            )
            return None


def _stored_problem(
    shape: tuple[int, ...], dtype: str, expected: tuple[int, ...], info: Mapping[str, Any]
) -> str | None:
    """How a block in a tensor file disagrees with its manifest entry (None: it agrees)."""
    if info["dtype"] == "key":
        if shape[: len(expected)] != expected or dtype != "uint32":
            return (
                f"a block in the tensor file holds {dtype}{shape} but the manifest records PRNG "
                f"keys of shape {expected} (uint32 key data)"
            )
        return None
    stored = info.get("stored_as") or info["dtype"]
    if shape != expected or dtype != stored:
        return (
            f"a block in the tensor file holds {dtype}{shape} but the manifest records "
            f"{stored}{expected}"
        )
    return None
