"""The ``acme.quantile`` task: regression of a quantile with the pinball loss.

Example:
    >>> import jax.numpy as jnp
    >>> from acme_layers.quantile import Quantile
    >>> loss, values = Quantile(quantile=0.9).loss(jnp.array([[0.0], [2.0]]),
    ...                                            {"targets": jnp.array([1.0, 1.0])})
    >>> [round(v, 2) for v in values["loss"].tolist()], sorted(values)
    ([0.9, 0.1], ['loss', 'predictions', 'targets'])
"""

from typing import Any

import jax.numpy as jnp

from nnx_plugins import Task

__all__ = ["Quantile"]


class Quantile(Task):
    """Predict the ``quantile`` of the target's distribution (0.5: the median).

    The model maps a batch to ``(batch, 1)`` (or ``(batch,)``) predictions of float targets;
    the test split reports the pinball loss and the mean absolute error.

    Args:
        quantile: which quantile, in ``(0, 1)``.
    """

    metrics = ("mae",)
    train_metrics = ()
    gives = ("predictions", "targets", "loss")

    def __init__(self, *, quantile: float = 0.5):
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}.")
        self.quantile = quantile

    def check_output(self, output: Any, info: Any) -> str | None:
        shape = tuple(getattr(output, "shape", ()))
        if shape[1:] in ((), (1,)):
            return None
        return f"acme.quantile predicts one value per example, the model returns shape {shape}."

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        predictions = outputs.astype(jnp.float32).reshape(outputs.shape[0])
        targets = batch["targets"].astype(jnp.float32)
        error = targets - predictions
        losses = jnp.maximum(self.quantile * error, (self.quantile - 1.0) * error)
        return losses.mean(), {"predictions": predictions, "targets": targets, "loss": losses}
