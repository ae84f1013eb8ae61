"""The built-in metrics, on `nnx_core.metrics`: accuracy, top-k accuracy, mse, mae, r2,
perplexity and bits per token.

Each reads some of the values a task gives (``requires``): ``logits`` and ``labels``
(classification, language models), ``predictions`` and ``targets`` (regression), ``loss`` (per
example or token), and ``mask`` (1 where a value counts) when the task has one.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins.training.metrics._builtin import R2, TopKAccuracy
    >>> top2 = TopKAccuracy(k=2)
    >>> top2.update(logits=jnp.array([[0.1, 0.5, 0.4], [0.8, 0.15, 0.05]]), labels=jnp.array([2, 1]))
    >>> top2.key, float(top2.compute())
    ('top_2_accuracy', 1.0)
    >>> r2 = R2()
    >>> r2.update(predictions=jnp.array([1.0, 2.0, 3.0]), targets=jnp.array([1.0, 2.0, 4.0]))
    >>> round(float(r2.compute()), 4)
    0.7857
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core.metrics import Accuracy, Average, Metric, MetricState

__all__ = [
    "TokenAccuracy",
    "TopKAccuracy",
    "MeanSquaredError",
    "MeanAbsoluteError",
    "R2",
    "Perplexity",
    "BitsPerToken",
]


def _aligned(predictions: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Predictions ``(batch, 1)`` for targets ``(batch,)`` are one output: compare them so."""
    predictions = predictions.astype(jnp.float32)
    targets = targets.astype(jnp.float32)
    if predictions.ndim == targets.ndim + 1 and predictions.shape[-1] == 1:
        predictions = predictions[..., 0]
    return predictions, targets


def _example_mask(mask: Any, values: jax.Array) -> Any:
    """``mask`` broadcast over the trailing axes of ``values`` (None: every value counts)."""
    if mask is None:
        return None
    mask = mask.astype(values.dtype)
    return mask.reshape(mask.shape + (1,) * (values.ndim - mask.ndim))


class TokenAccuracy(Accuracy):
    """The share of examples (or counted tokens) whose highest logit is the label."""

    requires = ("logits", "labels")

    def __init__(self) -> None:
        super().__init__()


class TopKAccuracy(Average):
    """The share of examples (or counted tokens) whose label is among the k highest logits.

    Args:
        k: how many of the highest logits count.
    """

    requires = ("logits", "labels")

    def __init__(self, k: int = 5):
        if k < 1:
            raise ValueError(f"top_k_accuracy needs k >= 1, got {k}.")
        self.k = k
        super().__init__()

    @property
    def key(self) -> str:
        return f"top_{self.k}_accuracy"

    def update(self, *, logits: jax.Array, labels: jax.Array, mask: Any = None, **_: Any) -> None:  # type: ignore[override]
        k = min(self.k, logits.shape[-1])
        _, best = jax.lax.top_k(logits, k)
        hits = (best == labels[..., None].astype(best.dtype)).any(axis=-1)
        super().update(values=hits, mask=mask)


class _TargetError(Average):
    """The mean of ``error(prediction - target)`` over every output of every example."""

    requires = ("predictions", "targets")
    error: Any = None  # an elementwise function of the difference

    def update(
        self, *, predictions: jax.Array, targets: jax.Array, mask: Any = None, **_: Any
    ) -> None:  # type: ignore[override]
        predictions, targets = _aligned(predictions, targets)
        error = type(self).error(predictions - targets)
        super().update(values=error, mask=_example_mask(mask, error))


class MeanSquaredError(_TargetError):
    """The mean of (prediction - target) ** 2 over every output of every example."""

    error = jnp.square


class MeanAbsoluteError(_TargetError):
    """The mean of |prediction - target| over every output of every example."""

    error = jnp.abs


class R2(Metric):
    """The coefficient of determination R², averaged over the outputs, as scikit-learn's.

    ``r2_score`` with ``multioutput="uniform_average"``: ``1 - SS_res / SS_tot`` per output.

    The totals are kept per output (sized at `setup` from the data's targets).
    """

    requires = ("predictions", "targets")

    def __init__(self) -> None:
        self.outputs = 1
        self._totals(1)

    def _totals(self, outputs: int) -> None:
        zeros = jnp.zeros((outputs,), jnp.float32)
        self.count = MetricState(jnp.array(0.0, jnp.float32))
        self.sum = MetricState(zeros)
        self.sum_squares = MetricState(zeros)
        self.residual = MetricState(zeros)

    def setup(self, info: Any) -> None:
        """Size the totals for the targets of ``info`` (a `DataInfo`)."""
        self.outputs = max(1, math.prod(info.targets.shape))
        self._totals(self.outputs)

    def reset(self) -> None:
        self._totals(self.outputs)

    def update(
        self, *, predictions: jax.Array, targets: jax.Array, mask: Any = None, **_: Any
    ) -> None:
        predictions, targets = _aligned(predictions, targets)
        rows = targets.shape[0] if targets.ndim else 1
        predictions = predictions.reshape(rows, -1)
        targets = targets.reshape(rows, -1)
        weight = jnp.ones((rows, 1), jnp.float32) if mask is None else mask.reshape(rows, 1)
        weight = weight.astype(jnp.float32)
        self.count.value = self.count.value + weight.sum()
        self.sum.value = self.sum.value + (weight * targets).sum(axis=0)
        self.sum_squares.value = self.sum_squares.value + (weight * targets**2).sum(axis=0)
        self.residual.value = self.residual.value + (weight * (targets - predictions) ** 2).sum(
            axis=0
        )

    def compute(self) -> jax.Array:
        count = self.count.value
        total = self.sum_squares.value - self.sum.value**2 / count
        scores = jnp.where(total > 0, 1.0 - self.residual.value / total, 0.0)
        return scores.mean()


class Perplexity(Average):
    """The exponential of the mean loss per counted token (a cross-entropy in nats)."""

    requires = ("loss",)

    def __init__(self) -> None:
        super().__init__()

    def update(self, *, loss: jax.Array, mask: Any = None, **_: Any) -> None:  # type: ignore[override]
        super().update(values=loss, mask=mask)

    def compute(self) -> jax.Array:
        return jnp.exp(super().compute())


class BitsPerToken(Perplexity):
    """The mean loss per counted token in bits (loss / ln 2): bits per byte on bytes."""

    def compute(self) -> jax.Array:
        return Average.compute(self) / jnp.log(2.0)
