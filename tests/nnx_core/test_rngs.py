"""Rngs: streams, the default fallback, keys per call, counts as state, seeds and their errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx


def data(key):
    return jax.random.key_data(key).tolist()


def expected(seed, count):
    return data(jax.random.fold_in(jax.random.key(seed), count))


def test_a_positional_seed_is_the_default_stream():
    rngs = nnx.Rngs(0)
    assert list(rngs.streams()) == ["default"] and "default" in rngs
    assert data(rngs.params()) == expected(0, 0)  # no params stream: the default one
    assert data(rngs["dropout"]()) == expected(0, 1)
    assert data(rngs()) == expected(0, 2)
    assert int(rngs.default.count.value) == 3


def test_named_streams_are_independent():
    rngs = nnx.Rngs(params=0, dropout=1)
    assert sorted(rngs.streams()) == ["dropout", "params"] and "default" not in rngs
    assert data(rngs.params()) == expected(0, 0)
    assert data(rngs["dropout"]()) == expected(1, 0)
    assert data(rngs.params()) == expected(0, 1)
    assert int(rngs.params.count.value) == 2 and int(rngs.dropout.count.value) == 1


def test_named_streams_win_over_the_default():
    rngs = nnx.Rngs(5, dropout=1)
    assert data(rngs.dropout()) == expected(1, 0) and data(rngs.noise()) == expected(5, 0)


def test_keys_differ_per_call_and_are_reproducible():
    a, b = nnx.Rngs(3), nnx.Rngs(3)
    ka = [data(a.params()) for _ in range(3)]
    assert len({tuple(k) for k in ka}) == 3
    assert ka == [data(b.params()) for _ in range(3)]


def test_stream_split_draws_once_into_a_new_stream_of_keys():
    stream = nnx.Rngs(0).default
    split = stream.split(4)
    assert isinstance(split, nnx.RngStream) and split.tag == "default"
    assert split.key.shape == (4,) and split.count.value.tolist() == [0, 0, 0, 0]
    assert int(stream.count.value) == 1
    want = jax.random.split(jax.random.fold_in(jax.random.key(0), 0), 4)
    assert data(split.key.value) == data(want)
    assert stream.split((2, 3)).count.shape == (2, 3)


def test_stream_fork_is_a_new_stream_seeded_by_one_draw():
    stream = nnx.Rngs(params=0).params
    stream()
    forked = stream.fork()
    assert forked is not stream and int(forked.count.value) == 0 and int(stream.count.value) == 2
    assert data(forked.key.value) == expected(0, 1)
    assert data(forked()) == data(jax.random.fold_in(jax.random.fold_in(jax.random.key(0), 1), 0))


def test_rngs_fork_and_split_match_flax():
    import flax.nnx as fnnx

    ours, theirs = nnx.Rngs(params=0, dropout=1), fnnx.Rngs(params=0, dropout=1)
    for a, b in ((ours.fork(), theirs.fork()), (ours.split(3), theirs.split(3))):
        for name in ("params", "dropout"):
            assert data(a[name].key.value) == data(b[name].key[...])
            assert a[name].count.value.tolist() == b[name].count[...].tolist()
    assert int(ours.params.count.value) == int(theirs.params.count[...]) == 2


def test_rngs_split_per_filter_keeps_unmatched_streams_shared():
    rngs = nnx.Rngs(params=0, dropout=1, noise=2)
    out = rngs.split({"params": 4, nnx.Not(nnx.WithTag("dropout")): (2, 3)})
    assert out.params.key.shape == (4,) and out.noise.key.shape == (2, 3)
    assert out.dropout is rngs.dropout and int(rngs.dropout.count.value) == 0
    assert out.split({"dropout": None}).params is out.params


def test_rngs_fork_is_not_a_stream_lookup():
    rngs = nnx.Rngs(0)
    forked = rngs.fork()
    assert isinstance(forked, nnx.Rngs) and forked is not rngs and list(forked) == ["default"]
    assert len(forked) == 1 and [name for name, _ in forked.items()] == ["default"]
    assert data(forked.default.key.value) == expected(0, 0)


def test_counts_have_the_shape_of_the_keys():
    rngs = nnx.Rngs(jax.random.split(jax.random.key(0), 3), params=nnx.Rngs(5).default)
    assert rngs.default.count.shape == (3,) and rngs.params.count.shape == ()
    assert data(rngs.params()) == expected(5, 0)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda r: r.params.split(0),
            TypeError,
            r"RngStream\.split: the number of splits must "
            r"be a positive int or a tuple of positive ints",
        ),
        (lambda r: r.split({"params": "x"}), TypeError, r"got 'x'"),
        (
            lambda r: r.split(3).params(),
            ValueError,
            r"Rng stream 'params' holds a batch of keys of shape \(3,\), so it cannot hand out one "
            r"key\. Draw from it inside nnx_core\.vmap",
        ),
        (
            lambda r: r.params((2,)),
            TypeError,
            r"Rng stream 'params' takes no arguments: calling it returns a new key\. For random "
            r"values use a method, e\.g\. rngs\.params\.normal\(shape\), or pass the key to "
            r"jax\.random: jax\.random\.normal\(rngs\.params\(\), shape\)",
        ),
    ],
)
def test_stream_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(nnx.Rngs(params=0))


@pytest.mark.parametrize("name", ["fork", "split", "streams", "train", "_hidden"])
def test_stream_names_that_are_rngs_attributes_are_rejected(name):
    with pytest.raises(
        ValueError,
        match=rf"Rngs cannot have a stream named '{name}': that name "
        r"is (an attribute of Rngs|private)\. Choose another name",
    ):
        nnx.Rngs(**{name: 0})


def test_an_unknown_stream_suggests_close_names():
    with pytest.raises(
        AttributeError,
        match=r"No RngStream named 'parms' in Rngs .* Did you mean "
        r"'params'\? Create it",
    ):
        nnx.Rngs(params=0, dropout=1)["parms"]


def test_counts_and_keys_are_their_own_variable_kinds_and_state():
    rngs = nnx.Rngs(0, dropout=1)
    counts = nnx.state(rngs, nnx.RngCount)
    assert [nnx.format_path(p) for p, _ in counts.flat_state()] == [
        "default.count",
        "dropout.count",
    ]
    assert counts.default.count.tag == "default" and counts.default.count.dtype == jnp.uint32
    keys = nnx.state(rngs, "RngKey")
    assert [nnx.format_path(p) for p, _ in keys.flat_state()] == ["default.key", "dropout.key"]
    assert (
        nnx.variable_name(nnx.RngCount) == "RngCount" and nnx.variable_name(nnx.RngKey) == "RngKey"
    )
    assert not isinstance(rngs.default.count, nnx.Param)


def test_counts_round_trip_through_split_merge_and_update():
    rngs = nnx.Rngs(0)
    rngs.params()
    copy = nnx.merge(*nnx.split(nnx.clone(rngs)))
    assert int(copy.default.count.value) == 1
    assert data(copy.params()) == data(rngs.params())
    nnx.update(rngs, {"default": {"count": jnp.zeros((), jnp.uint32)}})
    assert data(rngs.params()) == expected(0, 0)


def test_counts_advance_through_nnx_jit():
    rngs = nnx.Rngs(0)
    draw = nnx.jit(lambda r: r.params())
    first, second = draw(rngs), draw(rngs)
    assert data(first) == expected(0, 0) and data(second) == expected(0, 1)
    assert int(rngs.default.count.value) == 2


def test_repr():
    assert (
        repr(nnx.Rngs(params=0))
        == """Rngs( # RngState: 2 (12 B)
  params=RngStream(
    count=RngCount(uint32[]=0, tag='params'),
    key=RngKey(key<fry>[], tag='params'),
    tag='params',
  ),
)"""
    )


@pytest.mark.parametrize(
    "seed, seed_for",
    [
        (jax.random.key(7), 7),
        (jax.random.PRNGKey(7), 7),  # raw uint32[2] key data
        (np.int32(7), 7),
        (jnp.array(7), 7),
        (jnp.uint32(7), 7),
    ],
    ids=["typed key", "raw key", "numpy int", "jax int", "uint32 scalar"],
)
def test_seeds_may_be_keys_or_integer_scalars(seed, seed_for):
    assert data(nnx.Rngs(seed).params()) == expected(seed_for, 0)
    assert data(nnx.Rngs(noise=seed).noise()) == expected(seed_for, 0)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: nnx.Rngs(),
            TypeError,
            r"Rngs needs at least one seed, e\.g\. Rngs\(0\) or "
            r"Rngs\(params=0\)\.",
        ),
        (lambda: nnx.Rngs(0, default=1), TypeError, r"Rngs got the default seed twice"),
        (
            lambda: nnx.Rngs("0"),
            TypeError,
            r"Rng stream 'default' needs an int seed or a PRNG "
            r"key, got str\. Use e\.g\. Rngs\(default=0\)\.",
        ),
        (lambda: nnx.Rngs(1.5), TypeError, r"needs an int seed or a PRNG key, got float\."),
        (lambda: nnx.Rngs(True), TypeError, r"got bool\."),
        (
            lambda: nnx.Rngs(params=None),
            TypeError,
            r"Rng stream 'params' .* got NoneType\. "
            r"Use e\.g\. Rngs\(params=0\)\.",
        ),
        (
            lambda: nnx.Rngs(dropout=jnp.ones(3)),
            TypeError,
            r"Rng stream 'dropout' needs an int seed or a PRNG key, got ArrayImpl float32\[3\]\.",
        ),
        (
            lambda: nnx.Rngs(jnp.zeros((2, 3), jnp.uint32)),
            TypeError,
            r"got ArrayImpl uint32\[2, 3\]",
        ),
    ],
)
def test_bad_seeds(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("get", [lambda r: r.noise, lambda r: r["noise"]], ids=["attr", "item"])
def test_an_unknown_stream_without_default_raises(get):
    rngs = nnx.Rngs(params=0, dropout=1)
    with pytest.raises(
        AttributeError,
        match=r"No RngStream named 'noise' in Rngs and no default stream "
        r"\(streams: \['dropout', 'params'\]\)\. Create it "
        r"with Rngs\(noise=seed, \.\.\.\) or give a default "
        r"seed: Rngs\(0, \.\.\.\)\.",
    ):
        get(rngs)


def test_dunder_lookups_are_not_streams():
    rngs = nnx.Rngs(0)
    assert not hasattr(rngs, "__array__") and "x" not in rngs
    with pytest.raises(AttributeError, match="^__nope__$"):
        getattr(rngs, "__nope__")  # noqa: B009


# -- flax.nnx's random shortcuts, broadcast and fork(split=) ------------------------------------
def _data(key):
    return np.asarray(jax.random.key_data(key)).tolist()


def test_random_methods_draw_a_key_and_match_flax():
    import flax.nnx as fnnx

    ours, theirs = nnx.Rngs(0, params=1), fnnx.Rngs(0, params=1)
    np.testing.assert_array_equal(ours.normal((2, 3)), theirs.normal((2, 3)))
    np.testing.assert_array_equal(ours.params.uniform((4,)), theirs.params.uniform((4,)))
    np.testing.assert_array_equal(
        ours.params.bernoulli(0.5, (8,)), theirs.params.bernoulli(0.5, (8,))
    )
    np.testing.assert_array_equal(
        ours.params.lecun_uniform()((2, 3)), theirs.params.lecun_uniform()((2, 3))
    )
    expected = jax.random.normal(jax.random.fold_in(jax.random.key(0), 1), (2,))
    np.testing.assert_array_equal(ours.default.normal((2,)), expected)
    assert int(ours.default.count.value) == 2 and int(ours.params.count.value) == 3


def test_broadcast_repeats_one_draw_and_matches_flax():
    import flax.nnx as fnnx

    ours, theirs = nnx.Rngs(params=1, dropout=2), fnnx.Rngs(params=1, dropout=2)
    b, fb = (
        ours.broadcast({"params": 5, "dropout": None}),
        theirs.broadcast({"params": 5, "dropout": None}),
    )
    assert b.params.key.shape == b.params.count.shape == (5,) and b.dropout.key.shape == ()
    assert b.dropout is ours.dropout
    keys = _data(b.params.key.value)
    assert keys == [keys[0]] * 5 and keys == _data(fb.params.key[...])
    assert ours.params.broadcast((2, 3)).key.shape == (2, 3)
    with pytest.raises(TypeError, match=r"RngStream\.broadcast: the number of splits must be"):
        ours.params.broadcast(0)


def test_fork_with_split_splits_the_matched_streams_and_forks_the_rest():
    ours = nnx.Rngs(params=0, dropout=1)
    forked = ours.fork(split={"params": 3})
    assert forked.params.key.shape == (3,) and forked.dropout.key.shape == ()
    assert forked.dropout is not ours.dropout and int(ours.dropout.count.value) == 1
    assert ours.params.fork(split=(2, 2)).key.shape == (2, 2)
    assert nnx.Rngs(0).fork(split=4).default.key.shape == (4,)


def test_a_missing_stream_error_contains_flax_phrase():
    with pytest.raises(AttributeError, match=r"No RngStream named 'dropout' in Rngs"):
        _ = nnx.Rngs(some_name=0).dropout


def test_rng_state_is_the_base_of_key_and_count_as_in_flax():
    import flax.nnx as fnnx

    assert issubclass(nnx.RngKey, nnx.RngState) and issubclass(nnx.RngCount, nnx.RngState)
    ours = nnx.state(nnx.Rngs(0, dropout=1), nnx.RngState)
    theirs = fnnx.state(fnnx.Rngs(0, dropout=1), fnnx.RngState)
    assert [p for p, _ in ours.flat_state()] == [p for p, _ in fnnx.to_flat_state(theirs)]
