"""Pooling functions: values and gradients equal to flax.nnx; dtypes; config; errors."""

import inspect

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_layers import avg_pool, max_pool, min_pool, pool
from nnx_plugins.testing import check_layer

# (input shape, window, strides, padding): 2-D with a batch axis, without one, two batch axes, 1-D.
CASES = [
    ((2, 5, 6, 3), (2, 3), None, "VALID"),
    ((2, 5, 6, 3), (2, 3), (2, 2), "SAME"),
    ((2, 5, 6, 3), (3, 3), (2, 1), ((1, 0), (2, 1))),
    ((5, 6, 3), (2, 2), (2, 2), "SAME"),
    ((2, 2, 5, 3), (3,), (2,), "VALID"),
    ((2, 6, 3), (4,), 1, "same"),
]
FUNCTIONS = [
    ("max_pool", {}),
    ("min_pool", {}),
    ("avg_pool", {}),
    ("avg_pool", {"count_include_pad": False}),
]


def _x(shape, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(sum(shape)).standard_normal(shape), dtype)


def _flax_args(strides, padding, rank):
    """flax wants tuples for strides and upper-case padding names."""
    if isinstance(strides, int):
        strides = (strides,) * rank
    return strides, padding.upper() if isinstance(padding, str) else padding


@pytest.mark.parametrize(("name", "options"), FUNCTIONS)
@pytest.mark.parametrize(("shape", "window", "strides", "padding"), CASES)
def test_values_and_gradients_match_flax(
    name, options, shape, window, strides, padding, assert_close
):
    ours, theirs = globals()[name], getattr(fnnx, name)
    flax_strides, flax_padding = _flax_args(strides, padding, len(window))
    x = _x(shape)
    y = ours(x, window, strides, padding, **options)
    assert_close(y, theirs(x, window, flax_strides, flax_padding, **options))
    weights = jnp.cos(jnp.arange(y.size, dtype=jnp.float32)).reshape(y.shape)

    def gradient(fn, *args):
        return jax.jit(jax.grad(lambda x: jnp.sum(fn(x, window, *args, **options) * weights)))(x)

    grad = gradient(ours, strides, padding)
    expected = gradient(theirs, flax_strides, flax_padding)
    assert_close(grad, expected)


@pytest.mark.parametrize(("name", "options"), FUNCTIONS)
def test_bfloat16_matches_flax_and_keeps_its_dtype(name, options, assert_close):
    x = _x((2, 5, 6, 3), jnp.bfloat16)
    y = globals()[name](x, (2, 2), padding="SAME", **options)
    expected = getattr(fnnx, name)(x, (2, 2), padding="SAME", **options)
    # flax returns float32 for avg_pool(count_include_pad=False) on bfloat16; we keep bfloat16.
    assert y.dtype == jnp.bfloat16
    assert_close(y, expected.astype(jnp.bfloat16))


def test_keyword_arguments_and_defaults():
    x = _x((1, 4, 4, 2))
    assert max_pool(x, window_shape=(2, 2), strides=(2, 2)).shape == (1, 2, 2, 2)
    assert avg_pool(x, (2, 2)).shape == (1, 3, 3, 2)  # strides 1, VALID
    assert inspect.signature(avg_pool).parameters["count_include_pad"].default is True
    for ours, theirs in [(avg_pool, fnnx.avg_pool), (max_pool, fnnx.max_pool)]:
        mine = inspect.signature(ours).parameters
        assert list(mine) == list(inspect.signature(theirs).parameters)
        assert [p.default for p in mine.values()][2:] == [
            p.default for p in inspect.signature(theirs).parameters.values()
        ][2:]


