"""The built-in metrics against scikit-learn and numpy on the same values, streamed over batches."""

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score, top_k_accuracy_score

from nnx_plugins.testing import check_metric
from nnx_plugins.training.data._base import DataInfo
from nnx_plugins.training.metrics._builtin import (
    R2,
    BitsPerToken,
    MeanAbsoluteError,
    MeanSquaredError,
    Perplexity,
    TokenAccuracy,
    TopKAccuracy,
)

RNG = np.random.default_rng(0)


def streamed(metric, batches):
    for batch in batches:
        metric.update(**{k: jnp.asarray(v) for k, v in batch.items()})
    return float(metric.compute())


def halves(**arrays):
    n = len(next(iter(arrays.values())))
    return [
        {k: v[: n // 3] for k, v in arrays.items()},
        {k: v[n // 3 :] for k, v in arrays.items()},
    ]


def test_regression_metrics_match_scikit_learn():
    import jax

    targets = RNG.normal(size=(50, 3)).astype(np.float32)
    predictions = (targets + RNG.normal(scale=0.5, size=(50, 3))).astype(np.float32)
    batches = halves(predictions=predictions, targets=targets)
    assert streamed(MeanSquaredError(), batches) == pytest.approx(
        mean_squared_error(targets, predictions), rel=1e-5
    )
    assert streamed(MeanAbsoluteError(), batches) == pytest.approx(
        mean_absolute_error(targets, predictions), rel=1e-5
    )
    r2 = R2()
    r2.setup(
        DataInfo(
            "t", jax.ShapeDtypeStruct((2,), "float32"), jax.ShapeDtypeStruct((3,), "float32"), "t"
        )
    )
    assert streamed(r2, batches) == pytest.approx(r2_score(targets, predictions), rel=1e-4)


def test_one_output_given_as_a_column_is_one_output():
    targets = RNG.normal(size=40).astype(np.float32)
    predictions = targets[:, None] * 0.8
    assert streamed(R2(), halves(predictions=predictions, targets=targets)) == pytest.approx(
        r2_score(targets, predictions[:, 0]), rel=1e-4
    )


def test_classification_metrics_match_scikit_learn():
    logits = RNG.normal(size=(60, 7)).astype(np.float32)
    labels = RNG.integers(0, 7, size=60)
    batches = halves(logits=logits, labels=labels)
    assert streamed(TokenAccuracy(), batches) == pytest.approx(np.mean(logits.argmax(-1) == labels))
    for k in (1, 3, 5):
        assert streamed(TopKAccuracy(k=k), batches) == pytest.approx(
            top_k_accuracy_score(labels, logits, k=k, labels=range(7))
        )
    assert TopKAccuracy(k=3).key == "top_3_accuracy"


def test_token_metrics_count_only_the_masked_tokens():
    loss = np.array([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]], np.float32)
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    assert streamed(Perplexity(), [{"loss": loss, "mask": mask}]) == pytest.approx(np.exp(2.0))
    assert streamed(BitsPerToken(), [{"loss": loss, "mask": mask}]) == pytest.approx(
        2.0 / np.log(2)
    )
    logits = np.zeros((2, 3, 4), np.float32)
    logits[..., 1] = 1.0
    labels = np.array([[1, 1, 0], [0, 1, 1]])
    assert streamed(
        TokenAccuracy(), [{"logits": logits, "labels": labels, "mask": mask}]
    ) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "name, values",
    [
        ("accuracy", {"logits": jnp.eye(3), "labels": jnp.array([0, 1, 1])}),
        ("top_k_accuracy", {"logits": jnp.eye(6), "labels": jnp.arange(6)}),
        ("mse", {"predictions": jnp.ones(3), "targets": jnp.zeros(3)}),
        ("r2", {"predictions": jnp.array([1.0, 2.0]), "targets": jnp.array([1.0, 3.0])}),
        ("perplexity", {"loss": jnp.array([0.5, 1.5])}),
        ("bits_per_token", {"loss": jnp.array([0.5, 1.5])}),
    ],
)
def test_every_builtin_metric_conforms(name, values):
    assert np.isfinite(check_metric(name, values=values))


def test_top_k_refuses_k_below_one():
    with pytest.raises(ValueError, match=r"top_k_accuracy needs k >= 1, got 0"):
        TopKAccuracy(k=0)
