"""The classification task: cross-entropy, the labels checked against the model's classes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import log_loss

from nnx_plugins import ArrayDataset, DataError
from nnx_plugins.testing import check_task
from nnx_plugins.training.tasks._classification import Classification, first_bad_label


def test_loss_is_the_mean_cross_entropy():
    logits = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    loss, values = Classification().loss(jnp.asarray(logits), {"targets": jnp.asarray(labels)})
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    assert float(loss) == pytest.approx(log_loss(labels, probabilities), rel=1e-5)
    assert values["loss"].shape == (8,) and values["logits"].dtype == jnp.float32


def test_conforms():
    check_task("classification", data={"type": "digits", "layout": "flat"}, output_shape=(10,))


def dataset(y, y_test):
    return ArrayDataset(
        np.zeros((len(y), 2)),
        np.asarray(y),
        np.zeros((len(y_test), 2)),
        np.asarray(y_test),
        name="d",
    )


@pytest.mark.parametrize(
    "y, y_test, match",
    [
        ([0, 1, -1, 2], [0], r"d: label y\[2\] is -1, outside the model's 3 classes \(0 to 2\)"),
        ([0, 1, 2, 1], [1, 0, 7], r"d: label y_test\[2\] is 7, outside the model's 3 classes"),
        (
            [0.5, 1.0],
            [0.0],
            r"classification needs one integer class index per example, but its targets are float32\[\] per example\. .*task: \{type: regression\}",
        ),
        ([[0, 1], [1, 0]], [[0, 1]], r"its targets are int32\[2\] per example"),
    ],
)
def test_labels_that_do_not_fit_are_named_with_their_index(y, y_test, match):
    data = dataset(y, y_test)
    with pytest.raises(DataError, match=match):
        Classification().check_data(data, data.describe(), jax.ShapeDtypeStruct((2, 3), "float32"))


def test_the_output_must_hold_logits_for_every_class():
    info = dataset([0, 4], [1]).describe()
    task = Classification()
    assert task.check_output(jax.ShapeDtypeStruct((2, 5), "float32"), info) is None
    assert "the 5 classes of d need logits of shape (batch, 5)" in task.check_output(
        jax.ShapeDtypeStruct((2, 3), "float32"), info
    )


def test_first_bad_label():
    assert first_bad_label(np.array([0, 1, 2]), 3) is None
    assert first_bad_label(np.array([0, 3, 9]), 3) == (1, 3)
