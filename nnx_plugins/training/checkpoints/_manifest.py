"""Reading a checkpoint's manifest without trusting it: size, JSON, schema and confined paths.

A manifest is data from disk: it may be truncated, hand-edited or hostile. `read_manifest`
refuses anything but a manifest `save` could have written, and lists every problem at once.
Every file it names must be a plain file name inside the checkpoint directory (no ``..``, no
absolute path, no symlink leading out of it).

Example:
    >>> import os, tempfile
    >>> import nnx_plugins
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> where = nnx_plugins.save(model, os.path.join(tempfile.mkdtemp(), "c"), step=4)
    >>> nnx_plugins.read_manifest(where)["entries"]["model/kernel"]["shape"]
    [2, 3]
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import ml_dtypes  # (bfloat16, float8_*, int4 ... as numpy dtypes)
import numpy as np

from ..._files import NotRegularFile, plain_name, read_regular
from ..._text import os_problem
from ._blocks import SHARD_FILE, tiling_problem
from ._entries import FORMAT, entry_key
from ._save import (
    FORMAT_VERSION,
    MANIFEST,
    SHARDED_VERSION,
    CheckpointError,
    is_checkpoint_directory,
    latest_checkpoint,
)

__all__ = ["MAX_MANIFEST_BYTES", "read_manifest", "confined_file", "unreadable"]

MAX_MANIFEST_BYTES = 256 * 1024 * 1024
"""The largest manifest read (about a million Variables); a larger file is refused."""

_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_PREFIXES = ("model", "optimizer")
# numeric dtypes a checkpoint may hold (names as numpy/ml_dtypes spell them)
_DTYPE_KINDS = frozenset("biuf")


def _checkpoint_dir(directory: str | os.PathLike[str]) -> pathlib.Path:
    directory = pathlib.Path(directory)
    if (directory / MANIFEST).is_file():
        return directory
    latest = latest_checkpoint(directory)
    if latest is not None:
        return latest
    if os.path.lexists(directory / MANIFEST):  # (not a regular file: read_manifest says what)
        return directory
    if not directory.exists():
        raise CheckpointError(directory, ["no such directory."])
    if not directory.is_dir():
        raise CheckpointError(
            directory,
            [f"not a directory: a checkpoint is a directory holding {MANIFEST} (or step_N ones)."],
        )
    try:  # (a folder holding checkpoints, as nnx import hf's DST holds one: named)
        inside = sorted(
            p.name
            for p in itertools.islice(directory.iterdir(), 1000)
            if is_checkpoint_directory(p) or (p.is_dir() and latest_checkpoint(p) is not None)
        )
    except OSError:
        inside = []
    if inside:
        listed = ", ".join(f"{name}/" for name in inside[:3])
        which = "is a checkpoint" if len(inside) == 1 else "are checkpoints"
        hint = f" It holds {listed}, which {which}: give {directory / inside[0]}."
    else:
        hint = " (Was the save interrupted before its first checkpoint?)"
    raise CheckpointError(
        directory, [f"no {MANIFEST} here and no step_N checkpoint below it.{hint}"]
    )


def confined_file(where: pathlib.Path, name: Any, role: str) -> pathlib.Path:
    """``where / name`` after checking that it stays inside ``where``.

    Raises:
        CheckpointError: ``name`` is not a plain file name, or it resolves (through symlinks)
            to a place outside ``where``.

    Example:
        >>> import pathlib, tempfile
        >>> from nnx_plugins.training.checkpoints._manifest import confined_file
        >>> where = pathlib.Path(tempfile.mkdtemp())
        >>> confined_file(where, "tensors.safetensors", "tensor file").name
        'tensors.safetensors'
        >>> confined_file(where, "../../etc/passwd", "tensor file")
        Traceback (most recent call last):
        nnx_plugins.training.checkpoints._save.CheckpointError: cannot load checkpoint ...:
          the manifest names the tensor file '../../etc/passwd', which is not a plain file name inside the checkpoint directory; the manifest is corrupt or was edited. Load an earlier checkpoint.
    """
    if not plain_name(name):
        raise CheckpointError(
            where,
            [
                f"the manifest names the {role} {name!r}, which is not a plain file name inside "
                "the checkpoint directory; the manifest is corrupt or was edited. Load an "
                "earlier checkpoint."
            ],
        )
    path = where / name
    inside = where.resolve()
    if path.resolve().parent != inside:
        raise CheckpointError(
            where,
            [
                f"{name} is a symlink leading out of the checkpoint directory (to "
                f"{path.resolve()}); refusing to read it. Load an earlier checkpoint."
            ],
        )
    return path


def unreadable(path: pathlib.Path, error: OSError | NotRegularFile) -> str:
    """Why the checkpoint's file ``path`` cannot be opened (``error``, from `open_regular`), as
    a `CheckpointError` problem: missing, a broken symbolic link, or not a regular file (a
    folder, a FIFO, a device: named)."""
    if isinstance(error, NotRegularFile):
        return (
            f"{path.name} is {error.kind}, not a regular file: not the file the checkpoint was "
            f"saved with. Put its {path.name} back, or load an earlier checkpoint."
        )
    if isinstance(error, FileNotFoundError) and path.is_symlink():
        return (
            f"{path.name} is a broken symbolic link (to {os.readlink(path)}, which does not "
            "exist). Restore what it pointed to, or load an earlier checkpoint."
        )
    if isinstance(error, FileNotFoundError):
        return f"{path.name} is missing."
    return f"{path.name} cannot be read: {os_problem(error)}."


def _load_json(path: pathlib.Path, where: pathlib.Path) -> Any:
    try:
        size = path.stat().st_size
        if size <= MAX_MANIFEST_BYTES:
            return json.loads(read_regular(path, MAX_MANIFEST_BYTES).decode("utf-8"))
    except (OSError, NotRegularFile) as error:
        raise CheckpointError(where, [unreadable(path, error)]) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise CheckpointError(where, [f"{MANIFEST} is unreadable or corrupt: {reason}"]) from None
    raise CheckpointError(
        where,
        [
            f"{MANIFEST} is {size:,} bytes, more than the {MAX_MANIFEST_BYTES:,} a "
            "manifest may have (nnx_plugins.training.checkpoints._manifest.MAX_MANIFEST_BYTES); "
            "it is not a manifest nnx wrote."
        ],
    )


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the checkpoint at ``directory`` (or of the newest one below it).

    The returned dict has an extra ``"directory"`` key: the checkpoint directory it came from.

    Raises:
        CheckpointError: no checkpoint there, or the manifest is not a valid manifest (every
            problem of its structure listed).
    """
    where = _checkpoint_dir(directory)
    manifest = _load_json(confined_file(where, MANIFEST, "manifest"), where)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(
            where, [f"{MANIFEST} is not an nnx checkpoint manifest (expected format {FORMAT!r})."]
        )
    version = manifest.get("format_version")
    if version not in (FORMAT_VERSION, SHARDED_VERSION) or isinstance(version, bool):
        raise CheckpointError(
            where,
            [
                f"format version {version!r} is not supported (this nnx reads versions "
                f"{FORMAT_VERSION} and {SHARDED_VERSION})."
            ],
        )
    problems = manifest_problems(manifest)
    if problems:
        raise CheckpointError(where, [f"{MANIFEST} is malformed: {p}" for p in problems])
    manifest["directory"] = str(where)
    return manifest


