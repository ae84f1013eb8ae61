"""PositionEmbed: the rows added, dtypes, gradients, decoding from the cache (eager and jitted),
configs and every error path."""

import inspect

import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import Embed, PositionEmbed, Sequential, initializers
from nnx_plugins import ConfigError, load_config
from nnx_plugins.testing import check_layer

L, F = 6, 4


def _x(shape, dtype=jnp.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def test_adds_the_row_of_each_position():
    layer = PositionEmbed(L, F, rngs=nnx.Rngs(0))
    x = _x((3, 4, F))
    np.testing.assert_array_equal(layer(x), x + layer.embedding.value[None, :4])
    y = _x((2, 3, 5, F))  # several batch axes
    np.testing.assert_array_equal(layer(y), y + layer.embedding.value[:5])


def test_default_init_is_normal_002_from_the_params_stream():
    layer = PositionEmbed(
        L, F, embedding_metadata={"sharding_names": (None, "embed")}, rngs=nnx.Rngs(3)
    )
    expected = initializers.normal(0.02)(nnx.Rngs(3).params(), (L, F), jnp.float32)
    np.testing.assert_array_equal(layer.embedding.value, expected)
    assert isinstance(layer.embedding, nnx.Param)
    assert layer.embedding.sharding_names == (None, "embed")
    assert layer.cache_index is None and layer.decode is False
    for name in inspect.signature(PositionEmbed).parameters:
        if name != "rngs":
            assert hasattr(layer, name), name


@pytest.mark.parametrize(
    ("dtype", "param_dtype", "input_dtype", "expected"),
    [
        (None, jnp.float32, jnp.bfloat16, jnp.float32),
        (None, jnp.bfloat16, jnp.bfloat16, jnp.bfloat16),
        (jnp.bfloat16, jnp.float32, jnp.float32, jnp.bfloat16),
    ],
)
def test_dtypes(dtype, param_dtype, input_dtype, expected):
    layer = PositionEmbed(L, F, dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0))
    assert layer.embedding.value.dtype == param_dtype
    assert layer(_x((2, 3, F), input_dtype)).dtype == expected


def test_gradient_reaches_the_rows_used():
    layer = PositionEmbed(L, F, rngs=nnx.Rngs(0))
    grads = nnx.grad(lambda m: m(jnp.ones((2, 3, F))).sum())(layer)
    expected = jnp.zeros((L, F)).at[:3].set(2.0)
    np.testing.assert_array_equal(grads["embedding"].value, expected)


def test_decoding_one_or_several_positions_per_call_equals_the_full_pass():
    layer = PositionEmbed(L, F, rngs=nnx.Rngs(0))
    x = _x((2, L, F))
    full = layer(x)
    layer.init_cache(x.shape)
    pieces = [layer(x[:, :2], decode=True), layer(x[:, 2:3], decode=True)]
    pieces += [layer(x[:, t : t + 1], decode=True) for t in range(3, L)]
    np.testing.assert_array_equal(jnp.concatenate(pieces, axis=1), full)
    assert int(layer.cache_index.value) == L and isinstance(layer.cache_index, nnx.Cache)
    layer.init_cache(x.shape)  # a new sequence starts at position 0
    np.testing.assert_array_equal(layer(x[:, :1], decode=True), full[:, :1])


def test_decoding_under_jit_and_set_attributes():
    model = Sequential(Embed(10, F, rngs=nnx.Rngs(0)), PositionEmbed(L, F, rngs=nnx.Rngs(1)))
    ids = jnp.array([[1, 2, 3, 4]])
    full = model(ids)
    model.set_attributes(decode=True)
    model.layers[1].init_cache((1, L, F))
    step = nnx.jit(lambda m, ids: m(ids))
    outs = [step(model, ids[:, t : t + 1]) for t in range(4)]
    np.testing.assert_allclose(jnp.concatenate(outs, axis=1), full, atol=1e-7)
    assert int(model.layers[1].cache_index.value) == 4


