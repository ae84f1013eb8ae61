"""GroupNorm and InstanceNorm: outputs and gradients equal to flax.nnx; layouts; config; errors."""

import inspect

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_core import Rngs
from nnx_layers import GroupNorm, InstanceNorm, LayerNorm
from nnx_plugins.testing import check_layer

from ._parity import check_grads, sync_params

FLAX_ONLY: set[str] = set()


def _x(shape, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal(shape) * 2 + 0.5, dtype)


def _pair(cls, flax_cls, *args, **options):
    ours, theirs = (
        cls(*args, **options, rngs=Rngs(0)),
        flax_cls(*args, **options, rngs=fnnx.Rngs(0)),
    )
    if ours.scale is not None or ours.bias is not None:
        sync_params(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize(
    ("ours", "theirs"), [(GroupNorm, fnnx.GroupNorm), (InstanceNorm, fnnx.InstanceNorm)]
)
def test_signature_matches_flax(ours, theirs):
    mine = inspect.signature(ours.__init__).parameters
    other = inspect.signature(theirs.__init__).parameters
    assert list(mine) == [p for p in other if p not in FLAX_ONLY]
    for key, parameter in mine.items():
        assert parameter.kind == other[key].kind, key
        if not callable(parameter.default) and not key.endswith("_metadata"):
            assert parameter.default == other[key].default, key
        elif key.endswith("_init"):
            assert parameter.default(None, (2,)).tolist() == other[key].default(None, (2,)).tolist()


# (input shape, constructor arguments)
GROUP_CASES = [
    ((2, 4, 4, 8), {"num_features": 8, "num_groups": 4}),
    ((3, 6), {"num_features": 6, "num_groups": 3}),
    ((2, 5, 6), {"num_features": 6, "num_groups": None, "group_size": 2}),
    ((2, 5, 6), {"num_features": 6, "num_groups": 1, "epsilon": 1e-3}),
    ((2, 3, 6), {"num_features": 6, "num_groups": 6, "use_fast_variance": False}),
    ((2, 3, 3, 4), {"num_features": 4, "num_groups": 2, "reduction_axes": (1, 2, 3)}),
    ((2, 5, 6), {"num_features": 6, "num_groups": 2, "use_bias": False}),
    ((2, 5, 6), {"num_features": 6, "num_groups": 2, "use_scale": False, "use_bias": False}),
]


@pytest.mark.parametrize(("shape", "options"), GROUP_CASES)
def test_groupnorm_matches_flax(shape, options, assert_close):
    ours, theirs = _pair(GroupNorm, fnnx.GroupNorm, **options)
    x = _x(shape)
    assert_close(ours(x), theirs(x))
    check_grads(ours, theirs, lambda m, x: m(x), x, assert_close, scale=10)


INSTANCE_CASES = [
    ((2, 4, 4, 8), {"num_features": 8}),
    ((2, 5, 3), {"num_features": 3, "use_fast_variance": False, "epsilon": 1e-3}),
    ((2, 3, 4, 5), {"num_features": 12, "feature_axes": (1, 2)}),
    ((2, 3, 4, 5), {"num_features": 3, "feature_axes": 1, "use_bias": False}),
]


@pytest.mark.parametrize(("shape", "options"), INSTANCE_CASES)
def test_instancenorm_matches_flax(shape, options, assert_close):
    ours, theirs = _pair(InstanceNorm, fnnx.InstanceNorm, **options)
    x = _x(shape)
    assert_close(ours(x), theirs(x))
    check_grads(ours, theirs, lambda m, x: m(x), x, assert_close, scale=10)


DTYPE_CASES = [  # (input dtype, dtype, param_dtype)
    (jnp.bfloat16, None, jnp.float32),
    (jnp.float32, jnp.bfloat16, jnp.float32),
    (jnp.bfloat16, None, jnp.bfloat16),
]


@pytest.mark.parametrize(("input_dtype", "dtype", "param_dtype"), DTYPE_CASES)
def test_dtypes_match_flax(input_dtype, dtype, param_dtype, assert_close):
    options = {"dtype": dtype, "param_dtype": param_dtype}
    x = _x((2, 3, 6), input_dtype)
    ours, theirs = _pair(GroupNorm, fnnx.GroupNorm, 6, 3, **options)
    assert_close(ours(x), theirs(x))
    ours, theirs = _pair(InstanceNorm, fnnx.InstanceNorm, 6, **options)
    assert_close(ours(x), theirs(x))


def test_mask_matches_flax(assert_close):
    x = _x((2, 4, 6))
    mask = jnp.arange(4)[None, :, None] < jnp.array([2, 4])[:, None, None]
    mask = jnp.broadcast_to(mask, x.shape)
    for pair in [_pair(GroupNorm, fnnx.GroupNorm, 6, 2), _pair(InstanceNorm, fnnx.InstanceNorm, 6)]:
        ours, theirs = pair
        assert_close(ours(x, mask=mask), theirs(x, mask=mask))


def test_partial_reduction_axes_normalize_per_position():
    # Statistics over the channels of a group only (not over length): flax.nnx's GroupNorm
    # cannot do this (it assumes every non-batch axis is reduced); we compare with numpy.
    x = _x((2, 3, 6))
    y = GroupNorm(6, 2, reduction_axes=-1, rngs=Rngs(0))(x)
    groups = np.asarray(x).reshape(2, 3, 2, 3)
    mean, var = groups.mean(-1, keepdims=True), groups.var(-1, keepdims=True)
    expected = ((groups - mean) / np.sqrt(var + 1e-6)).reshape(x.shape)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_special_cases_are_layernorm():
    x = _x((2, 4, 6))
    layer_norm = LayerNorm(6, reduction_axes=(1, 2), rngs=Rngs(0))(x)
    np.testing.assert_allclose(GroupNorm(6, 1, rngs=Rngs(0))(x), layer_norm, rtol=1e-5, atol=1e-5)
    per_channel = LayerNorm(6, reduction_axes=1, rngs=Rngs(0))(x)
    np.testing.assert_allclose(GroupNorm(6, 6, rngs=Rngs(0))(x), per_channel, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(InstanceNorm(6, rngs=Rngs(0))(x), per_channel, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("num_groups", "group_size", "layout"),
    [(32, None, (32, 2)), (None, 8, (8, 8)), (4, 16, (4, 16)), (8, 8, (8, 8))],
)
def test_group_layout_from_either_argument(num_groups, group_size, layout):
    gn = GroupNorm(64, num_groups, group_size, rngs=Rngs(0))
    assert gn.group_layout == layout
    assert (gn.num_groups, gn.group_size) == (num_groups, group_size)


def test_groupnorm_and_instancenorm_work_from_a_config():
    for config in [{"num_groups": 4}, {"num_groups": None, "group_size": 2}]:
        report = check_layer("GroupNorm", {"num_features": 8, **config}, input_shape=(2, 4, 4, 8))
        assert report.output_shape == (2, 4, 4, 8)
    report = check_layer("InstanceNorm", {"num_features": 8}, input_shape=(2, 4, 4, 8))
    assert report.config["feature_axes"] == -1


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((6, None, None), "GroupNorm needs num_groups or group_size, got neither for 6 features"),
        ((6, 4), "GroupNorm num_groups=4 does not divide num_features=6.*num_groups=3"),
        (
            (64, 32, 4),
            r"GroupNorm got num_groups=32 and group_size=4, which disagree .*num_groups=None",
        ),
        ((6, None, 4), "GroupNorm group_size=4 does not divide num_features=6"),
        ((6, 0), "GroupNorm num_groups must be a positive integer, got 0"),
        ((6, None, -2), "GroupNorm group_size must be a positive integer, got -2"),
    ],
)
def test_groupnorm_layout_errors(args, message):
    with pytest.raises(ValueError, match=message):
        GroupNorm(*args, rngs=Rngs(0))


