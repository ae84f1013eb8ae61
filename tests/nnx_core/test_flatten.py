"""GraphDef (hashable, equal for equal structures) and the flatten/unflatten traversal."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import _graph

from .corpus import CORPUS, Leaf, Nested


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
