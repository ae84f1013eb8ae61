"""Dropout: exact rate 0/1, masks identical to flax.nnx for the same key, modes and errors."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core
from nnx_core import Module, Rngs
from nnx_layers import Dropout, Linear


def _x(shape=(4, 6), dtype=jnp.float32):
    return jnp.asarray(np.arange(1, np.prod(shape) + 1).reshape(shape), dtype)


@pytest.mark.parametrize(
    ("rate", "broadcast_dims", "dtype", "shape"),
    [
        (0.1, (), jnp.float32, (6, 5)),
        (0.5, (), jnp.bfloat16, (6, 5)),
        (0.9, (), jnp.float16, (6, 5)),
        (0.5, (0,), jnp.float32, (6, 5)),
        (0.3, (0, 2), jnp.bfloat16, (2, 3, 5)),
        (0.7, (-1,), jnp.float32, (6, 5)),
    ],
)
def test_dropout_matches_flax_for_the_same_key(rate, broadcast_dims, dtype, shape):
    x = _x(shape, dtype)
    key = jax.random.key(7)
    ours = Dropout(rate, broadcast_dims=broadcast_dims)(x, rngs=key)
    theirs = fnnx.Dropout(rate, broadcast_dims=broadcast_dims)(x, rngs=key)
    assert ours.dtype == theirs.dtype == dtype
    np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(theirs, np.float32))


def test_broadcast_dims_share_the_mask():
    y = Dropout(0.5, broadcast_dims=(0,), rngs=Rngs(dropout=0))(jnp.ones((6, 32)))
    np.testing.assert_array_equal(y[0], y[5])
    assert set(np.unique(y).tolist()) <= {0.0, 2.0}


def test_rate_zero_is_identity_and_rate_one_is_exact_zeros():
    x = _x()
    assert Dropout(0.0)(x) is x or bool((Dropout(0.0)(x) == x).all())
    y = Dropout(1.0, rngs=Rngs(0))(x)
    np.testing.assert_array_equal(y, jnp.zeros_like(x))
    y = Dropout(1.0)(jnp.full((3,), jnp.inf))  # no rngs needed; no 0 * inf = nan
    np.testing.assert_array_equal(y, jnp.zeros(3))


def test_deterministic_is_identity():
    x = _x()
    np.testing.assert_array_equal(Dropout(0.5, deterministic=True)(x), x)
    np.testing.assert_array_equal(Dropout(0.5, rngs=Rngs(0))(x, deterministic=True), x)


def test_expected_value_is_preserved():
    y = Dropout(0.3, rngs=Rngs(dropout=1))(jnp.ones((100, 100)))
    kept = float((y != 0).mean())
    assert abs(kept - 0.7) < 0.02
    np.testing.assert_allclose(y[y != 0], 1 / 0.7, rtol=1e-6)


def test_keys_come_from_the_named_stream_and_advance():
    rngs = Rngs(params=0, dropout=3)
    drop = Dropout(0.5, rngs=rngs)
    a, b = drop(jnp.ones(32)), drop(jnp.ones(32))
    assert not bool((a == b).all())
    assert int(rngs.dropout.count.value) == 2 and int(rngs.params.count.value) == 0
    # A custom stream name, falling back to the default stream when missing.
    fallback = Rngs(0)
    Dropout(0.5, rng_collection="noise", rngs=fallback)(jnp.ones(4))
    assert int(fallback.default.count.value) == 1


def test_call_rngs_override_the_layer_rngs():
    drop = Dropout(0.5, rngs=Rngs(dropout=0))
    call_rngs = Rngs(dropout=5)
    y1 = drop(jnp.ones(32), rngs=call_rngs)
    y2 = Dropout(0.5)(jnp.ones(32), rngs=Rngs(dropout=5))
    np.testing.assert_array_equal(y1, y2)
    y3 = Dropout(0.5)(jnp.ones(32), rngs=Rngs(dropout=5)["dropout"])
    np.testing.assert_array_equal(y1, y3)


class _Net(Module):
    def __init__(self, rngs):
        self.linear = Linear(4, 4, rngs=rngs)
        self.drop = Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.linear(x))


def test_train_and_eval_switch_dropout():
    net = _Net(Rngs(0))
    x = jnp.ones((4, 4))
    net.eval()
    assert net.drop.deterministic is True
    np.testing.assert_array_equal(net(x), net.linear(x))
    net.train()
    assert net.drop.deterministic is False
    assert not bool((net(x) == net.linear(x)).all())


def test_attributes():
    drop = Dropout(0.25, broadcast_dims=[1], rngs=Rngs(0))
    assert drop.rate == 0.25 and drop.broadcast_dims == (1,) and drop.rng_collection == "dropout"
    assert drop.deterministic is False


@pytest.mark.parametrize("rate", [-0.1, 1.5, "0.5", None, True])
def test_bad_rate(rate):
    with pytest.raises(ValueError, match=r"Dropout rate must be a number in \[0, 1\]"):
        Dropout(rate)


def test_training_without_rngs():
    with pytest.raises(ValueError, match="Dropout is in training mode .* but has no rngs"):
        Dropout(0.5)(jnp.ones(3))


def test_deterministic_none_needs_a_value():
    with pytest.raises(ValueError, match="Dropout has deterministic=None"):
        Dropout(0.5, deterministic=None)(jnp.ones(3))
    np.testing.assert_array_equal(
        Dropout(0.5, deterministic=None)(jnp.ones(3), deterministic=True), jnp.ones(3)
    )


def test_dropout_under_nnx_jit_advances_its_stream():
    drop = Dropout(0.5, rngs=Rngs(dropout=0))
    step = nnx_core.jit(lambda module, x: module(x))
    a, b = step(drop, jnp.ones(32)), step(drop, jnp.ones(32))
    assert int(drop.rngs.dropout.count.value) == 2
    assert not bool((a == b).all())
    np.testing.assert_array_equal(a, Dropout(0.5, rngs=Rngs(dropout=0))(jnp.ones(32)))
