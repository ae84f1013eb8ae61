"""VariableMetadata and with_metadata: boxed initializer outputs give Variables their metadata,
through layers that build ``Param(init(key, shape, dtype))``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import nnx_core as nnx
import nnx_layers


def test_a_variable_unwraps_the_box_and_takes_its_metadata():
    boxed = nnx.VariableMetadata(jnp.ones(2), {"note": "boxed", "lr": 0.1})
    p = nnx.Param(boxed, note="explicit")
    assert p.value.tolist() == [1.0, 1.0]
    assert p.metadata == {"note": "boxed", "lr": 0.1}  # the box wins, as in flax.nnx
    assert nnx.VariableMetadata(1).metadata == {} and nnx.VariableMetadata[int](1).raw_value == 1


def test_with_metadata_wraps_an_initializer():
    init = nnx.with_metadata(nnx_layers.initializers.ones, sharding_names=("in", "out"))
    assert init.__wrapped__ is nnx_layers.initializers.ones
    out = init(jax.random.key(0), (2, 3), jnp.float32)
    assert isinstance(out, nnx.VariableMetadata) and out.raw_value.shape == (2, 3)
    layer = nnx_layers.Linear(2, 3, kernel_init=init, rngs=nnx.Rngs(0))
    assert (
        layer.kernel.sharding_names == ("in", "out") and layer.kernel.value.tolist()[0] == [1.0] * 3
    )


def test_with_metadata_needs_a_function():
    with pytest.raises(TypeError, match=r"with_metadata expects an initializer function, got 3"):
        nnx.with_metadata(3, note="x")
