"""Streaming metrics whose running totals are Variables: Average, Accuracy, Welford, MultiMetric.

A metric is a :class:`~nnx_core.Pytree`, so it is updated inside ``nnx_core.jit`` like a Module
(its ``MetricState`` Variables are written back) and plain ``jax.jit`` accepts it too. Values and
dtypes follow flax.nnx's metrics: totals are float32, counts int32, and an empty metric computes
``nan``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ._api import split
from ._filters import Filter
from ._pytree import Pytree
from ._variables import Variable

__all__ = ["Accuracy", "Average", "Metric", "MetricState", "MultiMetric", "Statistics", "Welford"]


class MetricState(Variable[Any], kind="MetricState"):
    """The kind of every running total a metric keeps.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core.metrics import MetricState
        >>> MetricState(jnp.array(0, jnp.int32))
        MetricState(int32[]=0)
    """


class Metric(Pytree):
    """Base class of metrics: subclasses define ``reset``, ``update(**batch)`` and ``compute``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core.metrics import Metric, MetricState
        >>> class Maximum(Metric):
        ...     def __init__(self): self.best = MetricState(jnp.array(-jnp.inf))
        ...     def reset(self): self.best.value = jnp.array(-jnp.inf)
        ...     def update(self, *, values, **_): self.best.value = jnp.maximum(self.best.value, values.max())
        ...     def compute(self): return self.best.value
        >>> m = Maximum(); m.update(values=jnp.array([1.0, 3.0])); float(m.compute())
        3.0

    Raises:
        NotImplementedError: a subclass does not define ``reset``, ``update`` or ``compute``.
    """

    def reset(self) -> None:
        """Set the running totals back to their initial values, in place."""
        raise NotImplementedError(_missing(self, "reset"))

    def update(self, **kwargs: Any) -> None:
        """Add one batch to the running totals, in place."""
        raise NotImplementedError(_missing(self, "update"))

    def compute(self) -> Any:
        """The metric's value from the running totals."""
        raise NotImplementedError(_missing(self, "compute"))

    def split(self, *filters: Filter) -> tuple[Any, ...]:
        """``nnx_core.split(self, *filters)``."""
        return split(self, *filters)


def _missing(metric: Metric, method: str) -> str:
    return (
        f"{type(metric).__name__} does not define {method}(); every Metric subclass must "
        "define reset(), update(**batch) and compute()."
    )


def _is_scalar(values: Any) -> bool:
    return isinstance(values, (int, float))


class Average(Metric):
    """The mean of every value passed as ``update(values=...)`` (or the ``argname`` keyword).

    ``mask`` (broadcastable to the values) leaves out entries: the total adds
    ``(values * mask).sum()`` and the count ``mask.sum()``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import metrics
        >>> avg = metrics.Average()
        >>> avg.compute()
        Array(nan, dtype=float32)
        >>> avg.update(values=jnp.array([1, 2, 3, 4])); avg.compute()
        Array(2.5, dtype=float32)
        >>> avg.update(values=jnp.array([3, 2, 1, 0])); avg.compute()
        Array(2., dtype=float32)
        >>> avg.reset(); avg.update(values=3.0); avg.compute()
        Array(3., dtype=float32)

    Raises:
        TypeError: ``update`` lacks the ``argname`` keyword.
        ValueError: a ``mask`` with a Python scalar value.
    """

    def __init__(self, argname: str = "values"):
        self.argname = argname
        self.total = MetricState(jnp.array(0, dtype=jnp.float32))
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))

    def reset(self) -> None:
        self.total.value = jnp.array(0, dtype=jnp.float32)
        self.count.value = jnp.array(0, dtype=jnp.int32)

    def update(self, mask: jax.Array | None = None, **kwargs: Any) -> None:
        if self.argname not in kwargs:
            raise TypeError(
                f"{type(self).__name__}.update expects the keyword argument {self.argname!r} "
                f"(the argname it was built with), got {sorted(kwargs)}. Call "
                f"update({self.argname}=batch_values) or build it as "
                f"{type(self).__name__}(argname=...)."
            )
        values = kwargs[self.argname]
        if _is_scalar(values):
            if mask is not None:
                raise ValueError(
                    f"{type(self).__name__}.update got a mask with the Python scalar "
                    f"{self.argname}={values!r}: with a mask, {self.argname} should be a jax "
                    "array; pass the values as an array to mask them."
                )
            total, count = values, jnp.array(1)
        elif mask is None:
            total, count = values.sum(), values.size
        else:
            total = (values * mask.astype(values.dtype)).sum()
            count = mask.sum().astype(jnp.int32)
        # `[...] =` keeps the float32 / int32 dtypes of the totals, as in flax.nnx
        self.total[...] = self.total[...] + total
        self.count[...] = self.count[...] + count

    def compute(self) -> jax.Array:
        return self.total.value / self.count.value


