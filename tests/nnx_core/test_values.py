"""Value helpers: short descriptions of values and identity-hashed statics."""

from __future__ import annotations

import jax.numpy as jnp

from nnx_core import _values


def test_describe_helper_handles_non_arrays():
    assert _values._describe("text") == "'text'"
    box = [1]
    assert _values.hashable(box) == _values.hashable(box)
    assert _values.hashable(box) != _values.hashable([1])
    assert repr(_values.hashable(box)) == "[1]"


def test_describe_shows_scalars_arrays_and_deleted_buffers():
    assert _values._describe(jnp.array(3)) == "int32[]=3"
    assert _values._describe(jnp.ones((2, 3))) == "float32[2,3]"
    deleted = jnp.array(1.0)
    deleted.delete()
    assert _values._describe(deleted) == "float32[]"
