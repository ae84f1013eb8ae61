"""GraphDef (hashable, equal for equal structures) and the flatten/unflatten traversal."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import _graph

from .corpus import CORPUS, Leaf, Nested, RawArrays


# -- GraphDef -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", CORPUS)
def test_graphdef_is_hashable_and_equal_for_equal_structure(name):
    a, b = nnx.graphdef(CORPUS[name]()), nnx.graphdef(CORPUS[name]())
    assert a == b and hash(a) == hash(b) and a is not b


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "name", "other"),  # static attribute
        lambda m: m.layers.append(1),
        lambda m: setattr(m.layers[0], "w", nnx.BatchStat(m.layers[0].w.value)),  # kind
        lambda m: m.layers[0].w.set_metadata(frozen=True),
        lambda m: setattr(m, "pair", m.pair._replace(second="other")),
    ],
)
def test_graphdef_differs_when_the_structure_differs(change):
    m = Nested()
    before = nnx.graphdef(m)
    change(m)
    assert nnx.graphdef(m) != before


def test_graphdef_ignores_values_and_shapes():
    a, b = Leaf(2), Leaf(2)
    b.w.value = jnp.ones(2) * 7
    assert nnx.graphdef(a) == nnx.graphdef(b)


def test_graphdef_is_a_pytree_without_leaves():
    graphdef = nnx.graphdef(Nested())
    assert jax.tree_util.tree_leaves(graphdef) == []
    assert jax.tree.map(lambda x: x, graphdef) == graphdef
    assert jax.tree_util.tree_structure(graphdef) == jax.tree_util.tree_structure(
        nnx.graphdef(Nested())
    )


def test_graphdef_repr():
    assert repr(nnx.graphdef(Nested())) == "GraphDef(Nested, leaves=7)"
    assert repr(nnx.graphdef([nnx.Param(np.zeros(1))])) == "GraphDef(list, leaves=1)"
    assert repr(nnx.graphdef(3)) == "GraphDef(static, leaves=0)"


@pytest.mark.parametrize(
    "jit", [jax.jit, functools.partial(jax.jit, static_argnums=0)], ids=["pytree", "static"]
)
def test_graphdef_as_a_jit_argument_does_not_retrace(jit):
    traces = []

    @jit
    def total(graphdef, state):
        traces.append(1)
        return nnx.merge(graphdef, state).w.value.sum()

    for scale in (1.0, 2.0, 3.0):
        graphdef, state = nnx.split(Leaf(3, scale=scale))
        assert float(total(graphdef, state)) == 3.0 * scale
    assert len(traces) == 1
    graphdef, state = nnx.split(nnx.clone(Leaf(3)))
    total(graphdef, state)
    assert len(traces) == 1  # a clone has the same structure: still one trace


def test_unflatten_of_a_type_that_is_no_longer_registered(monkeypatch):
    class Gone:
        def __init__(self, v):
            self.v = v

    nnx.register_node_type(
        Gone, flatten=lambda g: ([("v", g.v)], None), unflatten=lambda c, a: Gone(c[0][1])
    )
    graphdef, state = nnx.split([Gone(nnx.Param(jnp.ones(1)))])
    monkeypatch.delitem(_graph._REGISTERED, Gone)
    _graph._IMPLS.clear()
    try:
        with pytest.raises(TypeError, match="Gone is no longer a registered graph node type"):
            nnx.merge(graphdef, state)
    finally:
        _graph._IMPLS.clear()


def test_unhashable_statics_compare_by_identity_before_and_after_hashing():
    a, b = Leaf(1), Leaf(1)
    a.config = b.config = {"sizes": {1, 2}}  # one unhashable set object, shared
    c = Leaf(1)
    c.config = {"sizes": {1, 2}}  # an equal but distinct set
    ga, gb, gc = nnx.graphdef(a), nnx.graphdef(b), nnx.graphdef(c)
    assert ga == gb and ga != gc  # compared before anything hashed them
    assert hash(ga) == hash(gb) and ga == gb and ga != gc


def test_a_child_that_is_a_tracer_is_an_array_leaf():
    m = Leaf(1)

    @nnx.jit
    def f(m, x):
        m.raw = x * 2  # a tracer attribute inside the trace: state, not a static value
        return m.w.value

    f(m, jnp.ones(2))
    assert m.raw.tolist() == [2.0, 2.0] and "raw" in nnx.state(m)


def test_merge_reads_several_states_along_the_graphdef():
    m = Nested()
    graphdef, params, rest = nnx.split(m, nnx.Param, ...)
    merged = nnx.merge(graphdef, params, rest)
    assert nnx.graphdef(merged) == graphdef
    assert [p for p, _ in nnx.state(merged).flat_state()] == [
        p for p, _ in nnx.state(m).flat_state()
    ]


def test_merge_with_a_later_state_overriding_an_earlier_one():
    m = Leaf(2)
    graphdef, state = nnx.split(m)
    newer = nnx.State({"w": nnx.Param(jnp.zeros(2))})
    assert nnx.merge(graphdef, state, newer).w.value.tolist() == [0.0, 0.0]


# -- the first split's State, built by the traversal itself ----------------------------------------
def _structure(s):
    """Keys in order, nested, with the identities of the leaves."""
    return [
        (k, _structure(v) if isinstance(v, nnx.State) else id(v)) for k, v in s._mapping.items()
    ]


@pytest.mark.parametrize("name", CORPUS)
def test_the_first_split_builds_the_same_state_as_a_later_one(name):
    m = CORPUS[name]()
    _, first = nnx.split(m)  # a new structure: the traversal's own State
    _, second = nnx.split(m)  # the cached structure: built along the paths
    assert _structure(first) == _structure(second)
    assert jax.tree.structure(first) == jax.tree.structure(second)
    paths = nnx.graphdef(m).paths  # worked out from the spec when first asked for
    assert sorted(p for p, _ in first.flat_state()) == sorted(paths) and len(set(paths)) == len(
        paths
    )


@pytest.mark.parametrize("call", [nnx.split, nnx.state])
def test_each_split_gives_a_state_of_its_own(call):
    m = Nested()
    s1 = call(m)
    s1 = s1[1] if isinstance(s1, tuple) else s1
    s1["added"] = nnx.Param(jnp.ones(1))
    del s1["pair"]
    s2 = call(m)
    s2 = s2[1] if isinstance(s2, tuple) else s2
    assert "added" not in s2 and "pair" in s2


def test_a_state_after_jit_holds_the_raw_arrays_the_jit_wrote():
    m = RawArrays()

    @nnx.jit
    def step(m):
        m.jax_array = m.jax_array + 1
        m.in_list[0] = m.in_list[0] * 3

    step(m)  # the jit made the Plan (and its traversal's State) before any split
    s = nnx.state(m)
    assert s["jax_array"].tolist() == [1.0, 2.0, 3.0] and s["in_list"][0].tolist() == [3.0, 3.0]


@pytest.mark.parametrize("name", CORPUS)
def test_leaf_owners_hold_each_leaf_under_its_key(name):
    m = CORPUS[name]()
    plan = _graph.plan_for(m)
    assert len(plan.owners) == len(plan.leaves)
    for leaf, (owner, impl, key) in zip(plan.current_leaves(), plan.owners):
        assert _graph.read_child(owner, impl, key) is leaf


def test_paths_of_a_multi_root_graphdef_start_at_each_root():
    a, b = Leaf(2), Leaf(3)
    plan = _graph.Plan((a, [b, a.w]))
    assert plan.graphdef.paths == (("w",), (0, "w"))  # a.w again is a second reference


# -- merge from one State, read along the program ------------------------------------------------
@pytest.mark.parametrize("name", CORPUS)
def test_merge_of_one_state_equals_merge_of_its_parts(name):
    m = CORPUS[name]()
    graphdef, state = nnx.split(m)
    one = nnx.merge(graphdef, state)
    parts = nnx.merge(graphdef, *nnx.split(m, nnx.Param, ...)[1:])
    assert nnx.graphdef(one) == nnx.graphdef(parts) == graphdef
    assert _structure(nnx.state(one)) == _structure(nnx.state(parts))


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s.__setitem__("extra", nnx.Param(jnp.ones(1))), r"Unexpected: extra\."),
        (lambda s: s.__delitem__("pair"), r"Missing: pair\[0\]\."),
        (
            lambda s: s["blocks"]["a_first"].__setitem__(1, nnx.State({"w": jnp.ones(1)})),
            r"Missing: blocks\.a_first\[1\]\. Unexpected: blocks\.a_first\[1\]\.w\.",
        ),
        (
            lambda s: s["layers"].__setitem__(0, jnp.ones(1)),
            r"Missing: layers\[0\]\.w\. Unexpected: layers\[0\]\.",
        ),
        (lambda s: s["layers"][1].__delitem__(1), r"Missing: layers\[1\]\[1\]\.deep\."),
    ],
    ids=["extra", "missing", "state_for_a_leaf", "leaf_for_a_state", "missing_deep"],
)
def test_merge_of_one_state_that_differs_names_the_paths(edit, match):
    graphdef, state = nnx.split(Nested())
    edit(state)
    with pytest.raises(ValueError, match=match):
        nnx.merge(graphdef, state)


def test_merge_of_one_state_wraps_raw_arrays_and_converts_kinds():
    graphdef, state = nnx.split(Leaf(2))
    state["w"] = jnp.zeros(2)
    merged = nnx.merge(graphdef, state)
    assert type(merged.w) is nnx.Param and merged.w[...].tolist() == [0.0, 0.0]
