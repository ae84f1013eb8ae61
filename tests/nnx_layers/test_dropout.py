"""Dropout: exact rate 0/1, masks identical to flax.nnx for the same key, modes and errors."""

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core
from nnx_core import Module, Rngs, RngStream
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


def test_the_layer_forks_its_own_stream_from_the_named_one():
    rngs = Rngs(params=0, dropout=3)
    drop = Dropout(0.5, rngs=rngs)
    assert isinstance(drop.rngs, RngStream) and drop.rngs.tag == "dropout"
    assert int(rngs.dropout.count.value) == 1 and int(rngs.params.count.value) == 0
    a, b = drop(jnp.ones(32)), drop(jnp.ones(32))
    assert not bool((a == b).all())
    assert int(drop.rngs.count.value) == 2 and int(rngs.dropout.count.value) == 1
    # A custom stream name, falling back to the default stream when missing.
    fallback = Rngs(0)
    Dropout(0.5, rng_collection="noise", rngs=fallback)(jnp.ones(4))
    assert int(fallback.default.count.value) == 1
    # A stream is forked too, not shared.
    stream = Rngs(dropout=3)["dropout"]
    from_stream = Dropout(0.5, rngs=stream)
    assert from_stream.rngs is not stream and int(stream.count.value) == 1
    np.testing.assert_array_equal(from_stream(jnp.ones(32)), a)


def test_forked_masks_match_flax_for_the_same_seed():
    x = jnp.ones((8, 16))
    for ours, theirs in [
        (Dropout(0.5, rngs=Rngs(dropout=3)), fnnx.Dropout(0.5, rngs=fnnx.Rngs(dropout=3))),
        (Dropout(0.3, rngs=Rngs(7)), fnnx.Dropout(0.3, rngs=fnnx.Rngs(7))),
    ]:
        for _ in range(2):
            np.testing.assert_array_equal(ours(x), theirs(x))
    # and the call's rngs: a forked Rngs reproduces the layer's first mask, as in flax.nnx
    layer = Dropout(0.5, rngs=Rngs(dropout=0))
    np.testing.assert_array_equal(layer(x), Dropout(0.5)(x, rngs=Rngs(dropout=0).fork()))


def test_two_layers_from_one_rngs_draw_independent_masks():
    rngs = Rngs(dropout=0)
    first, second = Dropout(0.5, rngs=rngs), Dropout(0.5, rngs=rngs)
    x = jnp.ones(64)
    assert not bool((first(x) == second(x)).all())


def test_reseed_reproduces_the_first_mask():
    net = _Net(Rngs(params=0, dropout=42))
    x = jnp.ones((2, 4))
    first = net(x)
    assert not bool((net(x) == first).all())
    nnx_core.reseed(net, dropout=42)
    np.testing.assert_array_equal(net(x), first)


class _Block(Module):
    def __init__(self, rngs):
        self.linear = Linear(4, 4, rngs=rngs)
        self.drop = Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.linear(x))


def test_blocks_made_under_vmap_with_split_rngs_run_under_scan():
    """flax.nnx's scan-over-layers pattern: one Dropout key per layer, applied by scan."""

    @nnx_core.split_rngs(splits=3)
    @nnx_core.vmap(axis_size=3)
    def create(rngs):
        return _Block(rngs)

    blocks = create(Rngs(0))
    assert blocks.drop.rngs.key.shape == (3,) and blocks.drop.rngs.count.shape == (3,)

    @nnx_core.scan
    def apply(x, block):
        return block(x), None

    x = jnp.ones((2, 4))
    y, _ = apply(x, blocks)
    assert y.shape == (2, 4)
    np.testing.assert_array_equal(blocks.drop.rngs.count.value, [1, 1, 1])
    # each layer drew from its own key: redoing layer by layer gives the same output
    expected = x
    for i in range(3):
        layer = _Block(Rngs(0))
        layer.linear.kernel.value = blocks.linear.kernel.value[i]
        layer.linear.bias.value = blocks.linear.bias.value[i]
        layer.drop.rngs.key.value = blocks.drop.rngs.key.value[i]
        expected = layer(expected)
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_bad_rngs_are_refused():
    with pytest.raises(
        TypeError, match="Dropout rngs must be an Rngs, an RngStream or None, got int"
    ):
        Dropout(0.5, rngs=0)
    with pytest.raises(
        TypeError, match="Dropout call rngs must be an Rngs, an RngStream or a PRNG key, got str"
    ):
        Dropout(0.5)(jnp.ones(3), rngs="dropout")


def test_set_view_sets_deterministic():
    drop = Dropout(0.5, rngs=Rngs(0))
    drop.set_view()
    assert drop.deterministic is False
    drop.set_view(deterministic=True)
    np.testing.assert_array_equal(drop(jnp.ones(3)), jnp.ones(3))


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
    with pytest.raises(
        ValueError, match="`deterministic` is False, but no `rngs` argument was provided to Dropout"
    ):
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
    assert int(drop.rngs.count.value) == 2
    assert not bool((a == b).all())
    np.testing.assert_array_equal(a, Dropout(0.5, rngs=Rngs(dropout=0))(jnp.ones(32)))
