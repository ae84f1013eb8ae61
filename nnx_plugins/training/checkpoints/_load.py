"""Reading checkpoints: `read_manifest` and `load`, with every mismatch reported by path.

See `nnx_plugins.training.checkpoints._save` for the format. Nothing is assigned to the model unless the whole
checkpoint fits it.

Example:
    >>> import os, tempfile
    >>> import nnx_plugins
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> where = nnx_plugins.save(model, os.path.join(tempfile.mkdtemp(), "c"), step=4)
    >>> nnx_plugins.read_manifest(where)["entries"]["model/kernel"]["shape"]
    [2, 3]
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

import nnx_core

from ..._files import NotRegularFile
from ..._text import format_path
from ...config._build import build
from ...registry._errors import PluginError
from ...registry._lookup import get_variable_type
from .._collectives import gather_text, process_label
from .._placement import is_key, place
from ._entries import entry_key
from ._manifest import confined_file, dtype_of, read_manifest, unreadable
from ._repeat import conversion_hints
from ._save import FORMAT_VERSION, CheckpointError, _sha256
from ._shards import ShardReader

__all__ = ["read_manifest", "load"]


def _read_tensors(where: pathlib.Path, manifest: Mapping[str, Any]) -> dict[str, np.ndarray]:

    path = confined_file(where, manifest["tensors"], "tensor file")
    try:
        digest = _sha256(path)
    except (OSError, NotRegularFile) as error:
        raise CheckpointError(where, [unreadable(path, error)]) from None
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


def _stored_problem(array: np.ndarray, info: Mapping[str, Any]) -> str | None:
    """How the tensor file's array disagrees with its manifest entry (None: it agrees)."""
    shape = tuple(info["shape"])
    if info["dtype"] == "key":
        if array.shape[: len(shape)] != shape or array.dtype != np.uint32:
            return (
                f"the tensor file holds {array.dtype.name}{array.shape} but the manifest "
                f"records PRNG keys of shape {shape} (uint32 key data)"
            )
        return None
    stored = info.get("stored_as") or info["dtype"]
    if array.shape != shape or array.dtype.name != stored:
        return (
            f"the tensor file holds {array.dtype.name}{array.shape} but the manifest records "
            f"{stored}{shape}"
        )
    return None


def _restore(array: np.ndarray, info: Mapping[str, Any]) -> Any:
    """The array as the model holds it; ValueError if the key implementation is unknown.

    ``jax.device_put``, not ``jnp.asarray``: the latter compiles a program per shape (an
    identity, 10-50 ms each: 0.4 s of loading a 14-tensor model in a fresh process)."""

    if "stored_as" in info:
        array = array.view(dtype_of(info["dtype"]))
    if info["dtype"] == "key":
        return jax.random.wrap_key_data(jax.device_put(array), impl=info["key_impl"])
    return jax.device_put(array)


def _restored(array: np.ndarray, info: Mapping[str, Any], where: str, problems: list[str]) -> Any:
    trouble = _stored_problem(array, info)
    if trouble is None:
        try:
            return _restore(array, info)
        except (ValueError, TypeError, KeyError) as error:
            trouble = (
                f"its PRNG key data cannot be restored with key_impl {info.get('key_impl')!r} "
                f"({error})"
            )
    problems.append(f"{where}: {trouble}; the checkpoint is corrupt. Load an earlier one.")
    return None


def _kind_type(name: str, provider: str | None) -> tuple[type | None, str | None]:

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
    source: Callable[[str, Mapping[str, Any], Any, str, list[str]], Any],
    problems: list[str],
    *,
    allow_missing: Any = None,
) -> list[tuple[Any, Any]]:
    """(Variable, value) for every entry of ``node``; ``source(key, info, current, where,
    problems)`` makes the value placed like ``current``, or returns None after adding problems.
    The Variables of ``node`` that the filter ``allow_missing`` matches may lack an entry."""

    entries = {k: v for k, v in manifest["entries"].items() if k.startswith(prefix + "/")}
    assignments = []
    seen = set()
    optional = (
        set()
        if allow_missing is None
        else {p for p, _ in nnx_core.state(node, allow_missing).flat_state()}
    )
    for path, variable in nnx_core.state(node).flat_state():
        key = entry_key(prefix, path)
        where = format_path((prefix, *path))
        info = entries.get(key)
        if info is None and path in optional:
            continue  # (allowed to be absent: it keeps its value)
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
        want_dtype = "key" if is_key(value) else np.dtype(value.dtype).name
        want_shape = list(value.shape)
        if info["shape"] != want_shape or info["dtype"] != want_dtype:
            problems.append(
                f"{where}: the checkpoint holds {info['dtype']}{tuple(info['shape'])} "
                f"but the model expects {want_dtype}{tuple(want_shape)}."
            )
            continue
        restored = source(key, info, value, where, problems)
        if restored is not None:
            assignments.append((variable, restored))
    for key in sorted(set(entries) - seen, key=lambda k: _path_order(entries[k]["path"])):
        info = entries[key]
        problems.append(
            f"{format_path((prefix, *info['path']))}: unexpected entry in the checkpoint "
            f"({info['kind']} {info['dtype']}{tuple(info['shape'])}); the model has "
            "nothing at this path."
        )
    return assignments


def _path_order(path: list[Any]) -> list[tuple[int, Any]]:
    return [(0, p) if isinstance(p, int) else (1, str(p)) for p in path]


