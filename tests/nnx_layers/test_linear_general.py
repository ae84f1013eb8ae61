"""LinearGeneral: parity with flax.nnx (init, outputs, gradients), configs, errors."""

import inspect
from collections.abc import Mapping

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import LinearGeneral, initializers
from nnx_plugins.testing import check_layer


def _x(shape, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(2).standard_normal(shape), dtype)


def _signature_check(ours, theirs, skip=()):
    mine = inspect.signature(ours.__init__).parameters
    other = inspect.signature(theirs.__init__).parameters
    for name, parameter in mine.items():
        assert name in other, name
        default = parameter.default
        if name in skip or callable(default) or name.endswith("metadata"):
            continue
        if isinstance(default, Mapping):
            assert dict(default) == dict(other[name].default), name
        else:
            assert default == other[name].default, name
    assert mine["rngs"].kind is inspect.Parameter.KEYWORD_ONLY


def test_signatures_match_flax():
    _signature_check(LinearGeneral, fnnx.LinearGeneral)
    ours = list(inspect.signature(LinearGeneral.__init__).parameters)
    assert ours == list(inspect.signature(fnnx.LinearGeneral.__init__).parameters)


# --- LinearGeneral ---------------------------------------------------------------------------

LG_CASES = [
    # in_features, out_features, options, input shape
    (4, 3, {}, (2, 4)),
    (4, (2, 3), {}, (2, 5, 4)),
    ((2, 3), 5, {"axis": (-2, -1)}, (4, 2, 3)),
    ((2, 3), (4, 5), {"axis": (1, -1)}, (6, 2, 7, 3)),
    (3, 2, {"axis": 0}, (3, 4)),
    (3, (2, 2), {"batch_axis": {0: 2}, "use_bias": False}, (2, 5, 3)),
    ((3, 4), 2, {"axis": (2, 3), "batch_axis": {0: 2, 1: 5}}, (2, 5, 3, 4)),
]


def test_default_init_matches_flax_from_the_same_key():
    ours = LinearGeneral(
        (2, 3), (4, 5), axis=(1, -1), bias_init=initializers.normal(1.0), rngs=nnx.Rngs(0)
    )
    theirs = fnnx.LinearGeneral(
        (2, 3), (4, 5), axis=(1, -1), bias_init=fnnx.initializers.normal(1.0), rngs=fnnx.Rngs(0)
    )
    np.testing.assert_array_equal(ours.kernel.value, theirs.kernel[...])
    np.testing.assert_array_equal(ours.bias.value, theirs.bias[...])


@pytest.mark.parametrize(("in_features", "out_features", "options", "shape"), LG_CASES)
def test_linear_general_matches_flax(
    in_features, out_features, options, shape, copy_params, assert_close
):
    zeros = dict(kernel_init=initializers.zeros)
    ours = LinearGeneral(in_features, out_features, **options, **zeros, rngs=nnx.Rngs(0))
    theirs = fnnx.LinearGeneral(
        in_features, out_features, **options, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0)
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _x(shape)
    assert_close(ours(x), theirs(x))


@pytest.mark.parametrize(
    ("in_features", "out_features", "options", "shape"), LG_CASES[-4::2] + [LG_CASES[-1]]
)
def test_linear_general_gradients_match_flax(
    in_features, out_features, options, shape, copy_params, assert_close
):
    zeros = dict(kernel_init=initializers.zeros)
    ours = LinearGeneral(in_features, out_features, **options, **zeros, rngs=nnx.Rngs(0))
    theirs = fnnx.LinearGeneral(
        in_features, out_features, **options, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0)
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _x(shape)

    def loss(model, x):
        return (model(x) ** 2).sum()

    ours_grads, ours_dx = nnx.grad(loss, argnums=(0, 1))(ours, x)
    theirs_grads, theirs_dx = fnnx.grad(loss, argnums=(0, 1))(theirs, x)
    assert_close(ours_dx, theirs_dx, 10.0)
    assert_close(ours_grads["kernel"].value, theirs_grads["kernel"][...], 10.0)


@pytest.mark.parametrize(
    ("dtype", "param_dtype", "input_dtype"),
    [
        (None, jnp.float32, jnp.bfloat16),
        (jnp.bfloat16, jnp.float32, jnp.float32),
        (None, jnp.bfloat16, jnp.bfloat16),
    ],
)
def test_linear_general_dtypes_match_flax(
    dtype, param_dtype, input_dtype, copy_params, assert_close
):
    kwargs = dict(axis=(-2, -1), dtype=dtype, param_dtype=param_dtype)
    ours = LinearGeneral((2, 3), 4, **kwargs, kernel_init=initializers.zeros, rngs=nnx.Rngs(0))
    theirs = fnnx.LinearGeneral(
        (2, 3), 4, **kwargs, kernel_init=fnnx.initializers.zeros, rngs=fnnx.Rngs(0)
    )
    copy_params(ours, theirs, ["kernel", "bias"])
    x = _x((5, 2, 3), input_dtype)
    assert_close(ours(x), theirs(x))


