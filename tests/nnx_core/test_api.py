"""The graph/state API: split, merge, state, graphdef, update, clone, pop, iter_graph."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .corpus import (
    CORPUS,
    SHARING,
    Cycle,
    Leaf,
    Nested,
    SharedSub,
    SharedVar,
    assert_same_values,
    kinds,
)


def paths(state):
    return [nnx.format_path(p) for p, _ in state.flat_state()]


# -- the contract's seed example ------------------------------------------------------------------
SEED = """
import jax
import jax.numpy as jnp
import nnx_core as nnx

class BatchStat(nnx.Variable): pass
class MultiState(nnx.Module):
    def __init__(self, in_features, hidden, rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (in_features, hidden)) * 0.1)
        self.bias = nnx.Param(jnp.zeros((hidden,)))
        self.running_mean = BatchStat(jnp.zeros((hidden,)))
        self.running_var = BatchStat(jnp.ones((hidden,)))
        self.step_count = nnx.Variable(jnp.array(0.0))
        self.cache = nnx.Cache(jnp.zeros((4, hidden)))
m = MultiState(3, 5, rngs=nnx.Rngs(0))
counts = [
    len(jax.tree_util.tree_leaves(nnx.state(m))),                 # 6
    len(jax.tree_util.tree_leaves(nnx.state(m, nnx.Param))),      # 2
    len(jax.tree_util.tree_leaves(nnx.state(m, BatchStat))),      # 2
]
plain = nnx.All(nnx.Variable, nnx.Not(nnx.Param), nnx.Not(BatchStat), nnx.Not(nnx.Cache))
counts.append(len(jax.tree_util.tree_leaves(nnx.state(m, plain))))          # 1
"""


def test_the_seed_example_runs_unchanged():
    namespace: dict = {"__name__": "seed_example"}
    exec(compile(SEED, "<seed example>", "exec"), namespace)  # noqa: S102 - the contract's text
    assert namespace["counts"] == [6, 2, 2, 1]


# -- split / merge --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_round_trips_through_split_and_merge(name):
    model = CORPUS[name]()
    graphdef, state = nnx.split(model)
    merged = nnx.merge(graphdef, state)
    assert type(merged) is type(model) and merged is not model
    assert nnx.graphdef(merged) == graphdef
    assert_same_values(merged, model)
    assert kinds(merged) == kinds(model)
    SHARING[name](merged)


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_round_trips_through_split_with_filters(name):
    model = CORPUS[name]()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    merged = nnx.merge(graphdef, rest, params)  # the order of the states does not matter
    assert_same_values(merged, model)
    SHARING[name](merged)


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_clone_is_independent(name):
    model = CORPUS[name]()
    clone = nnx.clone(model)
    assert nnx.graphdef(clone) == nnx.graphdef(model)
    assert_same_values(clone, model)
    SHARING[name](clone)
    ours = {id(v) for _, v in nnx.state(model).flat_state() if isinstance(v, nnx.Variable)}
    assert not ours & {id(v) for _, v in nnx.state(clone).flat_state()}


def test_states_hold_the_model_s_own_variables():
    m = Leaf(2)
    _, state = nnx.split(m)
    assert state["w"] is m.w and nnx.state(m)["w"] is m.w
    state["w"].value = jnp.ones(2) * 9
    assert m.w.value.tolist() == [9.0, 9.0]
    merged = nnx.merge(*nnx.split(m))
    assert merged.w is m.w  # merge uses the Variables it is given


def test_merge_wraps_raw_arrays_in_variables_of_the_recorded_kind():
    m = SharedVar()
    graphdef, state = nnx.split(m)
    merged = nnx.merge(graphdef, jax.tree.map(lambda x: x + 1, state.to_pure_dict()))
    assert type(merged.encoder.embedding) is nnx.Param
    assert merged.encoder.embedding is merged.decoder.embedding
    assert merged.encoder.embedding.sharding_names == ("in", "out")
    assert merged.encoder.embedding.value.tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_merge_accepts_plain_mappings():
    graphdef, _ = nnx.split(Leaf(2))
    assert nnx.merge(graphdef, {"w": jnp.zeros(2)}).w.value.tolist() == [0.0, 0.0]


def test_shared_submodule_appears_once_in_the_state():
    m = SharedSub()
    assert paths(nnx.state(m)) == ["a.w"]
    assert list(nnx.iter_graph(m))[1][1] is m.a


def test_cycles_survive_split_merge():
    m = Cycle()
    merged = nnx.merge(*nnx.split(m))
    assert merged.me is merged and merged.parent.child.parent is merged.parent
    assert "Cycle(...)" in repr(merged)


class Fussy(nnx.Module):
    built = 0

    def __init__(self, allow=False):
        if not allow:
            raise RuntimeError("__init__ must not be called by merge")
        Fussy.built += 1
        self.w = nnx.Param(jnp.ones(1))
        self.children_ = [Leaf(1)]


def test_merge_and_clone_never_call_init():
    m = Fussy(allow=True)
    merged = nnx.merge(*nnx.split(m))
    cloned = nnx.clone(m)
    assert type(merged) is Fussy and type(cloned) is Fussy and Fussy.built == 1
    assert merged.children_[0].w.value.tolist() == [0.0]


def test_static_values_ride_in_the_graphdef():
    m = Nested()
    merged = nnx.merge(*nnx.split(m))
    assert merged.name == "nested" and merged.activation is None
    assert merged.layers[2] == "static-in-list" and merged.pair.second == "label"


def test_unhashable_static_values_are_kept_by_identity():
    m = Leaf(1)
    m.config = {"sizes": {1, 2}}  # a set inside a dict: unhashable static value
    merged = nnx.merge(*nnx.split(m))
    assert merged.config["sizes"] is m.config["sizes"]


@pytest.mark.parametrize(
    "root", [[nnx.Param(jnp.ones(1))], {"a": nnx.Param(jnp.ones(1))}, (nnx.Param(jnp.ones(1)), 2)]
)
def test_plain_containers_are_valid_roots(root):
    graphdef, state = nnx.split(root)
    merged = nnx.merge(graphdef, state)
    assert type(merged) is type(root)
    assert_same_values(merged, root)


@pytest.mark.parametrize(
    "root, name",
    [(nnx.Param(jnp.ones(1)), "Param"), (jnp.ones(1), "ArrayImpl"), (np.ones(1), "ndarray")],
)
@pytest.mark.parametrize("api", [nnx.split, nnx.state, nnx.graphdef, nnx.clone])
def test_a_bare_variable_or_array_is_not_a_graph(root, name, api):
    with pytest.raises(
        TypeError,
        match=rf"expects a graph node .*got a bare {name}, which has "
        r"no path inside a graph",
    ):
        api(root)


@pytest.mark.parametrize(
    "states, error, match",
    [
        (
            (),
            ValueError,
            r"merge: the states do not match the GraphDef\. Missing: w\. Pass every "
            r"State returned by split",
        ),
        (({"w": jnp.ones(2), "x": jnp.ones(1)},), ValueError, r"Unexpected: x\."),
        (({"w": {"deep": jnp.ones(2)}},), ValueError, r"Missing: w\. Unexpected: w\.deep\."),
    ],
)
def test_merge_errors(states, error, match):
    graphdef, _ = nnx.split(Leaf(2))
    with pytest.raises(error, match=match):
        nnx.merge(graphdef, *states)


def test_merge_needs_a_graphdef_first():
    with pytest.raises(TypeError, match="merge expects a GraphDef first .*got State"):
        nnx.merge(nnx.state(Leaf(1)), nnx.state(Leaf(1)))


# -- state / graphdef -----------------------------------------------------------------------------
def test_state_with_filters():
    m = Nested()
    assert paths(nnx.state(m, nnx.Cache)) == ["blocks.a_first[1]"]
    caches, stats = nnx.state(m, nnx.Cache, nnx.BatchStat)
    assert paths(caches) == ["blocks.a_first[1]"] and paths(stats) == ["layers[1][1].deep"]
    assert nnx.state(m, nnx.Intermediate) == nnx.State({})


def test_graphdef_matches_split():
    m = Nested()
    assert nnx.graphdef(m) == nnx.split(m)[0]


# -- update ---------------------------------------------------------------------------------------
def test_update_writes_values_into_the_existing_variables():
    m = Nested()
    w = m.layers[0].w
    new = jax.tree.map(lambda x: x + 10, nnx.state(m, nnx.Param))
    nnx.update(m, new)
    assert m.layers[0].w is w and w.value.tolist() == [10.0]
    assert m.pair.first.value.tolist() == [15.0, 15.0]


def test_update_accepts_several_states_and_pure_dicts():
    m = Leaf(2)
    m.raw = jnp.zeros(1)
    nnx.update(m, {"w": jnp.ones(2)}, nnx.State({"raw": jnp.ones(1) * 3}))
    assert m.w.value.tolist() == [1.0, 1.0] and m.raw.tolist() == [3.0]


def test_update_through_a_shared_variable_and_a_cycle():
    m = Cycle()
    nnx.update(m, {"parent": {"child": {"v": jnp.ones(1) * 2}}})
    assert m.parent.child.v.value.tolist() == [2.0]


def test_update_writes_raw_arrays_in_lists_and_dicts():
    m = CORPUS["raw_arrays"]()
    nnx.update(m, jax.tree.map(lambda x: x * 0 + 7, nnx.state(m)))
    assert m.in_list[0].tolist() == [7.0, 7.0] and m.in_dict["x"].tolist() == [[7.0, 7.0]]
    assert m.jax_array.tolist() == [7.0, 7.0, 7.0]


def test_update_with_a_traced_value_into_a_model_from_outside_the_trace_raises():
    m = Leaf(2)
    nnx.update(m, {"w": jnp.ones(2)})  # a concrete array first: the fast path knows its type

    @jax.jit
    def leak(x):
        nnx.update(m, {"w": x})
        return x

    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        leak(jnp.zeros(2))
    assert m.w.value.tolist() == [1.0, 1.0]


def test_update_with_a_traced_value_inside_the_models_own_trace():
    @jax.jit
    def inside(x):
        m = Leaf(2)
        nnx.update(m, {"w": nnx.Param(x * 2)})
        return m.w.value

    assert inside(jnp.ones(2)).tolist() == [2.0, 2.0]


def test_update_an_unknown_path_raises():
    with pytest.raises(
        KeyError,
        match=r"update: nope does not exist in Leaf\. Known paths "
        r"include: w\.",
    ):
        nnx.update(Leaf(1), {"nope": jnp.ones(1)})


def test_update_into_a_tuple_raises():
    m = Nested()
    m.tup = (jnp.zeros(1),)
    with pytest.raises(TypeError, match=r"Cannot write \[0\] back into a tuple"):
        nnx.update(m, {"tup": {0: jnp.ones(1)}})


# -- pop ------------------------------------------------------------------------------------------
class Sown(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(1))
        self.seen = nnx.Intermediate((1,))
        self.items = [nnx.Intermediate(0), nnx.Param(jnp.ones(1)), nnx.Intermediate(2)]
        self.by_key = {
            0: nnx.Intermediate(0),
            "a": nnx.Intermediate(1),
            "p": nnx.Param(jnp.ones(1)),
        }


def test_pop_removes_and_returns_the_matching_variables():
    m = Sown()
    popped = nnx.pop(m, nnx.Intermediate)
    assert paths(popped) == ["by_key[0]", "by_key.a", "items[0]", "items[2]", "seen"]
    assert "seen" not in vars(m) and list(m.by_key) == ["p"]
    assert len(m.items) == 1 and type(m.items[0]) is nnx.Param
    assert paths(nnx.state(m)) == ["by_key.p", "items[0]", "w"]


def test_pop_with_several_filters():
    m = Sown()
    inter, params = nnx.pop(m, nnx.Intermediate, nnx.Param)
    assert paths(params) == ["by_key.p", "items[1]", "w"]
    assert nnx.state(m) == nnx.State({}) and m.items == [] and m.by_key == {}


def test_pop_needs_a_filter():
    with pytest.raises(
        TypeError,
        match=r"pop needs at least one filter, e\.g\. "
        r"nnx\.pop\(model, nnx\.Intermediate\)",
    ):
        nnx.pop(Sown())


def test_a_failing_pop_changes_nothing():
    m = Sown()
    m.frozen = (nnx.Intermediate(3),)
    with pytest.raises(
        TypeError,
        match=r"pop: cannot remove frozen\[0\] from a tuple; hold it "
        r"in a list, dict or Module attribute instead",
    ):
        nnx.pop(m, nnx.Intermediate)
    assert "seen" in vars(m) and len(m.items) == 3
    assert "seen" in nnx.state(m)


# -- iter_graph -----------------------------------------------------------------------------------
def test_iter_graph_yields_every_node_and_leaf_once_root_first():
    m = SharedSub()
    found = [(nnx.format_path(p), type(x).__name__) for p, x in nnx.iter_graph(m)]
    assert found == [
        ("<root>", "SharedSub"),
        ("a", "Leaf"),
        ("a.w", "Param"),
        ("many", "list"),
        ("many[1]", "dict"),
    ]


def test_iter_graph_handles_cycles_and_raw_arrays():
    m = Cycle()
    m.raw = jnp.zeros(1)
    found = [nnx.format_path(p) for p, _ in nnx.iter_graph(m)]
    assert found == ["<root>", "parent", "parent.child", "parent.child.v", "parent.w", "raw"]


def test_update_of_a_model_never_split_writes_only_the_given_paths():
    m = Nested()
    fresh = nnx.clone(m)  # nothing cached on it
    w = fresh.layers[0].w
    nnx.update(fresh, {"layers": {0: {"w": jnp.full(w.shape, 7.0)}}})
    assert fresh.layers[0].w is w and float(w.value.sum()) == 7.0 * w.size
    assert_same_values(fresh.pair, m.pair)
