"""Residual and Parallel."""

import jax.numpy as jnp
import pytest

from nnx_core import Rngs
from nnx_layers import Linear
from nnx_plugins import Parallel, Residual


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
