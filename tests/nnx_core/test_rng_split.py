"""split_rngs, fork_rngs, reseed, restore_rngs: in place, decorators, flax parity, errors."""

from __future__ import annotations

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_layers import Linear


def data(key):
    return np.asarray(jax.random.key_data(key)).tolist()


class Holder(nnx.Module):
    def __init__(self):
        self.rngs = nnx.Rngs(params=0, dropout=1)
        self.inner = [nnx.Rngs(noise=2)]


# -- split_rngs ----------------------------------------------------------------------------------
def test_split_rngs_in_place_matches_flax_and_restores():
    ours, theirs = nnx.Rngs(params=0, dropout=1), fnnx.Rngs(params=0, dropout=1)
    ours.params()
    theirs.params()
    with nnx.split_rngs(ours, splits=4, only="params") as backups:
        their_backups = fnnx.split_rngs(theirs, splits=4, only="params")
        assert len(backups) == 1 and list(backups)[0][0] is ours.params
        assert data(ours.params.key.value) == data(theirs.params.key[...])
        assert ours.params.count.value.tolist() == theirs.params.count[...].tolist() == [0] * 4
        assert ours.dropout.key.shape == ()
    fnnx.restore_rngs(their_backups)
    assert ours.params.key.shape == () and int(ours.params.count.value) == 2
    assert data(ours.params()) == data(theirs.params())


def test_split_rngs_finds_streams_anywhere_and_selects_them():
    h = Holder()
    with nnx.split_rngs(h, splits=(2, 3), only=("params", "noise")):
        assert h.rngs.params.key.shape == (2, 3) and h.inner[0].noise.count.shape == (2, 3)
        assert h.rngs.dropout.key.shape == ()
    with nnx.split_rngs(h, splits=2, only=nnx.Not(nnx.WithTag("dropout"))):
        assert h.rngs.params.key.shape == (2,) and h.rngs.dropout.key.shape == ()
    with nnx.split_rngs(h, splits=2, only=nnx.PathContains("inner")):
        assert h.inner[0].noise.key.shape == (2,) and h.rngs.params.key.shape == ()
    assert int(h.rngs.params.count.value) == 2 and int(h.inner[0].noise.count.value) == 3


def test_split_rngs_squeeze_keeps_one_key():
    rngs = nnx.Rngs(0)
    backups = nnx.split_rngs(rngs, splits=1, squeeze=True)
    assert rngs.default.key.shape == () and rngs.default.count.shape == ()
    assert data(rngs.default.key.value) == data(
        jax.random.split(jax.random.fold_in(jax.random.key(0), 0), 1)[0]
    )
    nnx.restore_rngs(backups)
    assert data(rngs.default.key.value) == data(jax.random.key(0))


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = Linear(2, 3, rngs=rngs)


class FlaxBlock(fnnx.Module):
    def __init__(self, rngs):
        self.linear = fnnx.Linear(2, 3, rngs=rngs)


def test_split_rngs_decorator_with_vmap_builds_the_same_stack_as_flax():
    @nnx.split_rngs(splits=4)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(rngs):
        return Block(rngs)

    @fnnx.split_rngs(splits=4)
    @fnnx.vmap(in_axes=(0,), out_axes=0)
    def create_flax(rngs):
        return FlaxBlock(rngs)

    rngs, theirs = nnx.Rngs(0), fnnx.Rngs(0)
    stack, their_stack = create(rngs), create_flax(theirs)
    assert stack.linear.kernel.shape == (4, 2, 3)
    np.testing.assert_allclose(stack.linear.kernel.value, their_stack.linear.kernel[...])
    assert rngs.default.key.shape == () and int(rngs.default.count.value) == 1


def test_vmap_over_a_split_rngs_argument_builds_a_stack():
    stack = nnx.vmap(lambda r: Block(rngs=r), in_axes=0)(nnx.Rngs(0).split(3))
    assert stack.linear.kernel.shape == (3, 2, 3)
    assert not np.allclose(stack.linear.kernel.value[0], stack.linear.kernel.value[1])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda r: nnx.split_rngs(r, splits=2, squeeze=True),
            ValueError,
            r"split_rngs: squeeze=True needs splits=1, got splits=2\.",
        ),
        (
            lambda r: nnx.split_rngs(r, splits=(2, 0)),
            TypeError,
            r"split_rngs: the number of splits must be a positive int or a tuple of positive "
            r"ints \(a shape\), got \(2, 0\)\.",
        ),
        (
            lambda r: nnx.split_rngs(r, splits=2, only="parms"),
            ValueError,
            r"split_rngs: only='parms' matches none of the Rng streams found: dropout "
            r"\('dropout'\), params \('params'\)\. Name a stream",
        ),
        (
            lambda r: nnx.split_rngs([jnp.ones(2)], splits=2, only="params"),
            ValueError,
            r"split_rngs: only='params' selects Rng streams, but there are none in what was "
            r"given; pass the Module or Rngs that holds them\.",
        ),
        (
            lambda r: nnx.split_rngs(r.split({"params": 2}), splits=2),
            ValueError,
            r"split_rngs: the Rng stream at params \('params'\) already holds a batch of keys of "
            r"shape \(2,\); restore it before changing it again\.",
        ),
        (
            lambda r: nnx.split_rngs(splits=2, only="noise")(lambda rngs: rngs)(r),
            ValueError,
            r"split_rngs: only='noise' matches none",
        ),
    ],
)
def test_split_rngs_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(nnx.Rngs(params=0, dropout=1))


