"""Metrics: values and dtypes equal to flax.nnx's for the same updates, masks, reset, use inside
nnx_core.jit and plain jax.jit, custom metrics, and every error."""

from __future__ import annotations

import importlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import metrics

LOGITS = jnp.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7], [0.5, 0.5]])
LABELS = jnp.array([0, 1, 1, 1, 0])
BINARY = jnp.array([0.7, 0.2, 0.5, 0.9, 0.1])
MASK = jnp.array([1, 1, 0, 1, 0])

# (metric factory name, its arguments, the update batches)
CASES = {
    "average": (
        "Average",
        (),
        [{"values": jnp.array([1, 2, 3, 4])}, {"values": jnp.array([3.0, 2.0, 1.0, 0.0])}],
    ),
    "average_scalars": ("Average", (), [{"values": 2.0}, {"values": 5}]),
    "average_masked": ("Average", (), [{"values": jnp.arange(5.0), "mask": MASK}]),
    "average_argname": ("Average", ("loss",), [{"loss": jnp.array([0.5, 1.5])}]),
    "accuracy": (
        "Accuracy",
        (),
        [{"logits": LOGITS, "labels": LABELS}, {"logits": LOGITS[::-1], "labels": LABELS}],
    ),
    "accuracy_masked": ("Accuracy", (), [{"logits": LOGITS, "labels": LABELS, "mask": MASK}]),
    "accuracy_binary": ("Accuracy", (0.5,), [{"logits": BINARY, "labels": LABELS}]),
    "accuracy_int64_labels": (
        "Accuracy",
        (),
        [{"logits": LOGITS, "labels": np.array([0, 1, 1, 1, 0], np.int64)}],
    ),
    "welford": (
        "Welford",
        (),
        [{"values": jnp.array([1, 2, 3, 4])}, {"values": jnp.array([3, 2, 1, 0])}],
    ),
    "welford_scalars": (
        "Welford",
        (),
        [{"values": 1.0}, {"values": 4.0}, {"values": jnp.array([2.0, 9.0])}],
    ),
}


def _run(lib_metrics, name, args, batches, reset_after=None):
    metric = getattr(lib_metrics, name)(*args)
    results = [_plain(metric.compute())]
    for i, batch in enumerate(batches):
        metric.update(**batch)
        results.append(_plain(metric.compute()))
        if reset_after == i:
            metric.reset()
            results.append(_plain(metric.compute()))
    return results


def _plain(result):
    """A computed value as (dtype, value) pairs, comparable across the two libraries."""
    if hasattr(result, "standard_deviation"):
        return tuple(
            _plain(getattr(result, f))
            for f in ("mean", "standard_error_of_mean", "standard_deviation")
        )
    value = np.asarray(result)
    return str(value.dtype), "nan" if np.isnan(value).all() else value.round(6).tolist()


def _flax_metrics():
    return importlib.import_module("flax.nnx").metrics


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_dtypes_match_flax(case):
    name, args, batches = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        expected = _run(_flax_metrics(), name, args, batches, reset_after=0)
    assert _run(metrics, name, args, batches, reset_after=0) == expected


def test_welford_mean_and_std_equal_numpy():
    data = np.array([1.0, 2.0, 3.0, 4.0, 3.0, 2.0, 1.0, 0.0], np.float32)
    w = metrics.Welford()
    w.update(values=jnp.asarray(data[:3]))
    w.update(values=jnp.asarray(data[3:]))
    stats = w.compute()
    assert float(stats.mean) == pytest.approx(data.mean())
    assert float(stats.standard_deviation) == pytest.approx(data.std(), rel=1e-6)
    assert float(stats.standard_error_of_mean) == pytest.approx(data.std() / np.sqrt(8), rel=1e-6)
    assert jax.tree.leaves(stats) == [
        stats.mean,
        stats.standard_error_of_mean,
        stats.standard_deviation,
    ]


def test_multimetric_matches_flax_with_one_and_per_metric_masks():
    flax_metrics = _flax_metrics()
    flax_nnx = importlib.import_module("flax.nnx")

    def run(lib, multi):
        m = multi(accuracy=lib.Accuracy(), loss=lib.Average())
        m.update(logits=LOGITS, labels=LABELS, values=jnp.arange(5.0))
        m.update(logits=LOGITS, labels=LABELS, values=jnp.arange(5.0), mask=MASK)
        m.update(logits=LOGITS, labels=LABELS, values=jnp.arange(5.0), mask={"loss": MASK})
        out = {k: _plain(v) for k, v in m.compute().items()}
        m.reset()
        return out, {k: _plain(v) for k, v in m.compute().items()}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        expected = run(flax_metrics, flax_nnx.MultiMetric)
    assert run(metrics, nnx.MultiMetric) == expected