def _one_file(tensors: Mapping[str, np.ndarray]) -> Callable[..., Any]:
    """The values of a checkpoint with one tensor file (read whole, as one process wrote it)."""

    def source(
        key: str, info: Mapping[str, Any], current: Any, where: str, problems: list[str]
    ) -> Any:
        if key not in tensors:
            problems.append(f"{where}: listed in the manifest but absent from the tensor file.")
            return None
        restored = _restored(tensors[key], info, where, problems)
        if restored is None:
            return None
        sharding = getattr(current, "sharding", None)
        if jax.process_count() > 1 and sharding is not None:
            return place(restored, sharding)  # (each process puts the blocks of its devices)
        if sharding is not None and not is_key(restored):
            return jax.device_put(restored, sharding)
        if _is_abstract(current) and not is_key(restored):
            return jax.device_put(restored)  # (a model built abstractly: on the default device)
        return restored

    return source


def _blocks(reader: ShardReader) -> Callable[..., Any]:
    """The values of a sharded checkpoint, each read in the blocks the model's devices need."""

    def source(
        key: str, info: Mapping[str, Any], current: Any, where: str, problems: list[str]
    ) -> Any:
        return reader.value(info, current, where, problems)

    return source


def _rebuild(where: pathlib.Path, manifest: Mapping[str, Any], *, abstract: bool = False) -> Any:
    """The model of the manifest's config; ``abstract``: built under `nnx_core.eval_shape`
    (nothing initialized or allocated: every value comes from the checkpoint)."""

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
    if abstract:
        try:
            model = nnx_core.eval_shape(lambda: build(model_config))
        except Exception:  # noqa: BLE001 - a layer that cannot be built abstractly: built as usual
            return build(model_config)
        if all(_is_abstract(x) for x in jax.tree.leaves(nnx_core.state(model))):
            return model
    return build(model_config)


def _is_abstract(value: Any) -> bool:
    return isinstance(value, jax.ShapeDtypeStruct)


def load(
    directory: str | os.PathLike[str],
    *,
    into: Any = None,
    optimizer: Any = None,
    extra: Mapping[str, Any] | None = None,
    allow_missing: Any = None,
) -> Any:
    """Load a checkpoint: into ``into`` (a Module), or into a model rebuilt from its config.

    ``directory`` is a checkpoint directory or a directory of ``step_N`` checkpoints (the newest
    is loaded). Nothing is modified unless every entry fits. A rebuilt model is in training
    mode, as `build` makes it (Dropout active, BatchNorm on batch statistics): call
    ``model.eval()`` before predicting; ``into`` keeps its mode.

    Args:
        directory: where the checkpoint is.
        into: the model to fill in place; when omitted the model is rebuilt with `build` from
            the manifest's config.
        optimizer: an `nnx_core.Optimizer` to fill with the saved optimizer state.
        extra: Modules saved beside the model (`save`'s ``extra``), by name, to fill too.
        allow_missing: a filter of the model's Variables that may be absent from the
            checkpoint (e.g. ``LoRAParam``: fresh adapters on pretrained weights); they keep
            their values. Anything else absent is an error.

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
    if jax.process_count() == 1:
        model, assignments = _prepare(directory, into, optimizer, extra, allow_missing)
    else:
        model, assignments = _prepare_together(directory, into, optimizer, extra, allow_missing)
    for variable, value in assignments:
        variable.value = value
    return model


def _prepare(
    directory: str | os.PathLike[str],
    into: Any,
    optimizer: Any,
    extra: Any = None,
    allow_missing: Any = None,
) -> tuple[Any, list]:
    """The model and every (Variable, value) to assign; CheckpointError if anything does not fit."""
    manifest = read_manifest(directory)
    where = pathlib.Path(manifest["directory"])
    with contextlib.ExitStack() as stack:
        if manifest["format_version"] == FORMAT_VERSION:
            source = _one_file(_read_tensors(where, manifest))
        else:
            source = _blocks(stack.enter_context(ShardReader(where, manifest)))
        # (rebuilt abstractly when every value comes from this one tensor file: nothing is
        # initialized, and the model is never held twice)
        abstract = allow_missing is None and manifest["format_version"] == FORMAT_VERSION
        model = _rebuild(where, manifest, abstract=abstract) if into is None else into
        problems: list[str] = []
        assignments = _fill(model, "model", manifest, source, problems, allow_missing=allow_missing)
        if problems:
            problems[:0] = conversion_hints(model, manifest)
        if optimizer is not None:
            if not manifest.get("has_optimizer"):
                problems.append(
                    "optimizer: the checkpoint holds no optimizer state (it was saved "
                    "without optimizer=...)."
                )
            else:
                assignments += _fill(optimizer, "optimizer", manifest, source, problems)
        for name, node in (extra or {}).items():
            if not any(key.startswith(name + "/") for key in manifest["entries"]):
                problems.append(f"{name}: the checkpoint holds no {name} state.")
            else:
                assignments += _fill(node, name, manifest, source, problems)
    if problems:
        raise CheckpointError(where, problems)
    return model, assignments


def _prepare_together(
    directory: str | os.PathLike[str],
    into: Any,
    optimizer: Any,
    extra: Any = None,
    allow_missing: Any = None,
) -> tuple[Any, list]:
    """`_prepare` in every process; nothing is assigned anywhere unless all of them succeeded."""
    failure: CheckpointError | None = None
    try:
        model, assignments = _prepare(directory, into, optimizer, extra, allow_missing)
    except CheckpointError as error:
        failure = error
    outcomes = gather_text("ok" if failure is None else "!" + "; ".join(failure.problems))
    if failure is not None:
        raise failure
    failed = [(p, text[1:]) for p, text in enumerate(outcomes) if text != "ok"]
    if failed:
        raise CheckpointError(
            directory, [f"{process_label(p)} could not load it: {why}" for p, why in failed]
        )
    return model, assignments
