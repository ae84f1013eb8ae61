"""Helpers for the nnx_layers parity tests: flax.nnx is the oracle (never imported by the code)."""

import jax.numpy as jnp
import numpy as np
import pytest

TOLERANCE = {
    jnp.dtype(jnp.float32): 1e-5,
    jnp.dtype(jnp.float16): 2e-3,
    jnp.dtype(jnp.bfloat16): 2e-2,
}


def _copy(ours, theirs, names):
    for name in names:
        mine, other = getattr(ours, name), getattr(theirs, name)
        assert (mine is None) == (other is None), name
        if mine is not None:
            assert mine.value.shape == other[...].shape, name
            assert mine.value.dtype == other[...].dtype, name
            shape, dtype = mine.value.shape, mine.value.dtype
            if name in ("kernel", "embedding"):
                values = np.random.default_rng(len(shape)).standard_normal(shape) * 0.5
                mine.value = jnp.asarray(values, dtype)
            elif name == "bias":  # make the bias visible in the outputs
                mine.value = jnp.linspace(-1, 1, mine.value.size).reshape(shape).astype(dtype)
            other[...] = mine.value


@pytest.fixture
def copy_params():
    """``copy_params(ours, theirs, names)``: check names/shapes/dtypes match, copy ours into flax.

    Kernels/embeddings get fixed numpy-random values and biases a non-zero ramp first, so both
    layers can be built with cheap ``zeros`` initializers: random initializers compile slowly on
    CPU for each new shape, and init parity is tested on its own.
    """
    return _copy


def _close(actual, expected, scale=1.0):
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    tol = TOLERANCE.get(jnp.dtype(actual.dtype), 1e-5) * scale
    np.testing.assert_allclose(
        np.asarray(actual, np.float32), np.asarray(expected, np.float32), rtol=tol, atol=tol
    )


@pytest.fixture
def assert_close():
    """``assert_close(actual, expected)``: same shape and dtype, equal to the dtype's tolerance."""
    return _close