def test_metrics_update_inside_nnx_jit_and_plain_jit():
    avg = metrics.Average()
    step = nnx.jit(lambda m, v: m.update(values=v))
    step(avg, jnp.array([1.0, 3.0]))
    step(avg, jnp.array([5.0]))
    assert float(avg.compute()) == 3.0 and int(avg.count.value) == 3
    updated = jax.jit(lambda m, v: (m.update(values=v), m)[1])(avg, jnp.array([7.0]))
    assert float(updated.compute()) == 4.0 and float(avg.compute()) == 3.0
    assert [
        type(v).__name__
        for v in jax.tree.leaves(avg, is_leaf=lambda x: isinstance(x, nnx.Variable))
    ] == ["MetricState"] * 2


def test_a_multimetric_is_split_like_a_module():
    m = nnx.MultiMetric(loss=metrics.Average(), welford=metrics.Welford())
    graphdef, state = m.split()
    assert (
        sorted(state) == ["loss", "welford"]
        and nnx.variable_name(metrics.MetricState) == "MetricState"
    )
    assert type(nnx.merge(graphdef, state).loss) is metrics.Average


class Incomplete(metrics.Metric):
    pass


@pytest.mark.parametrize(
    "action, error, match",
    [
        (
            lambda: metrics.Average().update(loss=jnp.ones(1)),
            TypeError,
            r"Average.update expects the keyword argument 'values' .*got \['loss'\]",
        ),
        (
            lambda: metrics.Average().update(values=1.0, mask=jnp.ones(1)),
            ValueError,
            r"Average.update got a mask with the Python scalar values=1.0",
        ),
        (
            lambda: metrics.Welford("x").update(values=jnp.ones(1)),
            TypeError,
            r"Welford.update expects the keyword argument 'x'",
        ),
        (
            lambda: metrics.Accuracy(threshold=1),
            TypeError,
            r"Accuracy\(threshold=\.\.\.\) expects a float .*got 1 of type int",
        ),
        (
            lambda: metrics.Accuracy(0.5).update(logits=LOGITS, labels=LABELS),
            ValueError,
            r"Accuracy\(threshold=0.5\) is binary: .*logits \(5, 2\) and labels \(5,\)",
        ),
        (
            lambda: metrics.Accuracy().update(logits=BINARY, labels=LABELS),
            ValueError,
            r"Accuracy \(multi-class\) needs logits with one more axis than labels",
        ),
        (
            lambda: metrics.Accuracy().update(logits=LOGITS, labels=LABELS.astype(jnp.float32)),
            ValueError,
            r"Accuracy expects integer labels, got dtype float32",
        ),
        (lambda: nnx.MultiMetric(), ValueError, r"MultiMetric needs at least one metric"),
        (
            lambda: nnx.MultiMetric(update=metrics.Average()),
            ValueError,
            r"MultiMetric cannot hold a metric named 'update'",
        ),
        (
            lambda: nnx.MultiMetric(loss=3),
            TypeError,
            r"MultiMetric\(loss=\.\.\.\) expects a Metric such as Average\(\), got int",
        ),
        (
            lambda: Incomplete().reset(),
            NotImplementedError,
            r"Incomplete does not define reset\(\)",
        ),
        (lambda: Incomplete().update(values=1), NotImplementedError, r"does not define update\(\)"),
        (lambda: Incomplete().compute(), NotImplementedError, r"does not define compute\(\)"),
    ],
)
def test_errors(action, error, match):
    with pytest.raises(error, match=match):
        action()


@pytest.mark.parametrize(
    "make, update, phrase",
    [
        (lambda m: m.Average(), {"values": 2, "mask": jnp.ones(1)}, "should be a jax array"),
        (
            lambda m: m.Accuracy(threshold=0.5),
            {"logits": jnp.ones(4), "labels": jnp.ones((2, 2), jnp.int32)},
            "For binary classification",
        ),
        (
            lambda m: m.Accuracy(),
            {"logits": jnp.ones((2, 2, 2)), "labels": jnp.ones(4, jnp.int32)},
            "For multi-class classification",
        ),
    ],
)
def test_errors_contain_flax_phrases(make, update, phrase):
    # code written for flax.nnx matches these phrases: flax raises them, and so do we
    for module in (_flax_metrics(), metrics):
        with pytest.raises(ValueError, match=phrase):
            make(module).update(**update)