# -- fork_rngs -----------------------------------------------------------------------------------
def test_fork_rngs_matches_flax_and_restores():
    ours, theirs = nnx.Rngs(params=0, dropout=1), fnnx.Rngs(params=0, dropout=1)
    backups = nnx.fork_rngs(ours)
    their_backups = fnnx.fork_rngs(theirs)
    for name in ("params", "dropout"):
        assert data(ours[name].key.value) == data(theirs[name].key[...])
        assert ours[name].count.value.tolist() == theirs[name].count[...].tolist() == 0
    backups.restore()
    fnnx.restore_rngs(their_backups)
    assert data(ours.dropout()) == data(theirs.dropout())


def test_fork_rngs_split_mapping_gives_some_streams_a_batch():
    rngs = nnx.Rngs(params=0, dropout=1, noise=2)
    with nnx.fork_rngs(rngs, split={"params": 3, "dropout": None}):
        assert rngs.params.key.shape == (3,) and rngs.params.count.shape == (3,)
        want = jax.random.split(jax.random.fold_in(jax.random.key(0), 0), 3)
        assert data(rngs.params.key.value) == data(want)
        assert rngs.dropout.key.shape == () and int(rngs.dropout.count.value) == 0
        assert data(rngs.noise.key.value) == data(jax.random.key(2))  # matched no rule
    assert int(rngs.noise.count.value) == 0 and int(rngs.params.count.value) == 1


def test_fork_rngs_decorator_forks_for_the_call_only():
    seen = []

    @nnx.fork_rngs(split={"params": None})
    def draw(rngs):
        seen.append(data(rngs.params.key.value))
        return rngs.params()

    rngs = nnx.Rngs(params=0, dropout=1)
    first, second = draw(rngs), draw(rngs)
    assert data(first) != data(second) and seen[0] == data(jax.random.fold_in(jax.random.key(0), 0))
    assert int(rngs.params.count.value) == 2 and int(rngs.dropout.count.value) == 0


def test_without_an_explicit_selection_no_streams_is_fine():
    assert len(nnx.split_rngs([jnp.ones(2)], splits=2)) == 0
    assert len(nnx.fork_rngs({"x": jnp.ones(2)})) == 0
    assert nnx.split_rngs(splits=3)(lambda x: x * 2)(jnp.ones(1)).tolist() == [2.0]


def test_fork_rngs_errors():
    with pytest.raises(ValueError, match=r"fork_rngs: split=\{'noise': None\} matches none"):
        nnx.fork_rngs(nnx.Rngs(params=0), split={"noise": None})
    with pytest.raises(TypeError, match=r"fork_rngs: the number of splits must be a positive"):
        nnx.fork_rngs(nnx.Rngs(params=0), split=-1)


# -- reseed --------------------------------------------------------------------------------------
def test_reseed_matches_flax():
    ours, theirs = nnx.Rngs(params=0, dropout=1), fnnx.Rngs(params=0, dropout=1)
    ours.dropout()
    theirs.dropout()
    nnx.reseed(ours, dropout=42)
    fnnx.reseed(theirs, dropout=42)
    assert int(ours.dropout.count.value) == 0
    assert data(ours.dropout()) == data(theirs.dropout())
    assert data(ours.params()) == data(theirs.params())


