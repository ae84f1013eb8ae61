"""The cached Plan: reuse while the structure is unchanged, and every way it is invalidated."""

from __future__ import annotations

import gc
import weakref

import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import _graph

from .corpus import Bag, Leaf, Nested


def paths(node):
    return [nnx.format_path(p) for p, _ in nnx.state(node).flat_state()]


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


# -- internals that the API cannot reach ----------------------------------------------------------
def test_a_plan_of_a_bare_array_cannot_read_it_back():
    plan = _graph.Plan((jnp.ones(1),))
    with pytest.raises(ValueError, match="A root that is a bare array has no owner"):
        plan.current_leaves()


def test_iter_nodes_visits_shared_objects_once():
    shared = nnx.Param(jnp.ones(1))
    leaf = Leaf(1)
    m = {"a": [shared, leaf], "b": (shared, leaf)}
    found = list(_graph.iter_nodes(m))
    assert [nnx.format_path(p) for p, _ in found] == ["<root>", "a", "a[0]", "a[1]", "a[1].w", "b"]
    assert sum(1 for _, x in found if x is shared) == 1
