"""Graph traversal: GraphDef, the cached Plan and its invalidation, node registration."""

from __future__ import annotations

import functools
import gc
import weakref
from collections import namedtuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import _graph

from .corpus import CORPUS, Bag, Leaf, Nested, assert_same_values


def paths(node):
    return [nnx.format_path(p) for p, _ in nnx.state(node).flat_state()]


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


# -- the cached Plan and its invalidation ---------------------------------------------------------
def test_split_reuses_the_plan_while_the_structure_is_unchanged():
    m = Nested()
    assert _graph.plan_for(m) is _graph.plan_for(m)
    m.layers[0].w.value = jnp.ones(1) * 5  # values only
    assert _graph.plan_for(m) is _graph.plan_for(m)


def _replace_variable(m):
    m.layers[0].w = nnx.Param(jnp.zeros(9))


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda m: setattr(m, "extra", nnx.Param(jnp.ones(1))), "extra"),
        (lambda m: delattr(m, "pair"), "-pair[0]"),
        (lambda m: m.layers.append(nnx.Cache(jnp.ones(1))), "layers[3]"),
        (lambda m: m.layers[1].append(nnx.Cache(jnp.ones(1))), "layers[1][2]"),
        (lambda m: m.layers.pop(0), "-layers[1][0].w"),
        (
            lambda m: m.layers[1][1].__setitem__("deep2", nnx.Cache(jnp.ones(1))),
            "layers[1][1].deep2",
        ),
        (lambda m: m.layers[1][1].pop("deep"), "-layers[1][1].deep"),
        (lambda m: m.blocks.__setitem__("z_last", nnx.Cache(jnp.ones(1))), "-blocks.z_last.w"),
        (lambda m: setattr(m, "raw", jnp.ones(2)), "raw"),
        (lambda m: setattr(m, "layers", []), "-layers[0].w"),
    ],
)
def test_structural_changes_show_in_the_next_split(change, expected):
    m = Nested()
    before = set(paths(m))
    change(m)
    after = set(paths(m))
    if expected.startswith("-"):
        assert expected[1:] in before and expected[1:] not in after
    else:
        assert expected not in before and expected in after


def test_replacing_a_variable_or_its_metadata_shows_in_the_next_split():
    m = Nested()
    _replace_variable(m)
    assert nnx.state(m)["layers"][0]["w"].shape == (9,)
    m.layers[0].w.set_metadata(sharding_names=("x",))
    assert nnx.graphdef(m) != nnx.graphdef(Nested())
    assert nnx.state(m)["layers"][0]["w"].sharding_names == ("x",)
    m.layers[1][1]["deep"] = nnx.Cache(jnp.ones(2))  # replace an item in place
    assert type(nnx.state(m)["layers"][1][1]["deep"]) is nnx.Cache


@pytest.mark.parametrize("empty", [[], {}], ids=["list", "dict"])
def test_an_empty_container_filled_in_place_shows_in_the_next_split(empty):
    m = Leaf(1)
    m.extra = empty
    assert paths(m) == ["w"]
    if isinstance(empty, list):
        empty.append(nnx.Param(jnp.ones(1)))
    else:
        empty["k"] = nnx.Param(jnp.ones(1))
    assert paths(m) == ["extra[0]" if isinstance(empty, list) else "extra.k", "w"]


def test_a_registered_node_changed_in_place_shows_in_the_next_split():
    bag = Bag(w=nnx.Param(jnp.ones(1)))
    m = [bag]
    nnx.state(m)
    bag.items["v"] = nnx.Param(jnp.ones(1))
    assert paths(m) == ["[0].v", "[0].w"]


def test_raw_arrays_are_state_and_their_replacement_is_read():
    m = Leaf(1)
    m.raw = jnp.zeros(2)
    assert nnx.state(m)["raw"].tolist() == [0.0, 0.0]
    m.raw = jnp.ones(2)  # array for array: values only, the Plan is kept
    plan = _graph.plan_for(m)
    assert nnx.state(m)["raw"].tolist() == [1.0, 1.0] and _graph.plan_for(m) is plan
    m.raw = np.ones(2)  # another array type is a structural change
    assert isinstance(nnx.state(m)["raw"], np.ndarray)


def test_a_split_model_can_be_garbage_collected():
    m = Nested()
    nnx.split(m)
    nnx.state(m, nnx.Param)
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None


def test_a_module_with_value_equality_gets_its_own_plan():
    class ByValue(nnx.Module):
        def __init__(self, fill):
            self.w = nnx.Param(jnp.full(2, fill))

        def __eq__(self, other):
            return isinstance(other, ByValue)

        __hash__ = object.__hash__

    a, b = ByValue(1.0), ByValue(2.0)
    assert nnx.state(a)["w"] is a.w and nnx.state(b)["w"] is b.w


def test_a_copied_module_does_not_reuse_the_original_plan():
    import copy

    m = Nested()
    nnx.state(m)
    c = copy.copy(m)
    assert nnx.state(c)["pair"][0] is m.pair[0]  # a shallow copy shares the Variables
    assert _graph.plan_for(c).roots[0] is c


# -- node registration ----------------------------------------------------------------------------
class Box:
    """Registered without set_key / pop_key: immutable for update and pop."""

    def __init__(self, *items):
        self.items = tuple(items)


