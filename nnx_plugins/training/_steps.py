"""The jitted steps of a run: the train step (with gradient accumulation and the first
non-finite step kept on the device) and the evaluation step (streaming metrics).

``accumulate_steps: k`` splits each batch of ``k * batch_size`` rows into ``k`` consecutive
micro-batches, scans over them adding the gradients (BatchNorm statistics and Rng counts move
on from one micro-batch to the next), and makes one update with their mean: for a model whose
loss is a mean over the batch, the update of a batch of ``k * batch_size`` rows.

Example:
    >>> import jax.numpy as jnp, numpy as np, optax
    >>> import nnx_core as nnx, nnx_plugins
    >>> from nnx_plugins.training._steps import make_steps
    >>> from nnx_plugins.training.tasks._regression import Regression
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 1})
    >>> optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    >>> steps = make_steps(Regression(), {}, None, accumulate=2, key=("doc",))
    >>> batch = {"inputs": np.ones((4, 2), np.float32), "targets": np.zeros(4, np.float32)}
    >>> loss, values, bad = steps.train(model, optimizer, batch, jnp.int32(0), np.int32(1))
    >>> loss.shape, int(bad)
    ((), 0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

import nnx_core as nnx

from .metrics._base import metric_key

__all__ = ["Steps", "make_steps", "all_finite"]


@dataclasses.dataclass(frozen=True)
class Steps:
    """``train(model, optimizer, batch, bad_step, step) -> (loss, train values, bad_step)``
    and ``evaluate(model, metrics, batch)`` (updates the `MultiMetric` ``metrics``)."""

    train: Callable[..., Any]
    evaluate: Callable[..., Any]


_CACHE: dict[Hashable, Steps] = {}


def _train_values(
    values: Mapping[str, Any], metrics: Mapping[str, Any], info: Any
) -> dict[str, Any]:
    """The train metrics of one step, each computed from the step's values alone."""
    out = {}
    for name, metric_type in metrics.items():
        metric = metric_type()
        if info is not None and callable(getattr(metric, "setup", None)):
            metric.setup(info)
        metric.update(**values)
        out[metric_key(metric, name)] = metric.compute()
    return out


def _micro_batches(batch: Mapping[str, Any], k: int) -> dict[str, Any]:
    return {
        key: value.reshape(k, value.shape[0] // k, *value.shape[1:]) for key, value in batch.items()
    }


def make_steps(
    task: Any,
    train_metrics: Mapping[str, Any],
    info: Any,
    *,
    accumulate: int,
    key: Hashable,
) -> Steps:
    """The jitted steps of ``task`` (cached under ``key``: equal configs reuse compilations).

    Args:
        task: the task; its ``loss(outputs, batch)`` runs inside the steps.
        train_metrics: metric classes by name, computed inside each train step.
        info: the data's `DataInfo` (for metrics that size themselves).
        accumulate: micro-batches per update.
        key: what identifies the task, the metrics and ``accumulate`` (the config's spelling).
    """
    if key in _CACHE:
        return _CACHE[key]

    def loss_fn(model: Any, batch: Any) -> Any:
        return task.loss(model(batch["inputs"]), batch)

    def gradients(model: Any, optimizer: Any, batch: Any) -> Any:
        if accumulate == 1:
            grad_fn = nnx.value_and_grad(loss_fn, has_aux=True, wrt=optimizer.wrt)
            return grad_fn(model, batch)
        graphdef, params, rest = nnx.split(model, optimizer.wrt, ...)

        def micro(carry: Any, part: Any) -> Any:
            state, total = carry

            def pure(p: Any) -> Any:
                # (fresh Variables in this trace: the layers may update their state)
                inner = nnx.merge(graphdef, *jax.tree.map(lambda v: v, (p, state)))
                loss, values = loss_fn(inner, part)
                return loss, (values, nnx.split(inner, optimizer.wrt, ...)[2])

            (loss, (values, state)), grads = jax.value_and_grad(pure, has_aux=True)(params)
            return (state, jax.tree.map(jnp.add, total, grads)), (loss, values)

        zeros = jax.tree.map(jnp.zeros_like, params)
        (rest, total), (losses, values) = jax.lax.scan(
            micro, (rest, zeros), _micro_batches(batch, accumulate)
        )
        nnx.update(model, rest)
        merged = jax.tree.map(lambda v: v.reshape(-1, *v.shape[2:]), values)
        return (losses.mean(), merged), jax.tree.map(lambda g: g / accumulate, total)

    def train_step(model: Any, optimizer: Any, batch: Any, bad_step: Any, step: Any) -> Any:
        (loss, values), grads = gradients(model, optimizer, batch)
        optimizer.update(model, grads)
        bad_step = jnp.where((bad_step == 0) & ~jnp.isfinite(loss), step, bad_step)
        return loss, _train_values(values, train_metrics, info), bad_step

    def eval_step(model: Any, metrics: Any, batch: Any) -> None:
        _, values = loss_fn(model, batch)
        metrics.update(**values)

    steps = Steps(nnx.jit(train_step), nnx.jit(eval_step))
    _CACHE[key] = steps
    return steps


@jax.jit
def _finite(leaves: list[Any]) -> Any:
    return jnp.all(jnp.stack([jnp.isfinite(leaf).all() for leaf in leaves]))


def all_finite(*nodes: Any) -> bool:
    """Whether every floating-point value of ``nodes`` (Modules, Optimizers) is finite."""
    leaves = [
        variable.value
        for node in nodes
        for _, variable in nnx.state(node).flat_state()
        if jnp.issubdtype(getattr(variable.value, "dtype", jnp.int32), jnp.inexact)
    ]
    return bool(_finite(leaves)) if leaves else True
