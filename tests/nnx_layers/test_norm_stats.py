"""The statistics shared by the normalization layers, against numpy formulas."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_core import Param, Rngs
from nnx_layers import initializers
from nnx_layers._norm_stats import (
    affine_params,
    check_epsilon,
    mean_square,
    moments,
    normalize,
    param_value,
)

X = np.random.default_rng(0).standard_normal((3, 4, 5)) * 2 + 1


def _settings(**overrides):
    defaults = dict(
        dtype=None, axis_name=None, axis_index_groups=None, use_fast_variance=True, epsilon=1e-6
    )
    return types.SimpleNamespace(**{**defaults, **overrides})


@pytest.mark.parametrize("fast", [True, False])
def test_moments_and_mean_square(fast):
    x = jnp.asarray(X, jnp.bfloat16)
    mean, var = moments(x, (1, 2), module=_settings(use_fast_variance=fast), mask=None)
    assert mean.dtype == jnp.float32 and mean.shape == (3,)  # statistics in at least float32
    reference = np.asarray(x, np.float32)
    np.testing.assert_allclose(mean, reference.mean((1, 2)), rtol=1e-5)
    np.testing.assert_allclose(var, reference.var((1, 2)), rtol=1e-4)
    square = mean_square(x, (2,), module=_settings(), mask=None)
    np.testing.assert_allclose(square, (reference**2).mean(2), rtol=1e-5)


def test_fast_moments_square_the_input_before_reducing_it():
    # the order XLA's CPU fusion compiles best: squared first, then both means (performance.md);
    # the same operations with the mean first made a 12-block GPT step 1.7x slower
    jaxpr = jax.make_jaxpr(lambda x: moments(x, (1,), module=_settings(), mask=None))(X)
    names = [str(e.primitive) for e in jaxpr.jaxpr.eqns]
    assert names.index("square") < names.index("reduce_sum")


def test_normalize_applies_scale_and_bias_on_the_feature_axes():
    x = jnp.asarray(X, jnp.float32)
    mean, var = x.mean(1), x.var(1)
    scale, bias = jnp.arange(1.0, 6.0), jnp.full(5, 0.5)
    y = normalize(
        x,
        mean,
        var,
        scale=scale,
        bias=bias,
        module=_settings(dtype=jnp.bfloat16),
        axes=((1,), (2,)),
    )
    expected = (X - X.mean(1, keepdims=True)) / np.sqrt(X.var(1, keepdims=True) + 1e-6)
    assert y.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(y, np.float32), expected * np.arange(1, 6) + 0.5, rtol=2e-2
    )


def test_affine_params_and_param_value():
    layer = types.SimpleNamespace(
        scale_init=initializers.ones,
        bias_init=initializers.zeros,
        param_dtype=jnp.bfloat16,
        scale_metadata={"sharding_names": ("f",)},
        bias_metadata={},
    )
    scale, bias = affine_params(layer, Rngs(0), (3,), use_bias=False, use_scale=True)
    assert isinstance(scale, Param) and bias is None
    assert scale.value.dtype == jnp.bfloat16 and scale.metadata["sharding_names"] == ("f",)
    assert param_value(scale).tolist() == [1.0, 1.0, 1.0] and param_value(None) is None


@pytest.mark.parametrize("bad", [-1e-3, "1e-5", True, None])
def test_check_epsilon(bad):
    assert check_epsilon("Layer", 0) == 0.0
    with pytest.raises(ValueError, match="Layer epsilon must be a finite non-negative number"):
        check_epsilon("Layer", bad)
