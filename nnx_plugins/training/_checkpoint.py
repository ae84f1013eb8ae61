"""Checkpoints: one safetensors file (no pickle) plus a JSON manifest, written atomically.

A checkpoint is a directory holding ``tensors.safetensors`` and ``manifest.json``. The manifest
records the config (so `load` can rebuild the model), every entry's path, Variable kind (by
registered name, with the distribution that provides it), shape and dtype, the versions of the
packages and installed plugins, and the sha256 of the tensor file. The directory is written
under a temporary name and renamed into place, so an interrupted save never damages an existing
checkpoint. ``bfloat16`` (and other dtypes safetensors' numpy API lacks) is stored as an unsigned
integer view; typed PRNG keys as their key data plus the key implementation's name.

Example:
    >>> import tempfile, os
    >>> import nnx_plugins
    >>> from nnx_core import Rngs
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> where = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> nnx_plugins.save(model, where, step=7).name
    'ckpt'
    >>> restored = nnx_plugins.load(where)        # rebuilt from the config in the manifest
    >>> restored.kernel.shape, bool((restored.kernel.value == model.kernel.value).all())
    ((2, 3), True)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata as metadata
import json
import os
import pathlib
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

import nnx_core

from .._errors import NnxError
from .._text import format_path, os_problem
from ..config._build import to_config
from ..registry._errors import PluginError
from ..registry._lookup import load_variable_types
from ..registry._registry import default_registry

__all__ = [
    "CheckpointError",
    "save",
    "list_checkpoints",
    "latest_checkpoint",
    "step_directory",
    "rotate",
    "is_checkpoint_directory",
]

FORMAT = "nnx-checkpoint"
FORMAT_VERSION = 1
TENSORS = "tensors.safetensors"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"step_(\d+)\Z")
# the leftovers of an interrupted save: tempfile.mkdtemp names made by `save` below
_LEFTOVER = re.compile(r"\.(step_\d+)\.(tmp|old)-[A-Za-z0-9_]+\Z")
_FILES = frozenset({TENSORS, MANIFEST})
# dtypes safetensors' numpy API reads and writes natively
_NATIVE = frozenset(
    {
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "float16",
        "uint32",
        "int32",
        "float32",
        "uint64",
        "int64",
        "float64",
    }
)


class CheckpointError(NnxError, ValueError):
    """A checkpoint cannot be read or does not fit the model; ``.problems`` lists every issue.

    Example:
        >>> from nnx_plugins import CheckpointError
        >>> print(CheckpointError("ckpt", ["model.kernel: missing from the checkpoint"]))
        cannot load checkpoint ckpt:
          model.kernel: missing from the checkpoint
    """

    def __init__(
        self, directory: str | os.PathLike[str], problems: Sequence[str], *, action: str = "load"
    ):
        self.directory = os.fspath(directory)
        self.problems = tuple(problems)
        header = f"cannot {action} checkpoint {self.directory}:"
        super().__init__("\n  ".join([header, *self.problems]))


# -- names, paths and versions ---------------------------------------------------------------
def _entry_key(prefix: str, path: Sequence[Any]) -> str:
    return "/".join([prefix, *map(str, path)])


def _kind_provider(cls: type) -> tuple[str, str | None]:
    """(registered kind name, "distribution version" providing it, when known)."""

    name = nnx_core.variable_name(cls)
    if name == f"{cls.__module__}.{cls.__qualname__}":  # automatic name: plugin kind not loaded
        load_variable_types()
        name = nnx_core.variable_name(cls)
    try:
        return name, str(default_registry().resolve("variable", name).plugin)
    except PluginError:
        return name, _distribution_of(cls.__module__)


@functools.cache
def _distribution_of(module: str) -> str | None:

    top = module.split(".")[0]
    if top in ("nnx_core", "nnx_layers", "nnx_plugins"):
        names = ["nnx-jax"]
    else:  # slow (reads every installed distribution's file list): only for unregistered kinds
        names = metadata.packages_distributions().get(top) or []
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{name} {metadata.version(name)}"
    return None


def _versions() -> tuple[dict[str, str], dict[str, str]]:

    packages = {}
    for name in ("nnx-jax", "jax", "jaxlib", "optax", "numpy", "safetensors"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            packages[name] = metadata.version(name)
    plugins = {r.plugin.distribution: r.plugin.version for r in default_registry().distributions()}
    return packages, plugins


# -- writing ---------------------------------------------------------------------------------
def _to_numpy(value: Any) -> tuple[np.ndarray, dict[str, Any]]:

    info: dict[str, Any] = {"shape": list(np.shape(value))}
    if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        info["key_impl"] = str(jax.random.key_impl(value))
        value = jax.random.key_data(value)
        info["dtype"] = "key"
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        if not value.is_fully_replicated:
            raise ValueError(
                "save: an array sharded across hosts cannot be gathered on one host; "
                "replicate it first (jax.device_put with a replicated sharding)."
            )
        value = value.addressable_data(0)
    array = np.asarray(jax.device_get(value))
    info.setdefault("dtype", array.dtype.name)
    if array.dtype.name not in _NATIVE:
        array = array.view(np.dtype(f"uint{8 * array.dtype.itemsize}"))
        info["stored_as"] = array.dtype.name
    # (ascontiguousarray gives a 0-d array one dimension: keep the shape)
    return np.ascontiguousarray(array).reshape(array.shape), info


def _metadata_json(metadata: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in metadata.items():
        try:
            json.dumps(value)
        except TypeError:
            continue
        out[key] = value
    return out


def _collect(
    node: Any, prefix: str, tensors: dict[str, np.ndarray], entries: dict[str, Any]
) -> None:

    providers: dict[type, tuple[str, str | None]] = {}
    for path, variable in nnx_core.state(node).flat_state():
        key = _entry_key(prefix, path)
        if key in entries:
            raise ValueError(
                f"{format_path((prefix, *path))}: two entries would be stored as {key!r}; "
                "rename an attribute so that paths stay distinct as text."
            )
        array, info = _to_numpy(variable.value)
        if type(variable) not in providers:
            providers[type(variable)] = _kind_provider(type(variable))
        kind, provider = providers[type(variable)]
        entries[key] = {
            "path": list(path),
            "kind": kind,
            "provider": provider,
            **info,
            "metadata": _metadata_json(variable.metadata),
        }
        tensors[key] = array


def _config_data(config: Any) -> Any:
    if config is None:
        return None
    if hasattr(config, "to_dict"):
        return config.to_dict()
    if isinstance(config, Mapping):
        return dict(config) if "model" in config else {"model": dict(config)}
    raise TypeError(f"save(config=...) expects a Config or a mapping, got {type(config).__name__}.")


def _sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_tensors(tensors: dict[str, np.ndarray], path: str) -> None:

    save_file(tensors, path)
    _fsync(path)


def _write_manifest(manifest: dict[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=False)
        handle.flush()
        os.fsync(handle.fileno())


def save(
    model: Any,
    directory: str | os.PathLike[str],
    *,
    optimizer: Any = None,
    config: Any = None,
    step: int | None = None,
) -> pathlib.Path:
    """Write ``model`` (and ``optimizer``'s state) to the checkpoint directory ``directory``.

    Args:
        model: the Module to save; every Variable is stored (Params, BatchStats, Rng state, ...).
        directory: the checkpoint directory; replaced atomically if it is a checkpoint. Anything
            else there (a folder with other files, a file, a symlink) is refused and left alone.
        optimizer: an `nnx_core.Optimizer` whose state (moments, step count) is saved too.
        config: the `Config` (or mapping) the model was built from; `load` rebuilds from it.
            Defaults to ``to_config(model)`` when the model can express its config.
        step: the training step, recorded in the manifest.

    Returns:
        The checkpoint directory.

    Example:
        >>> import os, tempfile, optax
        >>> import nnx_core as nnx, nnx_plugins
        >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 1})
        >>> opt = nnx.Optimizer(model, optax.adam(1e-3))
        >>> where = nnx_plugins.save(model, os.path.join(tempfile.mkdtemp(), "c"), optimizer=opt, step=3)
        >>> sorted(os.listdir(where))
        ['manifest.json', 'tensors.safetensors']
    """
    directory = pathlib.Path(directory)
    _check_replaceable(directory)
    if config is None:
        with contextlib.suppress(Exception):
            config = {"model": to_config(model)}
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, Any] = {}
    _collect(model, "model", tensors, entries)
    if optimizer is not None:
        _collect(optimizer, "optimizer", tensors, entries)
    packages, plugins = _versions()
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": step,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": _config_data(config),
        "has_optimizer": optimizer is not None,
        "packages": packages,
        "plugins": plugins,
        "tensors": TENSORS,
        "sha256": None,
        "entries": entries,
    }
    temporary = None
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        temporary = tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent)
        _write_tensors(tensors, os.path.join(temporary, TENSORS))
        manifest["sha256"] = _sha256(os.path.join(temporary, TENSORS))
        _write_manifest(manifest, os.path.join(temporary, MANIFEST))
        _replace_directory(temporary, directory)
    except OSError as error:
        _remove(temporary)
        needed = sum(array.nbytes for array in tensors.values())
        raise CheckpointError(
            directory,
            action="save",
            problems=[
                f"writing it failed: {os_problem(error)} ({getattr(error, 'filename', None) or directory}). "
                f"It needs about {needed:,} bytes. Nothing was replaced: earlier checkpoints are "
                "intact. Free space or fix permissions, or save elsewhere (--run-dir)."
            ],
        ) from error
    except BaseException:
        _remove(temporary)
        raise
    return directory


def _remove(temporary: str | None) -> None:
    if temporary is not None:
        shutil.rmtree(temporary, ignore_errors=True)


def _replace_directory(source: str, target: pathlib.Path) -> None:
    """Rename ``source`` to ``target``; an existing ``target`` is moved aside, then deleted.

    Only a directory `save` could have written is replaced: anything else raises
    `CheckpointError` and is left as it was.
    """
    old = None
    if target.is_symlink() or target.exists():
        _check_replaceable(target)  # (again: something may have appeared while we wrote)
        old = tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent)
        os.replace(target, os.path.join(old, "previous"))
    os.replace(source, target)
    _fsync(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _check_replaceable(target: pathlib.Path) -> None:
    if (target.is_symlink() or target.exists()) and not is_checkpoint_directory(
        target, allow_empty=True
    ):
        raise CheckpointError(
            target,
            action="save",
            problems=[
                "refusing to replace it: it exists and is not a checkpoint (it holds "
                f"files other than {TENSORS} and {MANIFEST}, or is a file or a symlink). "
                "Save to a new directory, or move it away first."
            ],
        )


def is_checkpoint_directory(path: pathlib.Path, *, allow_empty: bool = False) -> bool:
    """Whether ``path`` is a real directory (not a symlink) holding only checkpoint files.

    This is what `save` may replace and `rotate` may delete: never a user's own folder.

    Example:
        >>> import pathlib, tempfile
        >>> from nnx_plugins.training._checkpoint import is_checkpoint_directory
        >>> where = pathlib.Path(tempfile.mkdtemp())
        >>> is_checkpoint_directory(where), is_checkpoint_directory(where, allow_empty=True)
        (False, True)
        >>> (where / "notes.txt").write_text("mine")
        4
        >>> is_checkpoint_directory(where, allow_empty=True)
        False
    """
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        names = set(os.listdir(path))
    except OSError:
        return False
    return names <= _FILES and (allow_empty or MANIFEST in names)


def _is_leftover(path: pathlib.Path) -> bool:
    """A temporary directory of an interrupted `save` (by its name and its contents)."""
    match = _LEFTOVER.match(path.name)
    if match is None or path.is_symlink() or not path.is_dir():
        return False
    if match.group(2) == "tmp":
        return is_checkpoint_directory(path, allow_empty=True)
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return names == [] or (
        names == ["previous"] and is_checkpoint_directory(path / "previous", allow_empty=True)
    )


# -- finding checkpoints ---------------------------------------------------------------------
def step_directory(root: str | os.PathLike[str], step: int) -> pathlib.Path:
    """``root/step_00000042``: where the trainer writes the checkpoint of ``step``."""
    return pathlib.Path(root) / f"step_{step:08d}"


def list_checkpoints(root: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Complete checkpoints (``step_N`` directories with a manifest) under ``root``, oldest first.

    Example:
        >>> from nnx_plugins.training._checkpoint import list_checkpoints
        >>> list_checkpoints("/nonexistent")
        []
    """
    root = pathlib.Path(root)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), child)
        for child in root.iterdir()
        if (m := _STEP_DIR.match(child.name)) and is_checkpoint_directory(child)
    ]
    return [child for _, child in sorted(found)]


