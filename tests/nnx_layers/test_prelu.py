"""PReLU: parity with flax.nnx (values, gradients, dtypes), configs and errors."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import PReLU, initializers
from nnx_plugins.testing import check_layer

X = jnp.linspace(-3.0, 3.0, 12).reshape(3, 4)


@pytest.mark.parametrize(
    ("dtype", "param_dtype", "input_dtype"),
    [
        (None, jnp.float32, jnp.float32),
        (None, jnp.float32, jnp.bfloat16),
        (jnp.bfloat16, jnp.float32, jnp.float32),
        (None, jnp.bfloat16, jnp.float32),
    ],
)
def test_matches_flax(dtype, param_dtype, input_dtype, assert_close):
    kwargs = dict(dtype=dtype, param_dtype=param_dtype)
    ours, theirs = PReLU(0.2, **kwargs), fnnx.PReLU(0.2, **kwargs)
    np.testing.assert_array_equal(ours.negative_slope.value, theirs.negative_slope[...])
    x = X.astype(input_dtype)
    assert_close(ours(x), theirs(x))

    def loss(model, x):
        return (model(x).astype(jnp.float32) ** 2).sum()

    ours_grad = nnx.grad(loss)(ours, x)["negative_slope"].value
    assert_close(ours_grad, fnnx.grad(loss)(theirs, x)["negative_slope"][...], 10.0)


def test_default_slope_metadata_and_constant_initializer():
    act = PReLU(negative_slope_metadata={"sharding_names": ()})
    assert act.negative_slope_init == initializers.constant(0.01)
    assert float(act.negative_slope.value) == pytest.approx(0.01)
    assert act.negative_slope.sharding_names == () and isinstance(act.negative_slope, nnx.Param)
    same = PReLU(initializers.constant(0.3))
    np.testing.assert_allclose(same(jnp.array([-1.0, 1.0])), [-0.3, 1.0], rtol=1e-6)


@pytest.mark.parametrize(
    "config",
    [{}, {"negative_slope_init": {"type": "constant", "value": 0.25}, "dtype": "bfloat16"}],
)
def test_works_from_a_config(config):
    report = check_layer("PReLU", config, input_shape=(2, 3))
    assert report.output_shape == (2, 3) and not report.spec.takes_rngs


def test_errors():
    with pytest.raises(
        TypeError,
        match=r"negative_slope_init must be a number or initializers.constant\(value\), got 'x'",
    ):
        PReLU("x")
    with pytest.raises(TypeError, match="must be a number or initializers.constant"):
        PReLU(initializers.normal())
    with pytest.raises(
        TypeError, match=r"PReLU with dtype=None computes in the input's dtype, got dtype int32"
    ):
        PReLU()(jnp.ones(3, jnp.int32))
    with pytest.raises(TypeError, match="PReLU expects a numeric input, got dtype key<fry>"):
        PReLU()(jax.random.split(jax.random.key(0), 3))
