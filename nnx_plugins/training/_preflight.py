"""Checks before a run allocates anything: the model against the data, the run against memory.

`data_spec` tells the config package (`check_model`) what a ``data`` section will feed the
model, so that ``nnx config validate`` runs the model abstractly on it: the bundled digits are
``float32[64]`` (``layout: flat``) or ``float32[8,8,1]`` (``NHWC``); an ``.npz`` file's input
shape is read from its header, not its data. The output must be logits ``(batch, classes)``.

Example:
    >>> from nnx_plugins.training._config import DataSection
    >>> spec = data_spec(DataSection(layout="flat"), "<dict>")
    >>> spec.example, spec.origin
    (ShapeDtypeStruct(shape=(64,), dtype=float32), 'data (digits, layout flat)')
    >>> import jax
    >>> spec.check_output(jax.ShapeDtypeStruct((2, 5), "float32"))
    'the model returns float32[2,5] but the 10 classes of digits need logits of shape (batch, 10): end the model with a layer of 10 outputs.'
"""

from __future__ import annotations

import os
import zipfile
from typing import Any

import jax
import numpy as np

from ..config._shapes import DataSpec, ModelCheck, check_model, spell
from ._data import Dataset
from ._memory import check_memory, estimate_memory, trainable_kinds

__all__ = ["data_spec", "dataset_spec", "preflight"]

_DIGITS = {"flat": (64,), "NHWC": (8, 8, 1)}
_DIGIT_CLASSES = 10
_LAYOUT_HINT = (
    "(data.layout: flat gives digits as float32[64], for a Linear first layer; NHWC as "
    "float32[8,8,1], for a Conv.)"
)


def _logits_check(classes: int, name: str) -> Any:
    def check(output: Any) -> str | None:
        shape = getattr(output, "shape", None)
        if isinstance(output, jax.ShapeDtypeStruct) and len(shape) == 2 and shape[-1] >= classes:
            return None
        return (
            f"the model returns {spell(output)} but the {classes} classes of {name} need logits "
            f"of shape (batch, {classes}): end the model with a layer of {classes} outputs."
        )

    return check


def _npz_header(path: str, name: str) -> tuple[tuple[int, ...], np.dtype] | None:
    """Shape and dtype of the array ``name`` in an ``.npz`` file, read from its header only."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as handle:
            version = np.lib.format.read_magic(handle)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read(handle)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None  # (train reports a missing or unreadable file as a DataError)
    return tuple(shape), dtype


def _npz_classes(path: str, names: tuple[str, ...]) -> int | None:
    try:
        with np.load(path, allow_pickle=False) as archive:
            labels = [archive[n] for n in names if n in archive.files]
    except (OSError, ValueError):
        return None
    if not labels or not all(np.issubdtype(y.dtype, np.integer) for y in labels):
        return None
    return int(max(y.max(initial=0) for y in labels)) + 1


def data_spec(section: Any, source: str) -> DataSpec | None:
    """What the ``data`` section will feed the model, or ``None`` if its file cannot be read
    (``source``: the config file, against which a relative ``path`` is resolved)."""
    if section.type == "digits":
        example = jax.ShapeDtypeStruct(_DIGITS[section.layout], np.float32)
        origin = f"data (digits, layout {section.layout})"
        return DataSpec(example, origin, _logits_check(_DIGIT_CLASSES, "digits"), _LAYOUT_HINT)
    path = section.path
    if not os.path.isabs(path) and os.path.isfile(source):
        path = os.path.join(os.path.dirname(os.path.abspath(source)), path)
    header = _npz_header(path, section.x)
    if header is None or not header[0]:
        return None
    classes = _npz_classes(path, (section.y, section.y_test))
    example = jax.ShapeDtypeStruct(header[0][1:], np.float32)  # (the loader casts to float32)
    name = os.path.basename(path)
    check = _logits_check(classes, name) if classes is not None else None
    return DataSpec(example, f"data ({name}, array {section.x!r})", check)


def dataset_spec(data: Dataset, section: Any) -> DataSpec:
    """The `DataSpec` of a loaded dataset (what a run feeds the model), described as its
    ``data`` section says."""
    example = jax.ShapeDtypeStruct(data.x_train.shape[1:], data.x_train.dtype)
    check = _logits_check(data.num_classes, data.name)
    if section.type == "digits":
        return DataSpec(example, f"data (digits, layout {section.layout})", check, _LAYOUT_HINT)
    return DataSpec(example, f"data ({data.name}, array {section.x!r})", check)


def preflight(config: Any, data: Dataset, *, allow_large: bool) -> ModelCheck:
    """Before a run builds its model: check the model abstractly on the data (every problem at
    its layer's position) and its memory against what is available.

    Raises:
        ConfigError: a layer cannot be built or cannot take its input, the output is not
            logits for the data's classes, or the run needs more memory than is free.
    """
    check = check_model(config, data=dataset_spec(data, config.sections["data"]))
    optimizer = config.sections["optimizer"]
    kinds = trainable_kinds(optimizer.trainable)
    estimate = estimate_memory(check.state, optimizer.make(), kinds)
    check_memory(estimate, config, allow_large=allow_large)
    return check
