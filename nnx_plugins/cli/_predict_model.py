"""The model's side of ``nnx predict``: the examples checked against the model abstractly,
then run through it in batches.

Example:
    >>> import numpy as np
    >>> from nnx_plugins.cli._predict_model import batches
    >>> [len(b) for b in batches(np.zeros((10, 2)), 4)]
    [4, 4, 2]
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

import nnx_core as nnx

from .._text import format_path
from ..config._errors import ConfigError
from ..config._shapes import DataSpec, check_model
from ..training._contracts import first_embedding
from ..training._loop import trained_model
from ..training.checkpoints._manifest import read_manifest
from ..training.data._base import first_outside
from ._predict_files import Inputs, Outputs, PredictError

__all__ = ["check_inputs", "predict", "batches"]


def check_inputs(config: Any, inputs: Inputs) -> Any:
    """The abstract output of the model for a batch of ``inputs``.

    Raises:
        PredictError: the model cannot take the examples: what it takes per example (the
            shape, each axis fixed or up to a size, and the dtype when it matters, found by
            running it abstractly on the data's examples and on variants of them) and what
            the file gives; or a token id outside the rows of the model's first ``Embed``
            (the first, by row and position, with its value and the valid range).
        ConfigError: a layer cannot take what it is given (the first such, at its place in
            the config, with the shape it received), when the model's examples cannot be
            described (the data cannot be read) or the file's fit that description.
    """
    example = jax.ShapeDtypeStruct(inputs.array.shape[1:], inputs.array.dtype)
    try:
        output = check_model(config, data=DataSpec(example, f"input ({inputs.origin})")).output
    except ConfigError:
        taken = _taken(config, example)
        if taken is None:
            raise
        fix = taken.fix
        if inputs.from_csv and taken.integers:
            fix += " in an .npz file (a .csv is read as floats)"
        raise PredictError(
            f"--input {inputs.origin}: the model takes {taken.text}, but the file gives "
            f"{example.dtype.name} examples of shape {example.shape} (an array of shape "
            f"{inputs.array.shape}). Give {fix}: N examples."
        ) from None
    _check_token_ids(config, inputs)
    return output


@dataclasses.dataclass(frozen=True)
class _Taken:
    """What the model takes per example, in words (``text``) and as the array to give (``fix``);
    ``integers``: it refuses the file's floats for integers."""

    text: str
    fix: str
    integers: bool = False


def _taken(config: Any, example: jax.ShapeDtypeStruct) -> _Taken | None:
    """What the model takes per example, found abstractly from the examples of the config's
    data (which it takes): each axis fixed, up to the data's size, or of any size (a size of
    1 and one past the data's tried), and the dtype when another is refused; ``None`` when
    the data cannot be read, the model does not take its examples, or ``example`` fits."""
    known = getattr(_data_info(config), "inputs", None)
    if not isinstance(known, jax.ShapeDtypeStruct) or not _fits(config, known.shape, known.dtype):
        return None
    dtype = np.dtype(known.dtype)
    strict = example.dtype != dtype and not _fits(config, known.shape, example.dtype)
    axes = [_axis(config, known, i) for i in range(len(known.shape))]
    names = _axis_names(axes)
    if not strict and len(axes) == len(example.shape):
        if all(_within(a, s) for a, s in zip(axes, example.shape, strict=True)):
            return None  # (each axis fits alone: the probe does not explain it)
    shape = ", ".join(n if kind else str(size) for n, (kind, size) in zip(names, axes, strict=True))
    shape = f"({shape},)" if len(axes) == 1 else f"({shape})"
    bounds = [
        f"{n} from 1 to {size:,}" if kind == "up to" else f"{n} of any size"
        for n, (kind, size) in zip(names, axes, strict=True)
        if kind
    ]
    what = f"{dtype.name} examples" if strict else "examples"
    text = f"{what} of shape {shape}" + (f" ({', '.join(bounds)})" if bounds else "")
    batch = "(N" + "".join(f", {n or size}" for n, (_, size) in zip(names, axes, strict=True))
    fix = f"an array of shape {batch})" + (f" of {dtype.name} values" if strict else "")
    return _Taken(text, fix, integers=strict and dtype.kind in "iu")


def _fits(config: Any, shape: tuple[int, ...], dtype: Any) -> bool:
    """Whether the model takes examples of ``shape`` and ``dtype`` (run abstractly)."""
    try:
        check_model(config, data=DataSpec(jax.ShapeDtypeStruct(shape, dtype), "input"))
    except ConfigError:
        return False
    return True


def _axis(config: Any, known: Any, index: int) -> tuple[str, int]:
    """``("", size)``: the axis must have the data's size; ``("up to", size)``: any size
    from 1 to it; ``("any", size)``: a size of 1 and one past it fit too."""
    size = known.shape[index]

    def resized(new: int) -> tuple[int, ...]:
        return (*known.shape[:index], new, *known.shape[index + 1 :])

    if size != 1 and not _fits(config, resized(1), known.dtype):
        return "", size
    if _fits(config, resized(size + 1), known.dtype):
        return "any", size
    return ("up to", size) if size != 1 else ("", size)


def _axis_names(axes: list[tuple[str, int]]) -> list[str]:
    """``L`` for the one axis of a varying size, ``L1``, ``L2``... for several, ``""`` else."""
    varying = [i for i, (kind, _) in enumerate(axes) if kind]
    names = [""] * len(axes)
    for number, index in enumerate(varying, start=1):
        names[index] = "L" if len(varying) == 1 else f"L{number}"
    return names


def _within(axis: tuple[str, int], size: int) -> bool:
    kind, known = axis
    return kind == "any" or size == known or (kind == "up to" and 1 <= size <= known)


def _check_token_ids(config: Any, inputs: Inputs) -> None:
    """Integer examples within the rows of the model's first ``Embed`` (as training checks
    its data): an id past its table is not refused by the lookup, which gives NaN or another
    token's vector."""
    if not np.issubdtype(inputs.array.dtype, np.integer):
        return
    embedding = first_embedding(config.model)
    if embedding is None:
        return
    path, rows = embedding
    found = first_outside([("", inputs.array, 0)], rows)
    if found is None:
        return
    _, where, value = found
    row, *position = where.split(", ")
    place = f"row {row}" + (f", position {', '.join(position)}" if position else "")
    raise PredictError(
        f"--input {inputs.origin}: the token id at [{where}] ({place}, from 0) is {value:,}, "
        f"but the model embeds {rows:,} tokens (0 to {rows - 1:,}; its Embed at "
        f"{format_path(path)}). Give token ids of the model's tokenizer, from 0 to {rows - 1:,}."
    )


def _data_info(config: Any) -> Any:
    """The description of the config's data (what the model trains on), or None."""
    try:
        return config.sections["data"].make().describe()
    except Exception:  # noqa: BLE001 - only a better message: the model's own error stands
        return None


def batches(array: np.ndarray, size: int) -> Iterator[np.ndarray]:
    """``array`` in consecutive slices of at most ``size`` examples."""
    for start in range(0, len(array), size):
        yield array[start : start + size]


def predict(
    config: Any, checkpoint: str | os.PathLike[str], array: np.ndarray, *, batch_size: int
) -> Outputs:
    """The outputs of the model of ``config`` filled from ``checkpoint`` (evaluation mode) for
    every example of ``array``, a compiled forward pass per batch of ``batch_size``.

    Raises:
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
    """
    manifest = read_manifest(checkpoint)
    model = trained_model(config, manifest["directory"])
    model.eval()
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))
    outputs = [np.asarray(forward(state, part)) for part in batches(array, batch_size)]
    return Outputs(np.concatenate(outputs), manifest["directory"], manifest.get("step"))