@dataclasses.dataclass(frozen=True)
class Statistics:
    """What :class:`Welford` computes: mean, standard error of the mean, standard deviation.

    A pytree of its three arrays.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_core.metrics import Statistics
        >>> s = Statistics(jnp.array(2.0), jnp.array(0.5), jnp.array(1.0))
        >>> [float(x) for x in jax.tree.leaves(s)]
        [2.0, 0.5, 1.0]
    """

    mean: Any
    standard_error_of_mean: Any
    standard_deviation: Any


jax.tree_util.register_dataclass(
    Statistics,
    data_fields=["mean", "standard_error_of_mean", "standard_deviation"],
    meta_fields=[],
)


class Welford(Metric):
    """Running mean and (population) standard deviation of a stream, by Welford's algorithm.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import metrics
        >>> w = metrics.Welford()
        >>> w.update(values=jnp.array([1, 2, 3, 4])); w.update(values=jnp.array([3, 2, 1, 0]))
        >>> stats = w.compute()
        >>> float(stats.mean), round(float(stats.standard_deviation), 6)
        (2.0, 1.224745)

    Raises:
        TypeError: ``update`` lacks the ``argname`` keyword.
    """

    def __init__(self, argname: str = "values"):
        self.argname = argname
        self.count = MetricState(jnp.array(0, dtype=jnp.int32))
        self.mean = MetricState(jnp.array(0, dtype=jnp.float32))
        self.m2 = MetricState(jnp.array(0, dtype=jnp.float32))

    def reset(self) -> None:
        self.count.value = jnp.array(0, dtype=jnp.int32)
        self.mean.value = jnp.array(0, dtype=jnp.float32)
        self.m2.value = jnp.array(0, dtype=jnp.float32)

    def update(self, **kwargs: Any) -> None:
        if self.argname not in kwargs:
            raise TypeError(
                f"Welford.update expects the keyword argument {self.argname!r} (the argname it "
                f"was built with), got {sorted(kwargs)}. Call update({self.argname}=values)."
            )
        values = kwargs[self.argname]
        scalar = _is_scalar(values)
        n = 1 if scalar else values.size
        before = self.count.value
        count = before + n
        delta = (values if scalar else values.mean()) - self.mean.value
        self.count[...] = count
        self.mean[...] = self.mean[...] + delta * n / count
        m2 = 0.0 if scalar else values.var() * n
        self.m2[...] = self.m2[...] + m2 + delta * delta * n * before / count

    def compute(self) -> Statistics:
        variance = self.m2.value / self.count.value
        std = variance**0.5
        return Statistics(
            mean=self.mean.value,
            standard_error_of_mean=std / (self.count.value**0.5),
            standard_deviation=std,
        )


