"""What every metric of a run shares: the values it requires, its report key, the loss.

A metric is a `nnx_core.metrics.Metric` subclass; ``requires`` names the values of a task it
reads (a metric the task cannot feed is refused before training), ``key`` (default: its
registered name) is where its value is reported, and an optional ``setup(info)`` sizes it for
the data (a `DataInfo`) before the first update.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins.training.metrics._base import Loss, metric_key, requirements
    >>> loss = Loss()
    >>> loss.update(loss=jnp.array([1.0, 3.0, 9.0]), mask=jnp.array([1, 1, 0]))
    >>> float(loss.compute()), metric_key(loss, "loss"), requirements(Loss)
    (2.0, 'loss', ('loss',))
"""

from __future__ import annotations

from typing import Any

import jax

from nnx_core.metrics import Average

__all__ = ["Loss", "metric_key", "requirements", "missing_values"]


class Loss(Average):
    """The mean loss per example (or counted token): reported for every task as ``loss``."""

    requires = ("loss",)

    def __init__(self) -> None:
        super().__init__()

    def update(self, *, loss: jax.Array, mask: Any = None, **_: Any) -> None:  # type: ignore[override]
        super().update(values=loss, mask=mask)


def metric_key(metric: Any, name: str) -> str:
    """Where ``metric`` (registered as ``name``) is reported."""
    key = getattr(metric, "key", None)
    return key if isinstance(key, str) and key else name


def requirements(metric_type: Any) -> tuple[str, ...]:
    """The task values a metric class reads (``requires``; none declared: nothing checked)."""
    return tuple(getattr(metric_type, "requires", ()))


def missing_values(metric_type: Any, given: tuple[str, ...]) -> list[str]:
    """The values ``metric_type`` requires that a task giving ``given`` does not."""
    return [value for value in requirements(metric_type) if value not in given]