nnx.register_node_type(
    Box,
    flatten=lambda b: (list(enumerate(b.items)), len(b.items)),
    unflatten=lambda children, aux: Box(*(c for _, c in children)),
)


def test_registered_node_children_rebuild_update_and_pop():
    m = [Bag(w=nnx.Param(jnp.ones(2)), raw=jnp.zeros(1), i=nnx.Intermediate(jnp.ones(1)))]
    graphdef, state = nnx.split(m)
    assert paths(m) == ["[0].i", "[0].raw", "[0].w"]
    rebuilt = nnx.merge(graphdef, state)
    assert type(rebuilt[0]) is Bag and sorted(rebuilt[0].items) == ["i", "raw", "w"]
    nnx.update(m, {0: {"raw": jnp.ones(1) * 4, "w": jnp.zeros(2)}})  # set child via set_key
    assert m[0].items["raw"].tolist() == [4.0] and m[0].items["w"].value.tolist() == [0.0, 0.0]
    popped = nnx.pop(m, nnx.Intermediate)  # pop child via pop_key
    assert list(popped[0]) == ["i"] and sorted(m[0].items) == ["raw", "w"]
    assert paths(m) == ["[0].raw", "[0].w"]


def test_registered_nodes_keep_identity_and_aux():
    inner = Box(nnx.Param(jnp.ones(1)), "static")
    m = {"a": inner, "b": inner}
    clone = nnx.clone(m)
    assert clone["a"] is clone["b"] and clone["a"] is not inner
    assert clone["a"].items[1] == "static"
    assert_same_values(clone, m)


def test_registered_node_without_set_key_cannot_take_a_raw_array():
    m = [Box(jnp.zeros(1))]
    with pytest.raises(
        TypeError,
        match=r"Cannot write \[0\] back into a Box: it is immutable or "
        r"was registered without set_key",
    ):
        nnx.update(m, {0: {0: jnp.ones(1)}})


def test_registered_node_without_pop_key_cannot_pop():
    m = [Box(nnx.Intermediate(1))]
    with pytest.raises(TypeError, match=r"pop: cannot remove \[0\]\[0\] from a Box"):
        nnx.pop(m, nnx.Intermediate)
    assert len(m[0].items) == 1


Point = namedtuple("Point", "x y")


class ListChild(list):
    pass


class ModuleChild(Leaf):
    pass


@pytest.mark.parametrize(
    "node_type, kwargs, match",
    [
        (3, {}, "register_node_type expects a class, got 3"),
        (Box(), {}, r"register_node_type expects a class, got <.*Box object"),
        (nnx.Param, {}, "Param is a Variable kind; Variables are leaves, not nodes"),
        (nnx.Module, {}, r"Module is already traversed as a graph node \(as a Module\)"),
        (ModuleChild, {}, r"ModuleChild is already traversed as a graph node \(as a Module\)"),
        (Point, {}, r"Point is already traversed as a graph node \(as a tuple\)"),
        (list, {}, r"list is already traversed as a graph node \(as a list\)"),
        (dict, {}, r"dict is already traversed as a graph node \(as a dict\)"),
        (nnx.State, {}, r"State is already traversed as a graph node \(as a State\)"),
        (Bag, {"flatten": None}, r"register_node_type\(Bag\): flatten must be callable, got None"),
        (
            Bag,
            {"unflatten": "f"},
            r"register_node_type\(Bag\): unflatten must be callable, got 'f'",
        ),
    ],
)
def test_register_node_type_errors(node_type, kwargs, match):
    args = {"flatten": lambda x: ([], None), "unflatten": lambda c, a: None, **kwargs}
    with pytest.raises(TypeError, match=match):
        nnx.register_node_type(node_type, **args)


def test_list_subclasses_are_static_until_registered():
    class Items(list):
        pass

    m = {"items": Items([nnx.Param(jnp.ones(1))])}
    assert paths(m) == []
    nnx.register_node_type(
        Items,
        flatten=lambda x: (list(enumerate(x)), None),
        unflatten=lambda c, a: Items(v for _, v in c),
    )
    assert paths(m) == ["items[0]"]
    assert type(nnx.clone(m)["items"]) is Items


def test_namedtuples_round_trip():
    m = [Point(nnx.Param(jnp.ones(1)), 2)]
    clone = nnx.clone(m)
    assert type(clone[0]) is Point and clone[0].y == 2 and clone[0].x is not m[0].x


# -- internals that the API cannot reach ----------------------------------------------------------
def test_a_plan_of_a_bare_array_cannot_read_it_back():
    plan = _graph.Plan((jnp.ones(1),))
    with pytest.raises(ValueError, match="A root that is a bare array has no owner"):
        plan.current_leaves()


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


def test_iter_nodes_visits_shared_objects_once():
    shared = nnx.Param(jnp.ones(1))
    leaf = Leaf(1)
    m = {"a": [shared, leaf], "b": (shared, leaf)}
    found = list(_graph.iter_nodes(m))
    assert [nnx.format_path(p) for p, _ in found] == ["<root>", "a", "a[0]", "a[1]", "a[1].w", "b"]
    assert sum(1 for _, x in found if x is shared) == 1