def test_reseed_policies_for_batched_streams():
    rngs = nnx.Rngs(params=0).split(3)
    with pytest.raises(
        ValueError,
        match=r"reseed: the Rng stream at params holds a batch of keys "
        r"of shape \(3,\)\. Pass policy='match_shape'",
    ):
        nnx.reseed(rngs, params=1)
    nnx.reseed(rngs, params=1, policy="match_shape")
    assert rngs.params.key.shape == (3,) and rngs.params.count.shape == (3,)
    want = jax.random.split(jax.random.fold_in(jax.random.key(1), 0), 3)
    assert data(rngs.params.key.value) == data(want)
    nnx.reseed(rngs, params=2, policy=lambda path, key, shape: jax.random.split(key, 5))
    assert rngs.params.key.shape == (5,) and rngs.params.count.shape == (5,)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"policy": "strict", "params": 1},
            r"reseed: policy must be 'scalars_only', "
            r"'match_shape' or a callable",
        ),
        (
            {"dropuot": 1},
            r"reseed: No RngStream named 'dropuot' in Rngs \(streams: "
            r"\['dropout', 'params'\]\)\. Did you mean 'dropout'\?",
        ),
    ],
)
def test_reseed_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nnx.reseed(nnx.Rngs(params=0, dropout=1), **kwargs)


# -- with_rngs, and flax.nnx's tree mode (graph=False / graph_updates=False) ---------------------
def test_with_rngs_returns_a_copy_with_changed_streams_matching_flax():
    ours, theirs = nnx.Rngs(params=0, dropout=1, noise=2), fnnx.Rngs(params=0, dropout=1, noise=2)
    key_before = ours.params.key
    new = nnx.with_rngs(ours, split={"params": 4, ...: (2, 3)})
    expected = fnnx.with_rngs(theirs, split={"params": 4, ...: (2, 3)}, graph=False)
    assert new.params.key.shape == (4,) and new.noise.key.shape == (2, 3)
    assert data(new.params.key.value) == data(expected.params.key[...])
    assert data(new.noise.key.value) == data(expected.noise.key[...])
    assert ours.params.key is key_before and ours.params.key.shape == ()
    assert int(ours.params.count.value) == 1  # the draw came from the original stream


def test_with_rngs_fork_broadcast_and_unmatched_streams():
    rngs = nnx.Rngs(params=0, dropout=1)
    new = nnx.with_rngs(rngs, split={"params": 4}, fork=...)
    assert new.params.key.shape == (4,) and new.dropout.key.shape == ()
    assert data(new.dropout.key.value) != data(rngs.dropout.key.value)
    kept = nnx.with_rngs(rngs, fork="params")
    assert kept.dropout is not rngs.dropout
    assert data(kept.dropout.key.value) == data(rngs.dropout.key.value)
    wide = nnx.with_rngs(rngs, broadcast={"params": 5}, only="params")
    assert wide.params.key.shape == (5,) and wide.dropout.key.shape == ()


def test_with_rngs_on_a_plain_dict_and_as_a_decorator():
    tree = {"a": nnx.RngStream(0, tag="params"), "b": nnx.RngStream(1, tag="dropout")}
    new = nnx.with_rngs(tree, split=4, graph=False)
    assert new["a"].key.shape == new["b"].key.shape == (4,) and tree["a"].key.shape == ()

    @nnx.with_rngs(split=2)
    def shapes(r):
        return r.params.key.shape, r["dropout"].key.shape

    rngs = nnx.Rngs(params=0, dropout=1)
    assert shapes(rngs) == ((2,), (2,)) and rngs.params.key.shape == ()


def test_with_rngs_two_specific_rules_for_one_stream_raise():
    with pytest.raises(
        ValueError, match=r"with_rngs: the Rng stream at params \('params'\) matches multiple rules"
    ):
        nnx.with_rngs(nnx.Rngs(params=0), split={"params": 4}, fork="params")
    with pytest.raises(TypeError, match=r"with_rngs\(split=\.\.\.\): the number of splits"):
        nnx.with_rngs(nnx.Rngs(params=0), split=-1)


@pytest.mark.parametrize("mode", [{"graph": False}, {"graph_updates": False}])
def test_split_and_fork_rngs_in_tree_mode_return_copies(mode):
    rngs = nnx.Rngs(params=0, dropout=1)
    split = nnx.split_rngs(rngs, splits=5, **mode)
    assert split.params.key.shape == split["dropout"].key.shape == (5,)
    assert rngs.params.key.shape == () and isinstance(split, nnx.Rngs)
    one = nnx.split_rngs(rngs, splits=1, squeeze=True, only="params", **mode)
    assert one.params.key.shape == () and data(one.params.key.value) != data(rngs.params.key.value)
    forked = nnx.fork_rngs(rngs, split={"params": 2, ...: None}, **mode)
    assert forked.params.key.shape == (2,) and forked.dropout.key.shape == ()
    assert data(forked.dropout.key.value) != data(rngs.dropout.key.value)


def test_reseed_accepts_flax_graph_keyword():
    rngs = nnx.Rngs(dropout=1)
    first = data(rngs.dropout())
    nnx.reseed(rngs, graph=False, dropout=1)
    assert data(rngs.dropout.key.value) == first  # the first draw of Rngs(dropout=1)
    assert int(rngs.dropout.count.value) == 0
