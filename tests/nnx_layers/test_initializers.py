"""Initializers: identical values to jax/flax initializers, value semantics, name table, errors."""

import dataclasses

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.nnx.nn.recurrent import modified_orthogonal

import nnx_layers
from nnx_layers import initializers as init

KEY = jax.random.key(42)
SHAPE = (4, 6)  # one shape: every new shape/dtype costs a (slow on CPU) random-sampler compile

# (ours, the flax.nnx.initializers equivalent)
PAIRS = [
    (init.zeros, fnnx.initializers.zeros),
    (init.ones, fnnx.initializers.ones),
    (init.constant(0.3), fnnx.initializers.constant(0.3)),
    (init.normal(0.02), fnnx.initializers.normal(0.02)),
    (init.uniform(0.5), fnnx.initializers.uniform(0.5)),
    (
        init.truncated_normal(0.1, -1.0, 3.0),
        fnnx.initializers.truncated_normal(0.1, lower=-1.0, upper=3.0),
    ),
    (
        init.variance_scaling(2.0, "fan_out", "normal"),
        fnnx.initializers.variance_scaling(2.0, "fan_out", "normal"),
    ),
    (
        init.variance_scaling(0.5, "fan_geo_avg", "uniform", in_axis=-1, out_axis=(0,)),
        fnnx.initializers.variance_scaling(
            0.5, "fan_geo_avg", "uniform", in_axis=-1, out_axis=(0,)
        ),
    ),
    (init.lecun_normal(), fnnx.initializers.lecun_normal()),
    (init.lecun_uniform(), fnnx.initializers.lecun_uniform()),
    (init.he_normal(), fnnx.initializers.he_normal()),
    (init.kaiming_uniform(), fnnx.initializers.kaiming_uniform()),
    (init.glorot_normal(), fnnx.initializers.glorot_normal()),
    (init.xavier_uniform(), fnnx.initializers.xavier_uniform()),
    (init.orthogonal(), fnnx.initializers.orthogonal()),
    (
        init.orthogonal(scale=2.0, column_axis=0),
        fnnx.initializers.orthogonal(scale=2.0, column_axis=0),
    ),
]


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=[repr(ours) for ours, _ in PAIRS])
def test_same_values_as_flax(ours, theirs):
    a, b = ours(KEY, SHAPE), theirs(KEY, SHAPE)
    assert a.dtype == b.dtype == jnp.float32 and a.shape == SHAPE
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("ours", "theirs", "dtype"),
    [
        (init.normal(0.5), fnnx.initializers.normal(0.5), jnp.float16),
        (init.lecun_normal(), fnnx.initializers.lecun_normal(), jnp.bfloat16),
    ],
    ids=["normal-float16", "lecun_normal-bfloat16"],
)
def test_same_values_as_flax_in_half_precision(ours, theirs, dtype):
    a, b = ours(KEY, SHAPE, dtype), theirs(KEY, SHAPE, dtype)
    assert a.dtype == b.dtype == dtype
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_orthogonal_in_half_precision_is_the_float32_sample_cast():
    # flax.nnx's LSTMCell default (modified_orthogonal) does this; jax's orthogonal has no
    # bfloat16 QR on CPU.
    a = init.orthogonal()(KEY, SHAPE, jnp.bfloat16)
    assert a.dtype == jnp.bfloat16
    np.testing.assert_array_equal(a, init.orthogonal()(KEY, SHAPE).astype(jnp.bfloat16))
    np.testing.assert_array_equal(a, modified_orthogonal(KEY, SHAPE, jnp.bfloat16))


def test_aliases_are_equal_value_objects():
    assert init.he_normal() == init.kaiming_normal() and init.he_uniform() == init.kaiming_uniform()
    assert (
        init.glorot_normal() == init.xavier_normal()
        and init.glorot_uniform() == init.xavier_uniform()
    )
    assert init.xavier_normal(batch_axis=0).batch_axis == 0


@pytest.mark.parametrize(
    ("options", "variance"),
    [
        ({"mode": "fan_in"}, 1 / (2 * 3 * 4)),  # receptive field 3 * 4, fan_in = 2 * 12
        ({"mode": "fan_out"}, 1 / (5 * 3 * 4)),
        ({"mode": "fan_avg"}, 2 / (7 * 3 * 4)),
        ({"mode": "fan_in", "in_axis": (0, 1), "out_axis": -1}, 1 / (3 * 4 * 2)),
        ({"mode": "fan_out", "batch_axis": 0}, 1 / (5 * 4)),
    ],
)
def test_fans_over_receptive_fields(options, variance):
    shape = (3, 4, 2, 5)
    ours = init.variance_scaling(1.0, distribution="normal", **options)
    expected = jax.random.normal(KEY, (120,)).reshape(shape) * np.sqrt(variance)
    np.testing.assert_allclose(ours(KEY, shape), expected, rtol=1e-6)