class Accuracy(Average):
    """The fraction of correct predictions.

    Multi-class (``threshold=None``): ``logits`` have one more axis than ``labels`` and the
    prediction is their argmax. Binary: a logit ``>= threshold`` predicts a positive label.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import metrics
        >>> acc = metrics.Accuracy()
        >>> acc.update(logits=jnp.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]),
        ...            labels=jnp.array([0, 1, 1]))
        >>> acc.compute()
        Array(0.6666667, dtype=float32)
        >>> binary = metrics.Accuracy(threshold=0.5)
        >>> binary.update(logits=jnp.array([0.7, 0.2]), labels=jnp.array([1, 1])); binary.compute()
        Array(0.5, dtype=float32)

    Raises:
        TypeError: a ``threshold`` that is not a float.
        ValueError: logits and labels of mismatched ranks, or labels that are not integers.
    """

    def __init__(self, threshold: float | None = None, *args: Any, **kwargs: Any):
        if threshold is not None and not isinstance(threshold, float):
            raise TypeError(
                f"Accuracy(threshold=...) expects a float (or None for multi-class), got "
                f"{threshold!r} of type {type(threshold).__name__}. Write e.g. 0.5, not 1."
            )
        self.threshold = threshold
        super().__init__(*args, **kwargs)

    def update(  # type: ignore[override]
        self, *, logits: jax.Array, labels: jax.Array, mask: jax.Array | None = None, **_: Any
    ) -> None:
        binary = self.threshold is not None
        if binary and logits.ndim != labels.ndim:
            raise ValueError(
                f"Accuracy(threshold={self.threshold}) is binary: For binary classification, "
                f"logits and labels need the same rank, got logits {logits.shape} and labels {labels.shape}."
            )
        if not binary and logits.ndim != labels.ndim + 1:
            raise ValueError(
                f"Accuracy (multi-class) needs logits with one more axis than labels (For "
                f"multi-class classification, the last axis holds the classes), got logits {logits.shape} and labels {labels.shape}. For binary "
                "predictions build Accuracy(threshold=0.5)."
            )
        if not jnp.issubdtype(labels.dtype, jnp.integer):
            raise ValueError(
                f"Accuracy expects integer labels, got dtype {labels.dtype}. Convert them with "
                "labels.astype(jnp.int32)."
            )
        labels = labels.astype(jnp.int32)
        if self.threshold is not None:
            correct = (logits >= self.threshold) == (labels > 0)
        else:
            correct = logits.argmax(axis=-1) == labels
        super().update(values=correct, mask=mask)


class MultiMetric(Metric):
    """Several metrics updated together: ``update(**batch)`` passes every keyword to each.

    ``mask`` may be one array for all metrics or a dict of arrays by metric name.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import metrics
        >>> m = metrics.MultiMetric(accuracy=metrics.Accuracy(), loss=metrics.Average())
        >>> m.update(logits=jnp.array([[0.9, 0.1], [0.2, 0.8]]), labels=jnp.array([0, 0]),
        ...          values=jnp.array([0.5, 1.5]))
        >>> {k: float(v) for k, v in m.compute().items()}
        {'accuracy': 0.5, 'loss': 1.0}

    Raises:
        ValueError: a metric name that is a method of MultiMetric, or an empty MultiMetric.
        TypeError: a value that is not a Metric.
    """

    def __init__(self, **metrics: Metric):
        if not metrics:
            raise ValueError(
                "MultiMetric needs at least one metric, e.g. MultiMetric(loss=Average())."
            )
        for name, metric in metrics.items():
            if hasattr(MultiMetric, name):
                raise ValueError(
                    f"MultiMetric cannot hold a metric named {name!r}: it is a MultiMetric "
                    "method or attribute. Choose another name."
                )
            if not isinstance(metric, Metric):
                raise TypeError(
                    f"MultiMetric({name}=...) expects a Metric such as Average(), got "
                    f"{type(metric).__name__}."
                )
        self._metric_names = tuple(metrics)
        for name, metric in metrics.items():
            setattr(self, name, metric)

    def reset(self) -> None:
        for name in self._metric_names:
            getattr(self, name).reset()

    def update(self, **updates: Any) -> None:
        mask = updates.pop("mask", None)
        for name in self._metric_names:
            metric_mask = mask.get(name) if isinstance(mask, dict) else mask
            extra = {} if metric_mask is None else {"mask": metric_mask}
            getattr(self, name).update(**updates, **extra)

    def compute(self) -> dict[str, Any]:
        return {name: getattr(self, name).compute() for name in self._metric_names}
