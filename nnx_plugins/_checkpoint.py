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
import json
import os
import pathlib
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "CheckpointError",
    "save",
    "load",
    "read_manifest",
    "list_checkpoints",
    "latest_checkpoint",
    "step_directory",
    "rotate",
]

FORMAT = "nnx-checkpoint"
FORMAT_VERSION = 1
TENSORS = "tensors.safetensors"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"step_(\d+)\Z")
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


class CheckpointError(ValueError):
    """A checkpoint cannot be read or does not fit the model; ``.problems`` lists every issue.

    Example:
        >>> from nnx_plugins import CheckpointError
        >>> print(CheckpointError("ckpt", ["model.kernel: missing from the checkpoint"]))
        cannot load checkpoint ckpt:
          model.kernel: missing from the checkpoint
    """

    def __init__(self, directory: str | os.PathLike[str], problems: Sequence[str]):
        self.directory = os.fspath(directory)
        self.problems = tuple(problems)
        super().__init__("\n  ".join([f"cannot load checkpoint {self.directory}:", *self.problems]))


# -- names, paths and versions ---------------------------------------------------------------
def _format_path(prefix: str, path: Sequence[Any]) -> str:
    text = prefix
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else f".{key}"
    return text


def _entry_key(prefix: str, path: Sequence[Any]) -> str:
    return "/".join([prefix, *map(str, path)])


def _kind_provider(cls: type) -> tuple[str, str | None]:
    """(registered kind name, "distribution version" providing it, when known)."""
    import nnx_core

    from ._errors import PluginError
    from ._registry import default_registry

    name = nnx_core.variable_name(cls)
    if name == f"{cls.__module__}.{cls.__qualname__}":  # automatic name: plugin kind not loaded
        from ._lookup import load_variable_types

        load_variable_types()
        name = nnx_core.variable_name(cls)
    try:
        return name, str(default_registry().resolve("variable", name).plugin)
    except PluginError:
        return name, _distribution_of(cls.__module__)


@functools.cache
def _distribution_of(module: str) -> str | None:
    import importlib.metadata as metadata

    top = module.split(".")[0]
    if top in ("nnx_core", "nnx_layers", "nnx_plugins"):
        names = ["nnx"]
    else:  # slow (reads every installed distribution's file list): only for unregistered kinds
        names = metadata.packages_distributions().get(top) or []
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{name} {metadata.version(name)}"
    return None


