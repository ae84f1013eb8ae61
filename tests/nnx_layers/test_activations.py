"""Activations: the same values as flax.nnx's, name table round trip and errors."""

import flax.linen
import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_layers
from nnx_layers import activations
from nnx_plugins.testing import check_layer

X = jnp.linspace(-4.0, 4.0, 12).reshape(3, 4)
TOP_LEVEL = [
    "relu",
    "gelu",
    "silu",
    "swish",
    "tanh",
    "sigmoid",
    "softmax",
    "log_softmax",
    "elu",
    "leaky_relu",
    "softplus",
    "hard_silu",
    "hard_swish",
    "logsumexp",
    "one_hot",
    "standardize",
    "normalize",
]


# functions that flax.nnx lacks, with the reference they must equal
REFERENCE = {
    "normalize": flax.linen.normalize,
    "relu6": jax.nn.relu6,
    "hard_sigmoid": jax.nn.hard_sigmoid,
    "hard_tanh": jax.nn.hard_tanh,
    "log_sigmoid": jax.nn.log_sigmoid,
    "celu": jax.nn.celu,
    "selu": jax.nn.selu,
    "soft_sign": jax.nn.soft_sign,
    "glu": jax.nn.glu,
    "identity": lambda x: x,
}
IDS = jnp.array([[0, 2], [5, 1]])


def _inputs(name):
    return (IDS, 3) if name == "one_hot" else (X,)


@pytest.mark.parametrize("name", activations.names())
def test_activation_matches_flax(name):
    ours = activations.get(name)
    theirs = getattr(fnnx, name, None) or REFERENCE[name]
    np.testing.assert_allclose(ours(*_inputs(name)), theirs(*_inputs(name)), rtol=1e-6, atol=1e-7)
    assert activations.name_of(ours) == name
    assert hash(ours) == hash(activations.get(name))


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_exports(name):
    assert getattr(nnx_layers, name) is getattr(activations, name)
    assert name in nnx_layers.__all__


def test_keyword_arguments():
    np.testing.assert_allclose(
        activations.gelu(X, approximate=False), fnnx.gelu(X, approximate=False)
    )
    np.testing.assert_allclose(activations.softmax(X, axis=0), fnnx.softmax(X, axis=0), rtol=1e-6)
    np.testing.assert_allclose(activations.leaky_relu(X, 0.2), fnnx.leaky_relu(X, 0.2))
    np.testing.assert_allclose(activations.elu(X, alpha=0.5), fnnx.elu(X, alpha=0.5), rtol=1e-6)


def test_unknown_name_suggests():
    with pytest.raises(ValueError, match="Unknown activation 'rellu'. Did you mean 'relu'"):
        activations.get("rellu")


def test_name_of_unknown_function():
    with pytest.raises(ValueError, match="is not a registered activation"):
        activations.name_of(jnp.sin)


NEW = ["hard_silu", "hard_swish", "logsumexp", "standardize", "normalize"]


@pytest.mark.parametrize("name", NEW)
def test_new_functions_gradients_match_the_reference(name):
    ours = activations.get(name)
    theirs = getattr(fnnx, name, None) or REFERENCE[name]
    mine = jax.grad(lambda x: (ours(x) ** 2).sum())(X)
    np.testing.assert_allclose(
        mine, jax.grad(lambda x: (theirs(x) ** 2).sum())(X), rtol=1e-5, atol=1e-6
    )


def test_new_functions_keyword_arguments_match_flax():
    b = jnp.linspace(-1.0, 1.0, 4)
    where = X > -3.0
    ours = activations.logsumexp(X, axis=(0, 1), b=b, keepdims=True, return_sign=True)
    theirs = fnnx.logsumexp(X, axis=(0, 1), b=b, keepdims=True, return_sign=True)
    for mine, other in zip(ours, theirs):
        np.testing.assert_allclose(mine, other, rtol=1e-6)
    np.testing.assert_allclose(
        activations.logsumexp(X, 0, where=where), fnnx.logsumexp(X, 0, where=where), rtol=1e-6
    )
    kwargs = dict(axis=None, epsilon=1e-3, where=where, algorithm="stable")
    np.testing.assert_allclose(
        activations.standardize(X, **kwargs), fnnx.standardize(X, **kwargs), rtol=1e-5
    )
    np.testing.assert_allclose(
        activations.normalize(X, 0, jnp.ones(4), jnp.full(4, 4.0)),
        fnnx.standardize(X, 0, jnp.ones(4), jnp.full(4, 4.0)),
        rtol=1e-6,
    )
    mine = activations.one_hot(IDS, 4, dtype=jnp.bfloat16, axis=0)
    other = fnnx.one_hot(IDS, 4, dtype=jnp.bfloat16, axis=0)
    assert mine.dtype == jnp.bfloat16 and mine.shape == (4, 2, 2)
    np.testing.assert_array_equal(mine, other)


@pytest.mark.parametrize(
    "name", ["hard_silu", "hard_swish", "logsumexp", "one_hot", "standardize", "normalize"]
)
def test_new_functions_are_config_layers(name):
    config = {"num_classes": 3} if name == "one_hot" else None
    assert check_layer(name, config).spec.is_activation


def test_new_function_errors():
    with pytest.raises(
        TypeError, match=r"one_hot expects integer class ids, got dtype float32 with shape \(3, 4\)"
    ):
        activations.one_hot(X, 3)
    for bad in (0, 2.0, True):
        with pytest.raises(
            ValueError, match=f"one_hot num_classes must be a positive integer, got {bad!r}"
        ):
            activations.one_hot(IDS, bad)
    with pytest.raises(
        ValueError, match="standardize algorithm must be 'fast' or 'stable', got 'exact'"
    ):
        activations.standardize(X, algorithm="exact")