def latest_checkpoint(root: str | os.PathLike[str]) -> pathlib.Path | None:
    """The newest complete checkpoint under ``root``, or ``None``."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def rotate(root: str | os.PathLike[str], keep: int) -> list[pathlib.Path]:
    """Delete all but the newest ``keep`` checkpoints, and leftovers of interrupted saves.

    Only what `save` writes is touched: ``step_N`` directories holding nothing but a manifest
    and a tensor file, and ``.step_N.tmp-*`` / ``.step_N.old-*`` directories of the same
    contents. Anything else under ``root`` (a user's own files or folders, symlinks) is left
    alone. Returns the deleted checkpoint directories.

    Example:
        >>> import pathlib, tempfile
        >>> import nnx_plugins
        >>> from nnx_plugins.training._checkpoint import rotate, step_directory
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> model = nnx_plugins.build({"type": "Linear", "in_features": 1, "out_features": 1})
        >>> for step in (1, 2, 3):
        ...     _ = nnx_plugins.save(model, step_directory(root, step), step=step)
        >>> (root / ".step_mine").mkdir()                 # not ours: kept
        >>> [p.name for p in rotate(root, 1)], sorted(p.name for p in root.iterdir())
        (['step_00000001', 'step_00000002'], ['.step_mine', 'step_00000003'])
    """
    found = list_checkpoints(root)
    doomed = found[:-keep] if keep > 0 else found
    for child in doomed:
        shutil.rmtree(child, ignore_errors=True)
    root = pathlib.Path(root)
    if root.is_dir():
        for child in root.iterdir():
            if _is_leftover(child):
                shutil.rmtree(child, ignore_errors=True)
    return doomed
