"""The regression task: mse, mae and huber losses; outputs shaped like the targets."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nnx_plugins import ArrayDataset, DataError
from nnx_plugins.testing import check_task
from nnx_plugins.training.tasks._regression import Regression

PRED = jnp.array([[1.0, 2.0], [0.0, -4.0]])
TRUE = jnp.array([[1.5, 0.0], [0.0, 0.0]])


@pytest.mark.parametrize(
    "kind, per_example",
    [
        ("mse", [(0.25 + 4.0) / 2, 16.0 / 2]),
        ("mae", [(0.5 + 2.0) / 2, 4.0 / 2]),
        ("huber", [(0.125 + 1.5) / 2, 3.5 / 2]),
    ],
)
def test_losses(kind, per_example):
    loss, values = Regression(loss=kind).loss(PRED, {"targets": TRUE})
    np.testing.assert_allclose(values["loss"], per_example, rtol=1e-6)
    assert float(loss) == pytest.approx(np.mean(per_example))


def test_huber_delta_is_optax_huber():
    _, values = Regression(loss="huber", huber_delta=0.3).loss(PRED, {"targets": TRUE})
    expected = optax.huber_loss(PRED - TRUE, delta=0.3).mean(axis=1)
    np.testing.assert_allclose(values["loss"], expected, rtol=1e-6)
    with pytest.raises(ValueError, match=r"huber_delta must be > 0, got 0"):
        Regression(huber_delta=0)


def test_one_target_per_example_takes_a_column_of_outputs():
    loss, values = Regression().loss(jnp.array([[1.0], [3.0]]), {"targets": jnp.array([2.0, 2.0])})
    assert float(loss) == 1.0 and values["predictions"].shape == (2,)


def test_the_output_must_match_the_targets():
    info = ArrayDataset(
        np.zeros((4, 2)), np.zeros((4, 3)), np.zeros((1, 2)), np.zeros((1, 3)), name="d"
    ).describe()
    task = Regression()
    assert task.check_output(jax.ShapeDtypeStruct((2, 3), "float32"), info) is None
    assert (
        "targets of d are float32[3] per example, so the outputs must have shape (batch, 3)"
        in task.check_output(jax.ShapeDtypeStruct((2, 1), "float32"), info)
    )
    scalar = ArrayDataset(
        np.zeros((4, 2)), np.zeros(4), np.zeros((1, 2)), np.zeros(1), name="s"
    ).describe()
    for shape in ((2,), (2, 1)):
        assert task.check_output(jax.ShapeDtypeStruct(shape, "float32"), scalar) is None
    assert "(batch,) or (batch, 1)" in task.check_output(
        jax.ShapeDtypeStruct((2, 2), "float32"), scalar
    )


def test_targets_must_be_numbers():
    data = ArrayDataset(
        np.zeros((2, 1)), np.zeros(2, bool), np.zeros((1, 1)), np.zeros(1, bool), name="b"
    )
    with pytest.raises(DataError, match=r"b: regression needs numeric targets, got bool\[\]"):
        Regression().check_data(data, data.describe(), None)


def test_conforms():
    check_task("regression", {"loss": "mae"}, data="diabetes", output_shape=(1,))