def test_decoding_past_max_length_under_jit_returns_nan_until_init_cache():
    layer = PositionEmbed(2, F, decode=True, rngs=nnx.Rngs(0))
    layer.init_cache((1, 2, F))
    step = nnx.jit(lambda m, x: m(x))
    assert np.isfinite(step(layer, jnp.ones((1, 2, F)))).all()
    assert np.isnan(step(layer, jnp.ones((1, 1, F)))).all()
    layer.init_cache((1, 2, F))
    assert np.isfinite(step(layer, jnp.ones((1, 1, F)))).all()


def test_works_from_a_config():
    report = check_layer("PositionEmbed", {"max_length": 16, "features": 8}, input_shape=(2, 5, 8))
    assert report.output_shape == (2, 5, 8)
    assert report.config["embedding_init"] == {"type": "normal", "stddev": 0.02}
    config = {"max_length": 8, "features": 8, "dtype": "bfloat16", "decode": True}
    assert check_layer("PositionEmbed", config).config["decode"] is True


def test_config_errors_are_located_before_building():
    model = {"type": "PositionEmbed", "max_length": 0, "features": 8, "decode": "no"}
    with pytest.raises(ConfigError, match=r"2 problems") as info:
        load_config({"model": model})
    assert "model.max_length: Input should be greater than or equal to 1" in str(info.value)
    assert "model.decode: Input should be a valid boolean" in str(info.value)


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((0, F), {}, ValueError, "PositionEmbed max_length must be a positive integer, got 0"),
        ((L, 2.5), {}, ValueError, "PositionEmbed features must be a positive integer, got 2.5"),
        ((L, F), {"decode": None}, TypeError, "PositionEmbed decode must be True or False"),
    ],
)
def test_construction_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        PositionEmbed(*args, **kwargs, rngs=nnx.Rngs(0))


def test_call_errors():
    layer = PositionEmbed(L, F, rngs=nnx.Rngs(0))
    with pytest.raises(
        TypeError, match="PositionEmbed expects a floating-point input, got dtype int32"
    ):
        layer(jnp.ones((2, 3), jnp.int32))
    with pytest.raises(
        ValueError,
        match=r"expects inputs of shape \(batch..., length, 4\) \(features\), got shape \(2, 3, 5\)",
    ):
        layer(jnp.ones((2, 3, 5)))
    with pytest.raises(ValueError, match=r"got shape \(4,\)"):
        layer(jnp.ones((F,)))
    with pytest.raises(
        ValueError,
        match=r"holds 6 positions \(max_length\) but got a sequence of length 7 .* max_length=7",
    ):
        layer(jnp.ones((1, 7, F)))


def test_decode_errors():
    layer = PositionEmbed(L, F, decode=True, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="cache is not initialized. Call layer.init_cache"):
        layer(jnp.ones((1, 1, F)))
    layer.init_cache((1, L, F))
    layer(jnp.ones((1, 5, F)))
    with pytest.raises(
        ValueError,
        match=r"decode step at position 5 with 2 position\(s\) runs past max_length \(6\)",
    ):
        layer(jnp.ones((1, 2, F)))
    assert int(layer.cache_index.value) == 5  # the refused step changed nothing
    with pytest.raises(ValueError, match=r"init_cache needs the shape of a whole sequence"):
        layer.init_cache((F,))
    with pytest.raises(ValueError, match=r"with positive sizes, got \(1, 0, 4\)"):
        layer.init_cache((1, 0, F))
    with pytest.raises(
        ValueError, match=r"a sequence of 7 positions is longer than max_length \(6\)"
    ):
        layer.init_cache((1, 7, F))


def test_a_parameter_dtype_that_cannot_be_trained_is_refused():
    with pytest.raises(
        ValueError,
        match=r"PositionEmbed param_dtype must be a floating dtype .* got int32\. Use a floating "
        r"dtype such as float32 or bfloat16\.",
    ):
        PositionEmbed(L, F, param_dtype=jnp.int32, rngs=nnx.Rngs(0))
