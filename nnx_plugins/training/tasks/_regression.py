"""The ``regression`` task: any number of float outputs, loss ``mse``, ``mae`` or ``huber``.

Targets of shape ``(...)`` per example need model outputs of shape ``(batch, ...)``; one target
per example may also be met by ``(batch, 1)`` outputs. Reports loss, MSE, MAE and R².

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins.training.tasks._regression import Regression
    >>> loss, values = Regression(loss="mae").loss(jnp.array([[1.0], [4.0]]),
    ...                                            {"targets": jnp.array([2.0, 2.0])})
    >>> float(loss), values["loss"].tolist()
    (1.5, [1.0, 2.0])
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp
import optax

from ...config._shapes import spell
from ..data._base import DataError
from ._base import Task

__all__ = ["Regression"]


class Regression(Task):
    """Regression of float targets: loss mse, mae or huber; reports mse, mae and r2.

    Args:
        loss: ``mse`` (mean squared error), ``mae`` (mean absolute error) or ``huber``.
        huber_delta: where the Huber loss turns from quadratic to linear.
    """

    metrics = ("mse", "mae", "r2")
    train_metrics = ("mae",)
    gives = ("predictions", "targets", "loss")

    def __init__(self, *, loss: Literal["mse", "mae", "huber"] = "mse", huber_delta: float = 1.0):
        if huber_delta <= 0:
            raise ValueError(f"huber_delta must be > 0, got {huber_delta}.")
        self.kind, self.huber_delta = loss, huber_delta

    def check_data(self, data: Any, info: Any, output: Any) -> None:
        if not (
            jnp.issubdtype(info.targets.dtype, jnp.floating)
            or jnp.issubdtype(info.targets.dtype, jnp.integer)
        ):
            raise DataError(
                f"{info.name}: regression needs numeric targets, got {spell(info.targets)}."
            )

    def check_output(self, output: Any, info: Any) -> str | None:
        want = tuple(info.targets.shape)
        shape = tuple(getattr(output, "shape", ()))[1:]
        if isinstance(output, jax.ShapeDtypeStruct) and (
            shape == want or (want == () and shape == (1,))
        ):
            return None
        spelled = f"(batch, {', '.join(map(str, want))})" if want else "(batch,) or (batch, 1)"
        return (
            f"the model returns {spell(output)} but the regression targets of {info.name} are "
            f"{spell(info.targets)} per example, so the outputs must have shape {spelled}: end "
            "the model with a layer of that many outputs."
        )

    def _elementwise(self, error: jax.Array) -> jax.Array:
        if self.kind == "mse":
            return jnp.square(error)
        if self.kind == "mae":
            return jnp.abs(error)
        return optax.huber_loss(error, delta=self.huber_delta)

    def loss(self, outputs: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, dict[str, Any]]:
        predictions = outputs.astype(jnp.float32)
        targets = batch["targets"].astype(jnp.float32)
        if predictions.ndim == targets.ndim + 1 and predictions.shape[-1] == 1:
            predictions = predictions[..., 0]
        elementwise = self._elementwise(predictions - targets)
        losses = elementwise.reshape(elementwise.shape[0], -1).mean(axis=1)
        return losses.mean(), {"predictions": predictions, "targets": targets, "loss": losses}
