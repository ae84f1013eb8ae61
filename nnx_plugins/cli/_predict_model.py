"""The model's side of ``nnx predict``: the examples checked against the model abstractly,
then run through it in batches.

Example:
    >>> import numpy as np
    >>> from nnx_plugins.cli._predict_model import batches
    >>> [len(b) for b in batches(np.zeros((10, 2)), 4)]
    [4, 4, 2]
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

import nnx_core as nnx

from ..config._errors import ConfigError
from ..config._shapes import DataSpec, check_model
from ..training._loop import trained_model
from ..training.checkpoints._manifest import read_manifest
from ._predict_files import Inputs, Outputs, PredictError

__all__ = ["check_inputs", "predict", "batches"]


def check_inputs(config: Any, inputs: Inputs) -> Any:
    """The abstract output of the model for a batch of ``inputs``.

    Raises:
        PredictError: the model cannot take the examples, whose shape is not that of the
            examples of the config's data (both shapes named).
        ConfigError: a layer cannot take what it is given (the first such, at its place in
            the config, with the shape it received), the examples being of the data's shape
            (or the data cannot be read).
    """
    example = jax.ShapeDtypeStruct(inputs.array.shape[1:], inputs.array.dtype)
    try:
        return check_model(config, data=DataSpec(example, f"input ({inputs.origin})")).output
    except ConfigError:
        info = _data_info(config)
        expected = getattr(getattr(info, "inputs", None), "shape", None)
        if expected is None or tuple(expected) == example.shape:
            raise
        batch = ", ".join(["N", *map(str, expected)])
        raise PredictError(
            f"--input {inputs.origin}: the model expects examples of shape {tuple(expected)}, "
            f"those of its {info.origin}, but the file gives examples of shape "
            f"{example.shape} (an array of shape {inputs.array.shape}). Give an array of shape "
            f"({batch}): N examples as the model was trained on."
        ) from None


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