def test_groupnorm_call_errors():
    gn = GroupNorm(6, 3, rngs=Rngs(0))
    with pytest.raises(
        ValueError, match=r"GroupNorm expects 6 features over axes \(2,\), got shape \(2, 3, 4\)"
    ):
        gn(jnp.ones((2, 3, 4)))
    with pytest.raises(ValueError, match=r"GroupNorm reduction_axes must include the channel axis"):
        GroupNorm(6, 3, reduction_axes=1, rngs=Rngs(0))(jnp.ones((2, 3, 6)))
    with pytest.raises(TypeError, match="GroupNorm expects a numeric input, got dtype key"):
        gn(jax.random.split(jax.random.key(0), (2, 6)))


def test_instancenorm_errors():
    with pytest.raises(ValueError, match=r"InstanceNorm feature_axes \(0, 1\) include the leading"):
        InstanceNorm(6, feature_axes=(0, 1), rngs=Rngs(0))(jnp.ones((2, 3, 6)))
    with pytest.raises(ValueError, match=r"InstanceNorm feature_axes -1 include the leading axis"):
        InstanceNorm(6, rngs=Rngs(0))(jnp.ones(6))
    with pytest.raises(ValueError, match=r"InstanceNorm expects 6 features over axes \(2,\)"):
        InstanceNorm(6, rngs=Rngs(0))(jnp.ones((2, 3, 5)))
    with pytest.raises(
        ValueError, match="InstanceNorm epsilon must be a finite non-negative number"
    ):
        InstanceNorm(6, epsilon=-1.0, rngs=Rngs(0))