def test_reference_values():
    x = jnp.arange(16.0).reshape(1, 4, 4, 1)
    np.testing.assert_array_equal(max_pool(x, (2, 2), (2, 2))[0, :, :, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(min_pool(x, (2, 2), (2, 2))[0, :, :, 0], [[0, 2], [8, 10]])
    np.testing.assert_array_equal(
        avg_pool(x, (2, 2), (2, 2))[0, :, :, 0], [[2.5, 4.5], [10.5, 12.5]]
    )
    corner = avg_pool(x, (2, 2), padding=((1, 0), (1, 0)), count_include_pad=False)
    assert float(corner[0, 0, 0, 0]) == 0.0 and float(corner[0, 0, 1, 0]) == 0.5
    assert float(avg_pool(x, (2, 2), padding=((1, 0), (1, 0)))[0, 0, 1, 0]) == 0.25


def test_max_and_min_pool_take_integers():
    x = jnp.array([[[3], [-7], [2], [5]]], jnp.int32)
    np.testing.assert_array_equal(max_pool(x, (2,), padding="SAME")[0, :, 0], [3, 2, 5, 5])
    np.testing.assert_array_equal(min_pool(x, (2,), padding="SAME")[0, :, 0], [-7, -7, 2, 5])


def test_pool_with_a_custom_reduction_matches_flax(assert_close):
    x = _x((2, 5, 6, 3))
    ours = pool(x, 1.0, jax.lax.mul, (2, 2), (1, 2), padding=((0, 1), (1, 1)))
    assert_close(ours, fnnx.pool(x, 1.0, jax.lax.mul, (2, 2), (1, 2), ((0, 1), (1, 1))))


def test_pooling_under_jit_and_vmap():
    x = _x((2, 5, 6, 3))
    expected = max_pool(x, (2, 2), padding="SAME")
    jitted = jax.jit(lambda x: max_pool(x, (2, 2), padding="SAME"))(x)
    np.testing.assert_array_equal(jitted, expected)
    mapped = jax.vmap(lambda x: max_pool(x, (2, 2), padding="SAME"))(x)
    np.testing.assert_array_equal(mapped, expected)


@pytest.mark.parametrize("name", ["avg_pool", "max_pool", "min_pool"])
def test_pooling_functions_are_layers_with_config_arguments(name):
    report = check_layer(
        name,
        {"window_shape": [2, 2], "strides": [2, 2], "padding": "SAME"},
        input_shape=(1, 5, 5, 3),
    )
    assert report.output_shape == (1, 3, 3, 3)


def test_pool_itself_is_python_only():
    """`pool` takes a reduction function: no config spelling, so it is not a registered layer."""
    from nnx_plugins import UnknownNameError, get_layer

    with pytest.raises(UnknownNameError, match="Unknown layer 'pool'"):
        get_layer("pool")


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["avg_pool", "max_pool", "min_pool"])
def test_window_rank_must_fit_the_input(name):
    with pytest.raises(
        ValueError,
        match=rf"{name} with window_shape \(2, 2\) pools over 2 spatial axes and needs an input "
        r"of shape \(batch..., spatial, spatial, features\) with at least 3 dimensions, got "
        r"shape \(4, 4\)",
    ):
        globals()[name](jnp.ones((4, 4)), (2, 2))


@pytest.mark.parametrize(
    ("padding", "padded"), [("VALID", r"\(4, 4\)"), (((0, 1), (0, 0)), r"\(5, 4\)")]
)
def test_window_must_fit_the_padded_input(padding, padded):
    with pytest.raises(
        ValueError,
        match=rf"max_pool window_shape \(6, 2\) is larger than the padded input: spatial shape "
        rf"\(4, 4\) of input \(1, 4, 4, 1\) with padding .* gives {padded}",
    ):
        max_pool(jnp.ones((1, 4, 4, 1)), (6, 2), padding=padding)
    assert max_pool(jnp.ones((1, 4, 4, 1)), (6, 2), padding="SAME").shape == (1, 4, 4, 1)


@pytest.mark.parametrize("window", [2, (), (2, 0), (2, 1.5), [True, 2]])
def test_bad_windows(window):
    with pytest.raises(ValueError, match="avg_pool window_shape must be a non-empty sequence"):
        avg_pool(jnp.ones((1, 4, 4, 1)), window)


@pytest.mark.parametrize("strides", [(1,), (1, 0), "2", (1, 2, 3)])
def test_bad_strides(strides):
    with pytest.raises(ValueError, match=r"min_pool strides must be a positive int or 2 positive"):
        min_pool(jnp.ones((1, 4, 4, 1)), (2, 2), strides)


@pytest.mark.parametrize("padding", ["FULL", ((1, 1),), ((1, -1), (0, 0)), 1, ((1, 2, 3), (0, 0))])
def test_bad_padding(padding):
    with pytest.raises(
        ValueError, match=r"pool padding must be 'SAME', 'VALID' or 2 \(low, high\)"
    ):
        pool(jnp.ones((1, 4, 4, 1)), 0.0, jax.lax.add, (2, 2), padding=padding)


def test_dtypes_that_cannot_be_pooled():
    with pytest.raises(TypeError, match="avg_pool expects a numeric input, got dtype key<fry>"):
        avg_pool(jax.random.split(jax.random.key(0), (1, 4, 1)), (2,))
    with pytest.raises(
        TypeError, match="max_pool expects a real floating-point or integer input, got dtype bool"
    ):
        max_pool(jnp.ones((1, 4, 1), bool), (2,))
