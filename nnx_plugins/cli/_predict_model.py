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

from ..config._shapes import DataSpec, check_model
from ..training._loop import trained_model
from ..training.checkpoints._manifest import read_manifest
from ._predict_files import Inputs, Outputs

__all__ = ["check_inputs", "predict", "batches"]


def check_inputs(config: Any, inputs: Inputs) -> Any:
    """The abstract output of the model for a batch of ``inputs``.

    Raises:
        ConfigError: a layer cannot take what it is given (the first such, at its place in
            the config, with the shape it received).
    """
    example = jax.ShapeDtypeStruct(inputs.array.shape[1:], inputs.array.dtype)
    return check_model(config, data=DataSpec(example, f"input ({inputs.origin})")).output


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