def test_linear_general_stores_its_arguments_as_given():
    layer = LinearGeneral(4, [2, 3], axis=-1, batch_axis={0: 2}, rngs=nnx.Rngs(0))
    assert layer.in_features == 4 and layer.out_features == (2, 3) and layer.axis == -1
    assert layer.batch_axis == {0: 2} and layer.kernel.value.shape == (2, 4, 2, 3)
    for name in inspect.signature(LinearGeneral).parameters:
        if name != "rngs":
            assert hasattr(layer, name), name


@pytest.mark.parametrize(
    "config",
    [
        {"in_features": 8, "out_features": [2, 4]},
        {"in_features": [2, 3], "out_features": 4, "axis": [1, -1], "batch_axis": {0: 3}},
    ],
)
def test_linear_general_works_from_a_config(config):
    shape = (3, 8) if config["in_features"] == 8 else (3, 2, 3)
    expected = (3, 2, 4) if config["in_features"] == 8 else (3, 4)
    assert check_layer("LinearGeneral", config, input_shape=shape).output_shape == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0, 3), {}, "LinearGeneral in_features must be a positive int or a non-empty sequence"),
        ((3, ()), {}, "LinearGeneral out_features must be a positive int or a non-empty sequence"),
        (
            ((2, 3), 4),
            {},
            r"one input size per contracted axis, got in_features=\(2, 3\) \(2 sizes\) and axis=-1 \(1 axes\)",
        ),
        (
            (3, 4),
            {"axis": (1, 1)},
            r"axis must be an int or a non-empty sequence of distinct ints, got \(1, 1\)",
        ),
        (
            (3, 4),
            {"batch_axis": {1: 2}},
            r"batch_axis must map the leading axes 0, 1, ... .* got \{1: 2\}",
        ),
        ((3, 4), {"batch_axis": {0: 0}}, r"to positive sizes, got \{0: 0\}"),
        (
            (3, 4),
            {"batch_axis": [0]},
            r"batch_axis must map leading axes to their sizes, got \[0\]",
        ),
    ],
)
def test_linear_general_construction_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        LinearGeneral(*args, **kwargs, rngs=nnx.Rngs(0))


def test_linear_general_call_errors():
    layer = LinearGeneral((2, 3), 4, axis=(1, 2), rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError,
        match=r"expects sizes \(2, 3\) \(in_features\) on axes \(1, 2\), got \(3, 2\) from an input of shape \(5, 3, 2\)",
    ):
        layer(jnp.ones((5, 3, 2)))
    with pytest.raises(
        ValueError, match=r"axis=\(1, 2\) is out of range for an input of shape \(2, 3\)"
    ):
        layer(jnp.ones((2, 3)))
    overlap = LinearGeneral((2, 2), 4, axis=(1, -1), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"names an axis twice .* resolves to \(1, 1\)"):
        overlap(jnp.ones((3, 2)))
    batched = LinearGeneral(3, 4, axis=0, batch_axis={0: 2}, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"names an axis twice \(or a batch axis\)"):
        batched(jnp.ones((2, 3)))
    batched = LinearGeneral(3, 4, batch_axis={0: 2}, rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError, match=r"expects batch sizes \{0: 2\} \(batch_axis\), got \{0: 5\}"
    ):
        batched(jnp.ones((5, 3)))
    with pytest.raises(TypeError, match="LinearGeneral expects a numeric input, got dtype key"):
        batched(jax.random.split(jax.random.key(0), (2, 3)))


def test_dot_general_and_dot_general_cls_replace_the_contraction():
    calls = []

    def doubled(*args, **kwargs):
        calls.append(sorted(kwargs))
        return 2 * jax.lax.dot_general(*args, **kwargs)

    class Doubled:
        def __call__(self, *args, **kwargs):
            return doubled(*args, **kwargs)

    x = jnp.ones((2, 3))
    plain = LinearGeneral(3, 4, rngs=nnx.Rngs(0))
    for options in ({"dot_general": doubled}, {"dot_general_cls": Doubled}):
        layer = LinearGeneral(3, 4, **options, rngs=nnx.Rngs(0))
        np.testing.assert_allclose(
            layer(x) - layer.bias.value, 2 * (plain(x) - plain.bias.value), rtol=1e-6
        )
    # only the keywords that are set reach a user's function (as in flax.nnx)
    assert calls == [["precision"], ["precision"]]
    LinearGeneral(3, 4, dot_general=doubled, preferred_element_type=jnp.float32, rngs=nnx.Rngs(0))(
        x
    )
    assert calls[-1] == ["precision", "preferred_element_type"]