def _versions() -> tuple[dict[str, str], dict[str, str]]:
    import importlib.metadata as metadata

    from ._registry import default_registry

    packages = {}
    for name in ("nnx", "jax", "jaxlib", "optax", "numpy", "safetensors"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            packages[name] = metadata.version(name)
    plugins = {r.plugin.distribution: r.plugin.version for r in default_registry().distributions()}
    return packages, plugins


# -- writing ---------------------------------------------------------------------------------
def _to_numpy(value: Any) -> tuple[np.ndarray, dict[str, Any]]:
    import jax
    import jax.numpy as jnp

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
    import nnx_core

    providers: dict[type, tuple[str, str | None]] = {}
    for path, variable in nnx_core.state(node).flat_state():
        key = _entry_key(prefix, path)
        if key in entries:
            raise ValueError(
                f"{_format_path(prefix, path)}: two entries would be stored as {key!r}; "
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
    from safetensors.numpy import save_file

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
        directory: the checkpoint directory; replaced atomically if it exists.
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
    if config is None:
        with contextlib.suppress(Exception):
            from ._config import to_config

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
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent)
    try:
        _write_tensors(tensors, os.path.join(temporary, TENSORS))
        manifest["sha256"] = _sha256(os.path.join(temporary, TENSORS))
        _write_manifest(manifest, os.path.join(temporary, MANIFEST))
        _replace_directory(temporary, directory)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return directory


def _replace_directory(source: str, target: pathlib.Path) -> None:
    """Rename ``source`` to ``target``; an existing ``target`` is moved aside, then deleted."""
    old = None
    if target.exists():
        old = tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent)
        os.replace(target, os.path.join(old, "previous"))
    os.replace(source, target)
    _fsync(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# -- finding checkpoints ---------------------------------------------------------------------
def step_directory(root: str | os.PathLike[str], step: int) -> pathlib.Path:
    """``root/step_00000042``: where the trainer writes the checkpoint of ``step``."""
    return pathlib.Path(root) / f"step_{step:08d}"


def list_checkpoints(root: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Complete checkpoints (``step_N`` directories with a manifest) under ``root``, oldest first.

    Example:
        >>> from nnx_plugins._checkpoint import list_checkpoints
        >>> list_checkpoints("/nonexistent")
        []
    """
    root = pathlib.Path(root)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), child)
        for child in root.iterdir()
        if (m := _STEP_DIR.match(child.name)) and (child / MANIFEST).is_file()
    ]
    return [child for _, child in sorted(found)]


def latest_checkpoint(root: str | os.PathLike[str]) -> pathlib.Path | None:
    """The newest complete checkpoint under ``root``, or ``None``."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def rotate(root: str | os.PathLike[str], keep: int) -> list[pathlib.Path]:
    """Delete all but the newest ``keep`` checkpoints and leftovers of interrupted saves.

    Returns the deleted directories.
    """
    found = list_checkpoints(root)
    doomed = found[:-keep] if keep > 0 else found
    for child in doomed:
        shutil.rmtree(child, ignore_errors=True)
    for child in pathlib.Path(root).glob(".step_*"):
        shutil.rmtree(child, ignore_errors=True)
    return doomed


# -- reading ---------------------------------------------------------------------------------
def _checkpoint_dir(directory: str | os.PathLike[str]) -> pathlib.Path:
    directory = pathlib.Path(directory)
    if (directory / MANIFEST).is_file():
        return directory
    latest = latest_checkpoint(directory)
    if latest is not None:
        return latest
    if not directory.exists():
        raise CheckpointError(directory, ["no such directory."])
    raise CheckpointError(
        directory,
        [
            f"no {MANIFEST} here and no step_N checkpoint below it "
            "(was the save interrupted before its first checkpoint?)."
        ],
    )


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the checkpoint at ``directory`` (or of the newest one below it).

    The returned dict has an extra ``"directory"`` key: the checkpoint directory it came from.

    Raises:
        CheckpointError: no checkpoint there, or the manifest is not a valid manifest.
    """
    where = _checkpoint_dir(directory)
    try:
        with open(where / MANIFEST, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(where, [f"{MANIFEST} is unreadable or corrupt: {error}"]) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(
            where, [f"{MANIFEST} is not an nnx checkpoint manifest (expected format {FORMAT!r})."]
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            where,
            [
                f"format version {manifest.get('format_version')!r} is not "
                f"supported (this nnx reads version {FORMAT_VERSION})."
            ],
        )
    manifest["directory"] = str(where)
    return manifest


def _read_tensors(where: pathlib.Path, manifest: Mapping[str, Any]) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = where / manifest.get("tensors", TENSORS)
    if not path.is_file():
        raise CheckpointError(where, [f"{path.name} is missing."])
    digest = _sha256(path)
    if digest != manifest.get("sha256"):
        raise CheckpointError(
            where,
            [
                f"{path.name} is corrupt or truncated: its sha256 is {digest[:16]}... but the "
                f"manifest records {str(manifest.get('sha256'))[:16]}... ({path.stat().st_size} "
                "bytes on disk). Load an earlier checkpoint instead."
            ],
        )
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise CheckpointError(where, [f"{path.name} cannot be read: {error}"]) from None


def _restore(array: np.ndarray, info: Mapping[str, Any]) -> Any:
    import jax
    import jax.numpy as jnp

    if "stored_as" in info:
        import ml_dtypes  # noqa: F401  (registers bfloat16 & co. with numpy)

        array = array.view(np.dtype(info["dtype"]))
    if info.get("dtype") == "key":
        return jax.random.wrap_key_data(jnp.asarray(array), impl=info["key_impl"])
    return jnp.asarray(array)


def _kind_type(name: str, provider: str | None) -> tuple[type | None, str | None]:
    import nnx_core

    from ._errors import PluginError
    from ._lookup import get_variable_type

    with contextlib.suppress(KeyError):
        return nnx_core.variable_type(name), None
    try:
        return get_variable_type(name), None
    except PluginError as error:
        source = provider or "an unknown distribution"
        dist = provider.split(" ")[0] if provider else None
        hint = f" Install it: pip install {dist}." if dist else ""
        return None, (
            f"its Variable kind {name!r} is not installed (it was provided by {source} "
            f"when saved).{hint} ({error})"
        )


def _fill(
    node: Any,
    prefix: str,
    manifest: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray],
    problems: list[str],
) -> list[tuple[Any, Any]]:
    import nnx_core

    entries = {k: v for k, v in manifest["entries"].items() if k.startswith(prefix + "/")}
    assignments = []
    seen = set()
    for path, variable in nnx_core.state(node).flat_state():
        key = _entry_key(prefix, path)
        where = _format_path(prefix, path)
        info = entries.get(key)
        if info is None:
            problems.append(
                f"{where}: missing from the checkpoint (the model has a "
                f"{type(variable).__name__} {tuple(variable.value.shape)} here)."
            )
            continue
        seen.add(key)
        kind, trouble = _kind_type(info["kind"], info.get("provider"))
        if trouble:
            problems.append(f"{where}: {trouble}")
            continue
        if not isinstance(variable, kind):
            problems.append(
                f"{where}: the checkpoint holds a {info['kind']} but the model has a "
                f"{nnx_core.variable_name(type(variable))}."
            )
            continue
        value = variable.value
        want_dtype = "key" if _is_key(value) else np.dtype(value.dtype).name
        want_shape = list(value.shape)
        if info["shape"] != want_shape or info["dtype"] != want_dtype:
            problems.append(
                f"{where}: the checkpoint holds {info['dtype']}{tuple(info['shape'])} "
                f"but the model expects {want_dtype}{tuple(want_shape)}."
            )
            continue
        if key not in tensors:
            problems.append(f"{where}: listed in the manifest but absent from the tensor file.")
            continue
        assignments.append((variable, _restore(tensors[key], info)))
    for key in sorted(set(entries) - seen):
        info = entries[key]
        problems.append(
            f"{_format_path(prefix, info['path'])}: unexpected entry in the checkpoint "
            f"({info['kind']} {info['dtype']}{tuple(info['shape'])}); the model has "
            "nothing at this path."
        )
    return assignments


def _is_key(value: Any) -> bool:
    import jax
    import jax.numpy as jnp

    return isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key)


def _assign(assignments: list[tuple[Any, Any]]) -> None:
    import jax

    for variable, value in assignments:
        sharding = getattr(variable.value, "sharding", None)
        if sharding is not None and not _is_key(value):
            value = jax.device_put(value, sharding)
        variable.value = value


def _rebuild(where: pathlib.Path, manifest: Mapping[str, Any]) -> Any:
    from ._config import build

    config = manifest.get("config")
    if not isinstance(config, Mapping) or "model" not in config:
        raise CheckpointError(
            where,
            [
                "the manifest has no model config to rebuild the model "
                "from; pass the model: load(directory, into=model)."
            ],
        )
    model_config = {"model": config["model"]}
    if "plugins" in config:
        model_config["plugins"] = config["plugins"]
    return build(model_config)


def load(directory: str | os.PathLike[str], *, into: Any = None, optimizer: Any = None) -> Any:
    """Load a checkpoint: into ``into`` (a Module), or into a model rebuilt from its config.

    ``directory`` is a checkpoint directory or a directory of ``step_N`` checkpoints (the newest
    is loaded). Nothing is modified unless every entry fits.

    Args:
        directory: where the checkpoint is.
        into: the model to fill in place; when omitted the model is rebuilt with `build` from
            the manifest's config.
        optimizer: an `nnx_core.Optimizer` to fill with the saved optimizer state.

    Returns:
        The model.

    Raises:
        CheckpointError: listing by path every missing or unexpected entry, shape/dtype/kind
            mismatch and unknown Variable kind (with the distribution that provided it); or a
            corrupt/truncated tensor file (checksum mismatch) or manifest.

    Example:
        >>> import os, tempfile
        >>> import nnx_plugins
        >>> from nnx_plugins import CheckpointError
        >>> small = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
        >>> where = nnx_plugins.save(small, os.path.join(tempfile.mkdtemp(), "c"))
        >>> big = nnx_plugins.build({"type": "Linear", "in_features": 4, "out_features": 3})
        >>> try:
        ...     nnx_plugins.load(where, into=big)
        ... except CheckpointError as error:
        ...     print(error.problems[0])
        model.kernel: the checkpoint holds float32(2, 3) but the model expects float32(4, 3).
    """
    manifest = read_manifest(directory)
    where = pathlib.Path(manifest["directory"])
    tensors = _read_tensors(where, manifest)
    model = _rebuild(where, manifest) if into is None else into
    problems: list[str] = []
    assignments = _fill(model, "model", manifest, tensors, problems)
    if optimizer is not None:
        if not manifest.get("has_optimizer"):
            problems.append(
                "optimizer: the checkpoint holds no optimizer state (it was saved "
                "without optimizer=...)."
            )
        else:
            assignments += _fill(optimizer, "optimizer", manifest, tensors, problems)
    if problems:
        raise CheckpointError(where, problems)
    _assign(assignments)
    return model
