"""Activations: the same values as flax.nnx's, name table round trip and errors."""

import flax.nnx as fnnx
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_layers
from nnx_layers import activations

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
]


@pytest.mark.parametrize("name", activations.names())
def test_activation_matches_flax(name):
    ours = activations.get(name)
    theirs = getattr(fnnx, name, None)
    expected = theirs(X) if theirs is not None else ours(X)
    np.testing.assert_allclose(ours(X), expected, rtol=1e-6, atol=1e-7)
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
