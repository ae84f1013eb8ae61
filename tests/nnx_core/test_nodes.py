"""Node registration: user types traversed like lists and dicts; what each type is to the
traversal."""

from __future__ import annotations

from collections import namedtuple

import jax.numpy as jnp
import pytest

import nnx_core as nnx

from .corpus import Bag, Leaf, assert_same_values


def paths(node):
    return [nnx.format_path(p) for p, _ in nnx.state(node).flat_state()]


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
