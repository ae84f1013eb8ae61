"""The `Task` interface: what a model is asked (its loss) and what is reported about it.

A task is a class whose ``__init__`` arguments are its config (``task: {type: NAME, ...}``).
`loss` runs inside the jitted train and eval steps; the other methods run once, before
training, to refuse data or a model that do not fit (docs/design/runs.md): `check_model` on the
config, `check_output` on the model's abstract output, `check_data` on the data.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins.training.tasks._base import Task
    >>> class Zero(Task):
    ...     gives = ("loss",)
    ...     def loss(self, outputs, batch):
    ...         per_example = jnp.zeros(outputs.shape[:1])
    ...         return per_example.mean(), {"loss": per_example}
    >>> Zero().loss(jnp.ones((3, 2)), {})[0]
    Array(0., dtype=float32)
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["Task"]


class Task:
    """Base class of tasks (a pack's task need only define `loss`).

    Attributes:
        metrics: the registered metric names reported on the test split (``loss`` always is).
        train_metrics: metric names computed inside each train step (averaged per log line).
        gives: the values `loss` returns for metrics (``logits``, ``labels``, ``predictions``,
            ``targets``, ``mask``, ``loss``).
    """

    metrics: tuple[str, ...] = ()
    train_metrics: tuple[str, ...] = ()
    gives: tuple[str, ...] = ("loss",)

    def check_data(self, data: Any, info: Any, output: Any) -> None:
        """Refuse data this task cannot learn from (`DataError`); ``output`` is the model's
        abstract output for a batch (``None`` when unknown)."""

    def check_model(self, config: Any, data: Any) -> tuple[tuple[Any, ...], str] | None:
        """Why the model cannot learn this task from ``data``, judged from the validated run
        ``config`` (its ``model`` section: ``config.model``): ``(the layer's path in the config,
        e.g. ("model", "layers", 1), the reason)``; ``None``: it can."""
        return None

    def check_output(self, output: Any, info: Any) -> str | None:
        """Why the model's abstract ``output`` for a batch does not fit (``None``: it fits)."""
        return None

    def loss(self, outputs: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, dict[str, Any]]:
        """``(mean loss, values for the metrics)`` of a batch; runs inside ``jit``."""
        raise NotImplementedError(f"{type(self).__name__} does not define loss().")
