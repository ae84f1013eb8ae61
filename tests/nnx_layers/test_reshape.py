"""Reshape: every axis but the batch axis; -1; jit; config; errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import Flatten, Linear, Reshape, Sequential
from nnx_plugins.testing import check_layer


@pytest.mark.parametrize(
    ("shape", "input_shape", "output_shape"),
    [
        ((8, 8), (2, 64), (2, 8, 8)),
        ([4, -1], (3, 2, 8, 2), (3, 4, 8)),
        ((-1,), (5, 2, 3), (5, 6)),
        ((2, 3, 1), (1, 6), (1, 2, 3, 1)),
        ((6,), (0, 2, 3), (0, 6)),
    ],
)
def test_reshapes_every_axis_but_the_first(shape, input_shape, output_shape):
    x = jnp.arange(np.prod(input_shape), dtype=jnp.float32).reshape(input_shape)
    y = Reshape(shape)(x)
    assert y.shape == output_shape
    np.testing.assert_array_equal(y, x.reshape(output_shape))


def test_shape_is_stored_as_a_tuple_and_flatten_is_reshape_minus_one():
    layer = Reshape([4, -1])
    assert layer.shape == (4, -1)
    x = jnp.ones((2, 3, 4, 5))
    np.testing.assert_array_equal(Reshape((-1,))(x), Flatten()(x))


def test_reshape_in_a_jitted_model():
    model = Sequential(Linear(64, 64, rngs=nnx.Rngs(0)), Reshape((8, 8)))
    y = nnx.jit(lambda m, x: m(x))(model, jnp.ones((2, 64)))
    assert y.shape == (2, 8, 8)
    assert jax.jit(Reshape((2, -1)))(jnp.ones((3, 4))).shape == (3, 2, 2)


def test_reshape_works_from_a_config():
    report = check_layer("Reshape", {"shape": [8, 8]}, input_shape=(2, 64))
    assert report.output_shape == (2, 8, 8) and report.config["shape"] == [8, 8]


@pytest.mark.parametrize("shape", [8, (8, 0), (2.0, 4), (-2, 4), (True, 4), "88"])
def test_bad_shapes(shape):
    with pytest.raises(ValueError, match="Reshape shape must be a sequence of positive ints"):
        Reshape(shape)


def test_one_minus_one_at_most():
    with pytest.raises(
        ValueError, match=r"Reshape shape may contain -1 at most once, got \(-1, -1\)"
    ):
        Reshape((-1, -1))


@pytest.mark.parametrize(
    ("shape", "input_shape", "need"),
    [((8, 8), (2, 60), "needs 64"), ((7, -1), (2, 60), "needs a multiple of 7")],
)
def test_sizes_that_do_not_fit(shape, input_shape, need):
    with pytest.raises(
        ValueError,
        match=rf"cannot reshape an input of shape \(2, 60\): each example has 60 entries, the "
        rf"target {need}. Pass a shape whose sizes multiply to 60",
    ):
        Reshape(shape)(jnp.ones(input_shape))


def test_a_scalar_has_no_batch_axis():
    with pytest.raises(
        ValueError, match=r"Reshape\(8,\) expects an input with a leading batch axis"
    ):
        Reshape((8,))(jnp.ones(()))
