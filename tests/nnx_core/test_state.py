"""State: nested mapping, pytree, flat view, filter/split/merge, pure dicts, repr, copies."""

from __future__ import annotations

import copy
import json
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .corpus import CORPUS, LEAF_COUNTS, assert_same_values, kinds


def make_state() -> nnx.State:
    return nnx.State(
        {
            "enc": {
                "w": nnx.Param(np.ones((2, 2), np.float32)),
                "mean": nnx.BatchStat(np.zeros(2)),
            },
            "layers": {0: nnx.Param(np.full(1, 3.0)), 1: np.arange(2)},
            "n": nnx.Variable(np.array(5)),
        }
    )


# -- mapping --------------------------------------------------------------------------------------
def test_nested_mapping_access():
    s = make_state()
    assert isinstance(s["enc"], nnx.State) and s.enc is s["enc"]
    assert s.enc.w is s["enc"]["w"]
    assert list(s) == ["enc", "layers", "n"] and len(s) == 3 and "n" in s
    assert list(s["layers"]) == [0, 1]
    s["extra"] = {"deep": {"x": 1}}  # plain dicts become States
    s.more = {"y": 2}
    assert isinstance(s["extra"]["deep"], nnx.State) and isinstance(s["more"], nnx.State)
    del s["extra"]
    assert "extra" not in s


def test_equality_and_unhashability():
    a = nnx.State({"x": {"y": 1}})
    assert a == nnx.State({"x": nnx.State({"y": 1})}) and a != nnx.State({"x": {"y": 2}})
    assert a == {"x": {"y": 1}} and a != {"x": {"y": 2}}  # a plain mapping, as in flax.nnx
    assert nnx.State({}) == {} and (a == [1]) is False
    v = nnx.Param(jnp.ones(2))
    assert nnx.State({"v": v}) == {"v": nnx.Param(jnp.ones(2))}
    assert nnx.State({"v": v}) != {"v": nnx.BatchStat(jnp.ones(2))}
    assert nnx.State({"v": v}) != {"v": nnx.Param(jnp.ones(2), note=1)}
    assert nnx.State() == nnx.State({})
    with pytest.raises(TypeError, match="unhashable type: 'State'"):
        hash(a)


def test_missing_attribute_lists_the_entries():
    with pytest.raises(
        AttributeError,
        match=r"State has no entry 'nope'; entries: "
        r"\['enc', 'layers', 'n'\]",
    ):
        _ = make_state().nope


def test_dunder_lookups_are_not_entries():
    with pytest.raises(AttributeError, match="^__nope__$"):
        _ = nnx.State({"__nope__": 1}).__nope__


def test_state_from_pairs():
    assert nnx.State([("a", 1), ("b", {"c": 2})]) == nnx.State({"a": 1, "b": {"c": 2}})


# -- pytree ---------------------------------------------------------------------------------------
def test_one_leaf_per_variable_value_with_key_paths():
    s = make_state()
    leaves = jax.tree_util.tree_leaves_with_path(s)
    assert [jax.tree_util.keystr(p) for p, _ in leaves] == [
        "['enc']['mean'].value",
        "['enc']['w'].value",
        "['layers'][0].value",
        "['layers'][1]",
        "['n'].value",
    ]


def test_tree_map_builds_new_variables_and_leaves_the_original_alone():
    s = make_state()
    doubled = jax.tree.map(lambda x: x * 2, s)
    assert isinstance(doubled, nnx.State) and type(doubled.enc.w) is nnx.Param
    assert doubled.enc.w is not s.enc.w
    assert doubled.n.value == 10 and s.n.value == 5


def test_a_state_passes_through_jax_jit():
    out = jax.jit(lambda st: jax.tree.map(lambda x: x + 1, st))(make_state())
    assert isinstance(out, nnx.State) and type(out.enc.mean) is nnx.BatchStat
    assert out.layers[1].tolist() == [1, 2]


@pytest.mark.parametrize("name", CORPUS)
def test_state_of_the_corpus_has_one_leaf_per_value(name):
    assert len(jax.tree_util.tree_leaves(nnx.state(CORPUS[name]()))) == LEAF_COUNTS[name]


# -- flat view ------------------------------------------------------------------------------------
def test_flat_state_is_sorted_depth_first_and_round_trips():
    s = make_state()
    flat = s.flat_state()
    assert [p for p, _ in flat] == [
        ("enc", "mean"),
        ("enc", "w"),
        ("layers", 0),
        ("layers", 1),
        ("n",),
    ]
    assert flat[1][1] is s.enc.w
    assert nnx.State.from_flat_state(flat) == s
    assert nnx.State.from_flat_state(dict(flat).items()) == s


def test_mixed_key_types_sort_ints_first():
    s = nnx.State({"b": 1, 1: 2, "a": 3, 0: 4})
    assert [p for p, _ in s.flat_state()] == [(0,), (1,), ("a",), ("b",)]
    assert jax.tree_util.tree_leaves(s) == [4, 2, 3, 1]


@pytest.mark.parametrize(
    "items, match",
    [
        ([((), 1)], r"A flat-state path must have at least one key, got \(\)\."),
        (
            [(("a",), 1), (("a", "b"), 2)],
            r"Flat state has a leaf at a and also entries below it \(a\.b\)\.",
        ),
        ([(("a", "b"), 2), (("a",), 1)], r"Flat state has a leaf at a and also entries below it\."),
        ([(("a", 0), 1), (("a", 0), 2)], r"Flat state has two entries for a\[0\]\."),
    ],
)
def test_from_flat_state_errors(items, match):
    with pytest.raises(ValueError, match=match):
        nnx.State.from_flat_state(items)


