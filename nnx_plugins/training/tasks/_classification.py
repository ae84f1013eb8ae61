"""The ``classification`` task: softmax cross-entropy on ``(batch, classes)`` logits.

Targets are integer class indices, one per example; every label is checked against the
model's classes before training, and the first out of range is named with its index.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins.training.tasks._classification import Classification
    >>> loss, values = Classification().loss(jnp.array([[2.0, 0.0], [0.0, 2.0]]),
    ...                                      {"targets": jnp.array([0, 0])})
    >>> round(float(loss), 4), sorted(values)
    (1.1269, ['labels', 'logits', 'loss'])
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...config._shapes import spell
from ..data._base import DataError
from ._base import Task

__all__ = ["Classification", "first_bad_label"]


def first_bad_label(labels: np.ndarray, classes: int) -> tuple[int, int] | None:
    """``(index, label)`` of the first label outside ``[0, classes)``, or ``None``.

    Example:
        >>> import numpy as np
        >>> from nnx_plugins.training.tasks._classification import first_bad_label
        >>> first_bad_label(np.array([0, 3, -1, 9]), 4)
        (2, -1)
    """
    bad = np.flatnonzero((labels < 0) | (labels >= classes))
    return (int(bad[0]), int(labels[bad[0]])) if bad.size else None


class Classification(Task):
    """Softmax cross-entropy on (batch, classes) logits of integer labels (the default task).

    The model maps a batch of inputs to ``(batch, classes)`` logits; targets are integer
    class indices. Reports ``loss`` and ``accuracy`` on the test split.
    """

    metrics = ("accuracy",)
    train_metrics = ("accuracy",)
    gives = ("logits", "labels", "loss")

    def __init__(self) -> None:
        pass

    def check_data(self, data: Any, info: Any, output: Any) -> None:
        targets = info.targets
        if not jnp.issubdtype(targets.dtype, jnp.integer) or targets.shape != ():
            kind = "regression" if jnp.issubdtype(targets.dtype, jnp.floating) else "another task"
            raise DataError(
                f"{info.name}: classification needs one integer class index per example, but "
                f"its targets are {spell(targets)} per example. Give integer labels, or "
                f"choose task: {{type: {kind}}}."
            )
        classes = output.shape[-1] if output is not None and len(output.shape) == 2 else None
        if classes is None:
            return
        held = data.label_arrays() if callable(getattr(data, "label_arrays", None)) else ()
        for name, labels, offset in held:
            found = first_bad_label(np.asarray(labels), classes)
            if found is not None:
                index, label = found
                raise DataError(
                    f"{info.name}: label {name}[{index + offset}] is {label}, outside the model's "
                    f"{classes} classes (0 to {classes - 1}). Labels must be class indices; "
                    "fix the data, or give the model more outputs."
                )

    def check_output(self, output: Any, info: Any) -> str | None:
        classes = info.classes or 1
        shape = getattr(output, "shape", None)
        if isinstance(output, jax.ShapeDtypeStruct) and len(shape) == 2 and shape[-1] >= classes:
            return None
        if info.classes is None:
            return (
                f"the model returns {spell(output)} but classification needs logits of shape "
                "(batch, classes): end the model with a layer of one output per class."
            )
        return (
            f"the model returns {spell(output)} but the {classes} classes of {info.name} need "
            f"logits of shape (batch, {classes}): end the model with a layer of {classes} outputs."
        )

    def loss(self, outputs: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, dict[str, Any]]:
        logits = outputs.astype(jnp.float32)
        labels = batch["targets"]
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return losses.mean(), {"logits": logits, "labels": labels, "loss": losses}