# -- the schema ------------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _top_level_problems(manifest: Mapping[str, Any]) -> list[str]:
    problems = []
    if manifest.get("format_version", FORMAT_VERSION) == FORMAT_VERSION:
        checks = {
            "tensors": (lambda v: isinstance(v, str), "a file name"),
            "sha256": (lambda v: isinstance(v, str) and _SHA256.match(v), "64 hex digits"),
        }
    else:
        checks = {"files": (_is_file_list, "a list of {name, sha256} tensor files")}
    checks |= {
        "step": (lambda v: v is None or (_is_int(v) and v >= 0), "null or an integer >= 0"),
        "has_optimizer": (lambda v: isinstance(v, bool), "true or false"),
        "config": (lambda v: v is None or isinstance(v, dict), "null or a mapping"),
        "entries": (lambda v: isinstance(v, dict), "a mapping"),
        "packages": (lambda v: isinstance(v, dict), "a mapping"),
        "plugins": (lambda v: isinstance(v, dict), "a mapping"),
    }
    optional = {"run": (lambda v: isinstance(v, dict), "a mapping")}
    for key, (check, expected) in checks.items():
        if key not in manifest:
            problems.append(f"{key!r} is missing.")
        elif not check(manifest[key]):
            problems.append(f"{key!r} must be {expected}, got {_short(manifest[key])}.")
    for key, (check, expected) in optional.items():
        if key in manifest and not check(manifest[key]):
            problems.append(f"{key!r} must be {expected}, got {_short(manifest[key])}.")
    return problems


