"""Sequential, Residual, Parallel and Flatten."""

import flax.nnx as fnnx
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_core import Rngs
from nnx_layers import Dropout, Flatten, Linear, Parallel, Residual, Sequential, relu, tanh


def test_sequential_chains_modules_and_functions():
    first, second = Linear(3, 4, rngs=Rngs(0)), Linear(4, 2, rngs=Rngs(1))
    model = Sequential(first, relu, second)
    assert model.layers == [first, relu, second] and type(model.layers) is list
    x = jnp.linspace(-1, 1, 6).reshape(2, 3)
    np.testing.assert_allclose(model(x), second(relu(first(x))), rtol=1e-6)


def test_sequential_matches_flax_semantics():
    fns = (lambda x: (x, x + 1), lambda a, b: a * b, tanh)
    x = jnp.arange(3.0)
    np.testing.assert_allclose(Sequential(*fns)(x), fnnx.Sequential(*fns)(x), rtol=1e-6)
    np.testing.assert_array_equal(Sequential()(x), fnnx.Sequential()(x))


def test_sequential_passes_keyword_arguments_to_the_first_layer():
    model = Sequential(Dropout(0.5, rngs=Rngs(0)), relu)
    np.testing.assert_array_equal(model(jnp.ones(3), deterministic=True), jnp.ones(3))


def test_sequential_train_eval_reaches_nested_layers():
    model = Sequential(Linear(2, 2, rngs=Rngs(0)), Sequential(Dropout(0.5, rngs=Rngs(1))))
    model.eval()
    assert model.layers[1].layers[0].deterministic is True
    model.train()
    assert model.layers[1].layers[0].deterministic is False


def test_sequential_rejects_non_callables():
    with pytest.raises(
        TypeError, match="Sequential layers must be callable .* got int 3 at position 1"
    ):
        Sequential(relu, 3)


def test_empty_sequential_passes_its_arguments_through():
    assert Sequential()(1, 2) == (1, 2)
    assert Sequential()(a=1) == {"a": 1}
    assert Sequential()() is None


def test_dict_outputs_become_keyword_arguments():
    model = Sequential(lambda x: {"a": x, "b": 2 * x}, lambda a, b: a + b)
    assert model(1) == 3


def test_rngs_reach_layers_that_take_them():
    model = Sequential(relu, Dropout(0.5), lambda x, **kwargs: x)
    y = model(jnp.ones(16), rngs=Rngs(dropout=4))
    np.testing.assert_array_equal(y, Dropout(0.5)(jnp.ones(16), rngs=Rngs(dropout=4)))


@pytest.mark.parametrize(
    ("shape", "expected"), [((2, 3, 4), (2, 12)), ((5,), (5, 1)), ((3, 2), (3, 2))]
)
def test_flatten(shape, expected):
    assert Flatten()(jnp.ones(shape)).shape == expected


def test_flatten_in_a_model():
    model = Sequential(Flatten(), Linear(12, 2, rngs=Rngs(0)))
    assert model(jnp.ones((4, 3, 4))).shape == (4, 2)


def test_flatten_rejects_scalars():
    with pytest.raises(
        ValueError, match="Flatten expects an input with a leading batch axis, got a scalar"
    ):
        Flatten()(jnp.float32(1.0))


def test_residual_adds_the_shortcut():
    block = Linear(3, 3, kernel_init=__import__("nnx_layers").initializers.zeros, rngs=Rngs(0))
    x = jnp.arange(6.0).reshape(2, 3)
    assert (Residual(block)(x) == x).all()


def test_residual_shape_mismatch():
    with pytest.raises(
        ValueError,
        match=r"Residual: the block returns shape \(2, 4\) but the shortcut gives \(2, 3\)",
    ):
        Residual(Linear(3, 4, rngs=Rngs(0)))(jnp.ones((2, 3)))


@pytest.mark.parametrize(("combine", "shape"), [("concat", (2, 5)), ("sum", (2, 2))])
def test_parallel_combines(combine, shape):
    branches = {
        "a": Linear(3, 2, rngs=Rngs(0)),
        "b": Linear(3, 3 if combine == "concat" else 2, rngs=Rngs(1)),
    }
    assert Parallel(branches, combine=combine)(jnp.ones((2, 3))).shape == shape


@pytest.mark.parametrize(
    ("branches", "combine", "message"),
    [
        (
            {"a": None},
            "max",
            r"Parallel combine must be one of \('concat', 'sum', 'dict'\), got 'max'",
        ),
        ({}, "sum", "Parallel needs at least one branch"),
    ],
)
def test_parallel_rejects_bad_arguments(branches, combine, message):
    with pytest.raises(ValueError, match=message):
        Parallel(branches, combine=combine)
