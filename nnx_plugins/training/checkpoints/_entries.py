"""What a checkpoint records about each Variable: its key, kind, provider, shape, dtype and
metadata, the arrays to write (one process) or the blocks of them (several processes), and the
manifest's header (format, step, config, package versions).

Example:
    >>> import nnx_plugins
    >>> from nnx_plugins.training.checkpoints._entries import collect
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> tensors, entries = {}, {}
    >>> collect(model, "model", tensors, entries)
    >>> entries["model/kernel"]["kind"], entries["model/kernel"]["shape"], tensors["model/kernel"].shape
    ('Param', [2, 3], (2, 3))
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata as metadata
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import nnx_core

from ..._text import format_path
from ...config._build import to_config
from ...registry._errors import PluginError
from ...registry._lookup import load_variable_types
from ...registry._registry import default_registry
from ._blocks import layout, shard_file

__all__ = ["FORMAT", "entry_key", "collect", "collect_blocks", "header"]

FORMAT = "nnx-checkpoint"
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


# -- names, paths and versions ---------------------------------------------------------------
def entry_key(prefix: str, path: Sequence[Any]) -> str:
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


# -- what each entry records -----------------------------------------------------------------
def _to_numpy(value: Any) -> tuple[np.ndarray, dict[str, Any]]:

    info: dict[str, Any] = {"shape": list(np.shape(value))}
    if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        info["key_impl"] = str(jax.random.key_impl(value))
        value = jax.random.key_data(value)
        info["dtype"] = "key"
    array = np.asarray(jax.device_get(value))
    info.setdefault("dtype", array.dtype.name)
    return _storable(array, info), info


def _storable(array: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """``array`` as safetensors' numpy API writes it (bfloat16 & co. as an unsigned view)."""
    if array.dtype.name not in _NATIVE:
        array = array.view(np.dtype(f"uint{8 * array.dtype.itemsize}"))
        info["stored_as"] = array.dtype.name
    # (ascontiguousarray gives a 0-d array one dimension: keep the shape)
    return np.ascontiguousarray(array).reshape(array.shape)


def _metadata_json(metadata: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in metadata.items():
        try:
            json.dumps(value)
        except TypeError:
            continue
        out[key] = value
    return out


def collect(
    node: Any, prefix: str, tensors: dict[str, np.ndarray], entries: dict[str, Any]
) -> None:

    providers: dict[type, tuple[str, str | None]] = {}
    for path, variable in nnx_core.state(node).flat_state():
        key = entry_key(prefix, path)
        _check_distinct(key, (prefix, *path), entries)
        array, info = _to_numpy(variable.value)
        entries[key] = _entry(variable, path, info, providers)
        tensors[key] = array


def _check_distinct(key: str, path: tuple[Any, ...], entries: Mapping[str, Any]) -> None:
    if key in entries:
        raise ValueError(
            f"{format_path(path)}: two entries would be stored as {key!r}; "
            "rename an attribute so that paths stay distinct as text."
        )


def _entry(
    variable: Any,
    path: tuple[Any, ...],
    info: dict[str, Any],
    providers: dict[type, tuple[str, str | None]],
) -> dict[str, Any]:
    if type(variable) not in providers:
        providers[type(variable)] = _kind_provider(type(variable))
    kind, provider = providers[type(variable)]
    return {
        "path": list(path),
        "kind": kind,
        "provider": provider,
        **info,
        "metadata": _metadata_json(variable.metadata),
    }


def _config_data(config: Any) -> Any:
    if config is None:
        return None
    if hasattr(config, "to_dict"):
        return config.to_dict()
    if isinstance(config, Mapping):
        return dict(config) if "model" in config else {"model": dict(config)}
    raise TypeError(f"save(config=...) expects a Config or a mapping, got {type(config).__name__}.")


def collect_blocks(
    node: Any, prefix: str, tensors: dict[str, np.ndarray], entries: dict[str, Any]
) -> None:
    """Like `collect` with several processes: each entry lists its blocks and the file each
    block is in; ``tensors`` receives the blocks this process writes."""
    providers: dict[type, tuple[str, str | None]] = {}
    for path, variable in nnx_core.state(node).flat_state():
        key = entry_key(prefix, path)
        _check_distinct(key, (prefix, *path), entries)
        value, info = variable.value, {"shape": list(np.shape(variable.value))}
        if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            info.update(dtype="key", key_impl=str(jax.random.key_impl(value)))
            value = jax.random.key_data(value)
        owners, mine = layout(value)
        blocks = []
        for number, (block, process) in enumerate(owners.items()):
            ndim = len(info["shape"])  # (a key's data has one more dimension: read whole)
            tensor = f"{key}#{number}"
            blocks.append(
                {
                    "file": shard_file(process, jax.process_count()),
                    "tensor": tensor,
                    "start": [start for start, _ in block[:ndim]],
                    "stop": [stop for _, stop in block[:ndim]],
                }
            )
            if block in mine:
                info.setdefault("dtype", mine[block].dtype.name)
                tensors[tensor] = _storable(mine[block], info)
        info.setdefault("dtype", np.dtype(value.dtype).name)
        if info["dtype"] not in _NATIVE and info["dtype"] != "key":
            info["stored_as"] = f"uint{8 * np.dtype(value.dtype).itemsize}"
        entries[key] = {**_entry(variable, path, info, providers), "blocks": blocks}


def header(
    model: Any,
    config: Any,
    step: int | None,
    version: int,
    *,
    has_optimizer: bool,
    run: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest's fields before the tensors: format, step, config, versions, run facts."""
    if config is None:
        with contextlib.suppress(Exception):
            config = {"model": to_config(model)}
    packages, plugins = _versions()
    return {
        "format": FORMAT,
        "format_version": version,
        "step": step,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": _config_data(config),
        "has_optimizer": has_optimizer,
        "packages": packages,
        "plugins": plugins,
        "run": dict(run or {}),
    }