def _is_file_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(f, dict)
            and isinstance(f.get("name"), str)
            and SHARD_FILE.match(f["name"])
            and isinstance(f.get("sha256"), str)
            and _SHA256.match(f["sha256"])
            for f in value
        )
        and len({f["name"] for f in value}) == len(value)
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def dtype_of(name: str) -> np.dtype | None:
    """The numpy dtype a manifest's dtype name means, or None if it names no numeric dtype."""

    try:
        dtype = np.dtype(name)
    except TypeError:
        return None
    numeric = dtype.kind in _DTYPE_KINDS or isinstance(getattr(ml_dtypes, name, None), type)
    return dtype if numeric and dtype.name == name else None


def _entry_problems(key: Any, entry: Any) -> list[str]:
    where = f"entry {_short(key)}"
    head = key.split("/")[0] if isinstance(key, str) else ""
    if "/" not in str(key) or not (head in _PREFIXES or head.isidentifier()):
        return [
            f"{where}: keys start with 'model/', 'optimizer/' or the name of a Module saved "
            "beside them (save(extra=...), e.g. 'ema/')."
        ]
    if not isinstance(entry, dict):
        return [f"{where} must be a mapping, got {_short(entry)}."]
    path, shape, dtype = entry.get("path"), entry.get("shape"), entry.get("dtype")
    problems = []
    if not isinstance(path, list) or not all(isinstance(p, str) or _is_int(p) for p in path):
        problems.append(f"{where}: 'path' must be a list of names and indices.")
    elif entry_key(key.split("/")[0], path) != key:
        problems.append(f"{where}: its 'path' {_short(path)} does not match the key.")
    if not isinstance(entry.get("kind"), str):
        problems.append(f"{where}: 'kind' must be a Variable kind's name.")
    if not (entry.get("provider") is None or isinstance(entry.get("provider"), str)):
        problems.append(f"{where}: 'provider' must be null or text.")
    if not isinstance(shape, list) or not all(_is_int(n) and n >= 0 for n in shape):
        problems.append(f"{where}: 'shape' must be a list of sizes >= 0, got {_short(shape)}.")
    if not isinstance(entry.get("metadata", {}), dict):
        problems.append(f"{where}: 'metadata' must be a mapping.")
    problems += _dtype_problems(where, entry, dtype)
    return problems


def _dtype_problems(where: str, entry: Mapping[str, Any], dtype: Any) -> list[str]:
    if dtype == "key":
        if not isinstance(entry.get("key_impl"), str):
            return [f"{where}: a PRNG key entry needs its 'key_impl' name."]
        return []
    if not isinstance(dtype, str) or dtype_of(dtype) is None:
        return [f"{where}: 'dtype' {_short(dtype)} is not a numeric dtype."]
    stored = entry.get("stored_as")
    if stored is not None and stored != f"uint{8 * dtype_of(dtype).itemsize}":
        return [f"{where}: 'stored_as' {_short(stored)} does not fit dtype {dtype}."]
    return []


def _block_problems(where: str, entry: Mapping[str, Any], files: set[str]) -> list[str]:
    """A sharded checkpoint's entry: its blocks name listed files and tile its shape exactly."""
    blocks, shape = entry.get("blocks"), entry.get("shape")
    if not isinstance(blocks, list) or not blocks:
        return [f"{where}: 'blocks' must be a non-empty list."]
    extents = []
    for block in blocks:
        if not (
            isinstance(block, dict)
            and isinstance(block.get("file"), str)
            and block["file"] in files
            and isinstance(block.get("tensor"), str)
            and all(
                isinstance(block.get(k), list) and all(_is_int(n) for n in block[k])
                for k in ("start", "stop")
            )
        ):
            return [
                f"{where}: each block needs 'file' (one of 'files'), 'tensor', and 'start' and "
                f"'stop' lists of integers, got {_short(block)}."
            ]
        extents.append(tuple(zip(block["start"], block["stop"])))
        if len(block["start"]) != len(shape) or len(block["stop"]) != len(shape):
            return [
                f"{where}: the block {_short(block)} does not have one start and stop per dimension."
            ]
    trouble = tiling_problem(shape, extents)
    return [f"{where}: {trouble}."] if trouble else []


def manifest_problems(manifest: Mapping[str, Any]) -> list[str]:
    """Every way ``manifest`` differs from what `save` writes (an empty list: well formed)."""
    problems = _top_level_problems(manifest)
    entries, files = manifest.get("entries"), manifest.get("files")
    sharded = manifest.get("format_version") == SHARDED_VERSION
    names = {f["name"] for f in files} if sharded and _is_file_list(files) else set()
    if isinstance(entries, dict):
        for key, entry in entries.items():
            trouble = _entry_problems(key, entry)
            if sharded and not trouble:
                trouble = _block_problems(f"entry {_short(key)}", entry, names)
            problems += trouble
    return problems