def test_high_rank_sample_equals_flax_for_the_conv_default():
    shape = (3, 2, 5)
    expected = fnnx.initializers.lecun_normal()(KEY, shape)
    np.testing.assert_array_equal(init.lecun_normal()(KEY, shape), expected)


def test_default_dtype_is_float32():
    assert init.normal()(KEY, (3,)).dtype == jnp.float32
    assert init.zeros(KEY, 3).shape == (3,)


def test_orthogonal_is_orthogonal():
    w = init.orthogonal()(KEY, (3, 5))
    np.testing.assert_allclose(w @ w.T, np.eye(3), atol=1e-5)


@pytest.mark.parametrize("name", init.names())
def test_name_table_round_trip(name):
    made = init.get(name)
    assert init.get(made.name, **made.config()) == made
    assert hash(made) == hash(init.get(name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.foo = 1  # value objects are immutable


def test_value_semantics():
    assert init.normal(0.02) == init.Normal(stddev=0.02) != init.normal(0.03)
    assert init.lecun_normal() == init.VarianceScaling(1.0, "fan_in", "truncated_normal")
    assert init.lecun_normal().name == "variance_scaling"
    assert init.variance_scaling(1.0, "fan_in", "normal", out_axis=[0]).out_axis == (0,)
    assert init.zeros_init() == init.zeros and init.ones_init() == init.ones
    assert len({init.he_normal(), init.kaiming_normal(), init.he_uniform()}) == 2
    assert init.constant(2.0).config() == {"value": 2.0}


def test_get_unknown_name_suggests():
    with pytest.raises(
        ValueError, match="Unknown initializer 'lecun_norml'. Did you mean 'lecun_normal'"
    ):
        init.get("lecun_norml")


def test_get_bad_arguments():
    with pytest.raises(
        ValueError, match="Initializer 'normal' does not accept arguments \\['std'\\]"
    ):
        init.get("normal", std=0.1)


def test_variance_scaling_bad_mode_and_distribution():
    with pytest.raises(ValueError, match="VarianceScaling mode must be one of"):
        init.variance_scaling(1.0, "fan", "normal")
    with pytest.raises(ValueError, match="VarianceScaling distribution must be one of"):
        init.variance_scaling(1.0, "fan_in", "gaussian")


def test_one_dimensional_shapes_are_rejected_where_fans_are_needed():
    with pytest.raises(
        ValueError, match=r"needs a shape with at least 2 dimensions.*got shape \(5,\)"
    ):
        init.lecun_normal()(KEY, (5,))
    with pytest.raises(ValueError, match=r"orthogonal initializer needs a shape with at least 2"):
        init.orthogonal()(KEY, (5,))


def test_initializer_is_the_protocol_every_initializer_satisfies():
    assert nnx_layers.Initializer is init.Initializer
    for name in init.names():
        assert isinstance(init.get(name), init.Initializer), name
    assert isinstance(jax.nn.initializers.lecun_normal(), init.Initializer)
    assert not isinstance(3, init.Initializer)


_EXPLICIT = """
import json
import jax, jax.numpy as jnp
from jax.sharding import AxisType, PartitionSpec as P
from nnx_layers import initializers

mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
key = jax.random.key(0)
out = {}
with jax.set_mesh(mesh):
    for name, init in [
        ("zeros", initializers.zeros), ("ones", initializers.ones),
        ("constant", initializers.constant(0.5)), ("normal", initializers.normal()),
        ("uniform", initializers.uniform()), ("truncated_normal", initializers.truncated_normal()),
        ("lecun_normal", initializers.lecun_normal()), ("glorot_uniform", initializers.glorot_uniform()),
        ("he_normal", initializers.he_normal()), ("orthogonal", initializers.orthogonal()),
    ]:
        sharded = init(key, (4, 6), out_sharding=P(None, "model"))
        plain = init(key, (4, 6))
        same = bool(jnp.allclose(sharded, plain, atol=1e-6))
        out[name] = [list(sharded.sharding.spec), same]
print(json.dumps(out))
"""


def test_out_sharding_places_the_values_and_keeps_them():
    # as jax's and flax.nnx's initializers: init(key, shape, out_sharding=P(...)) under an
    # explicit mesh gives the same values, sharded so
    import json

    from ..nnx_core.probe import run_in_devices

    out = json.loads(run_in_devices(_EXPLICIT, 4).strip().splitlines()[-1])
    assert len(out) == 10
    for name, (spec, same) in out.items():
        assert spec == [None, "model"] and same, name