# -- filter / split / merge -----------------------------------------------------------------------
def test_filter_split_and_merge():
    s = make_state()
    params = s.filter(nnx.Param)
    assert [p for p, _ in params.flat_state()] == [("enc", "w"), ("layers", 0)]
    params2, stats = s.filter(nnx.Param, nnx.BatchStat)
    assert params2 == params and list(stats.enc) == ["mean"]
    assert s.filter() == s and s.split() == s
    p, rest = s.split(nnx.Param, ...)
    assert nnx.State.merge(p, rest) == s
    assert p.enc.w is s.enc.w  # no copies


def test_merge_later_states_win():
    a = nnx.State({"x": 1, "y": {"z": 2}})
    b = nnx.State({"y": {"z": 3}, "w": 4})
    assert nnx.State.merge(a, b) == nnx.State({"x": 1, "y": {"z": 3}, "w": 4})
    assert nnx.State.merge(a) == a


def test_merge_of_a_leaf_and_a_subtree_at_one_path_raises():
    with pytest.raises(ValueError, match="Flat state has a leaf at a and also entries below it"):
        nnx.State.merge(nnx.State({"a": {"b": 1}}), nnx.State({"a": 2}))


# -- pure dicts -----------------------------------------------------------------------------------
def test_to_pure_dict_unwraps_variables_and_keeps_int_keys():
    pure = make_state().to_pure_dict()
    assert type(pure) is dict and type(pure["enc"]) is dict
    assert list(pure["layers"]) == [0, 1]
    assert pure["n"] == 5 and isinstance(pure["enc"]["w"], np.ndarray)


def test_replace_by_pure_dict_keeps_kinds_and_metadata():
    s = nnx.State({"w": nnx.Param(np.ones(2), sharding_names=("x",)), "l": {0: np.zeros(1)}})
    new = s.replace_by_pure_dict({"w": np.zeros(2), "l": {0: np.ones(1)}})
    assert type(new.w) is nnx.Param and new.w.sharding_names == ("x",)
    assert new.w.value.tolist() == [0.0, 0.0] and new.l[0].tolist() == [1.0]
    assert s.w.value.tolist() == [1.0, 1.0]  # the original is unchanged


def test_replace_by_pure_dict_accepts_string_keys_after_a_json_round_trip():
    s = make_state()
    text = json.dumps(jax.tree.map(lambda x: np.asarray(x).tolist(), s.to_pure_dict()))
    loaded = json.loads(text)
    assert list(loaded["layers"]) == ["0", "1"]
    new = s.replace_by_pure_dict(loaded)
    assert list(new.layers) == [0, 1] and new.layers[0].value == [3.0]


@pytest.mark.parametrize(
    "pure, match",
    [
        (
            {"enc": {"w": 1}},
            r"Pure dict lacks entries for: enc\.mean, layers\[0\], layers\[1\], n\.",
        ),
        (
            {"enc": {"w": 1, "mean": 2, "extra": 3}, "layers": {0: 1, 1: 2}, "n": 3},
            r"Pure dict has an entry enc\.extra that the state lacks\.",
        ),
        (
            {"enc": {"w": 1, "mean": 2}, "layers": {"7": 1, 1: 2}, "n": 3},
            r"Pure dict has an entry layers\.7 that the state lacks\.",
        ),
    ],
)
def test_replace_by_pure_dict_errors(pure, match):
    with pytest.raises(KeyError, match=match):
        make_state().replace_by_pure_dict(pure)


# -- repr and copies ------------------------------------------------------------------------------
def test_repr():
    assert (
        repr(make_state())
        == """State({
  'enc': State({
    'mean': BatchStat(float64[2]),
    'w': Param(float32[2,2]),
  }),
  'layers': State({
    0: Param(float64[1]),
    1: int64[2],
  }),
  'n': Variable(int64[]=5),
})"""
    )
    assert repr(nnx.State()) == "State({})"


@pytest.mark.parametrize(
    "copier",
    [copy.copy, copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_copies(copier):
    s = make_state()
    c = copier(s)
    assert isinstance(c, nnx.State) and list(c) == list(s)
    assert [p for p, _ in c.flat_state()] == [p for p, _ in s.flat_state()]
    assert type(c.enc.w) is nnx.Param


# -- round trips of the corpus --------------------------------------------------------------------
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_round_trips_through_flat_state(name):
    model = CORPUS[name]()
    graphdef, state = nnx.split(model)
    rebuilt = nnx.State.from_flat_state(state.flat_state())
    assert rebuilt == state
    other = nnx.merge(graphdef, rebuilt)
    assert nnx.graphdef(other) == graphdef
    assert_same_values(other, model)
    assert kinds(other) == kinds(model)


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_round_trips_through_pure_dicts(name):
    model = CORPUS[name]()
    graphdef, state = nnx.split(model)
    pure = state.to_pure_dict()
    fresh = nnx.clone(model)
    nnx.update(fresh, jax.tree.map(jnp.zeros_like, nnx.state(fresh)))
    nnx.update(fresh, nnx.state(fresh).replace_by_pure_dict(pure))
    assert_same_values(fresh, model)
    merged = nnx.merge(graphdef, pure)  # raw values get new Variables of the recorded kinds
    assert kinds(merged) == kinds(model) and nnx.graphdef(merged) == graphdef
    assert_same_values(merged, model)
