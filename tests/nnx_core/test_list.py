"""nnx.List: items marked nnx.data / nnx.static, for JAX's pytree functions and for the graph
API, kept through list operations, split / merge and transforms; against flax.nnx's List."""

from __future__ import annotations

import copy
import pickle

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import pytest

import nnx_core as nnx


def _items(lib):
    return [lib.data(jnp.array(1.0)), lib.static(100), lib.data(2), lib.static("s"), jnp.ones(2)]


def test_leaves_and_tree_map_as_flax():
    ours, theirs = nnx.List(_items(nnx)), fnnx.List(_items(fnnx))
    assert [jnp.asarray(x).tolist() for x in jax.tree.leaves(ours)] == [
        jnp.asarray(x).tolist() for x in jax.tree.leaves(theirs)
    ]
    doubled = jax.tree.map(lambda x: x * 2, ours)
    assert isinstance(doubled, nnx.List) and doubled[1:4] == [100, 4, "s"]
    assert float(jax.jit(lambda ls: ls[0] + ls[2])(ours)) == 3.0
    assert jax.tree.leaves(nnx.List([1, "a"])) == jax.tree.leaves(fnnx.List([1, "a"])) == []


def test_marks_follow_the_items_through_list_operations():
    ls = nnx.List([nnx.data(1), nnx.static(2)])
    ls.insert(0, nnx.data(0))
    ls.append(nnx.static(3))
    ls += [nnx.data(4)]
    assert jax.tree.leaves(ls) == [0, 1, 4]
    assert ls.pop(1) == 1 and jax.tree.leaves(ls) == [0, 4]
    ls[0] = nnx.static(0)
    ls.reverse()
    assert list(ls) == [4, 3, 2, 0] and jax.tree.leaves(ls) == [4]
    ls.sort()
    assert list(ls) == [0, 2, 3, 4] and jax.tree.leaves(ls) == [4]
    ls[1:3] = [nnx.data(7)]
    del ls[0]
    assert list(ls) == [7, 4] and jax.tree.leaves(ls) == [7, 4]
    ls.remove(7)
    ls *= 2
    assert jax.tree.leaves(ls) == [4, 4]
    ls.clear()
    assert jax.tree.leaves(ls) == [] and repr(ls) == "List([])"


def test_marks_travel_in_the_graphdef():
    class M(nnx.Module):
        def __init__(self):
            self.items = nnx.List([nnx.data(2), nnx.static(5), nnx.Param(jnp.ones(2))])

    m = M()
    graphdef, state = nnx.split(m)
    assert sorted(nnx.format_path(p) for p, _ in state.flat_state()) == ["items[0]", "items[2]"]
    back = nnx.merge(graphdef, state)
    assert isinstance(back.items, nnx.List) and jax.tree.leaves(back.items)[0] == 2

    @nnx.jit
    def bump(m):
        m.items[0] = m.items[0] + 1

    bump(m)
    assert int(m.items[0]) == 3 and m.items[1] == 5
    assert nnx.graphdef(nnx.List([nnx.data(1)])) != nnx.graphdef(nnx.List([nnx.static(1)]))


def test_copy_and_pickle_keep_the_marks():
    ls = nnx.List([nnx.data(1), nnx.static(2), 3])
    for other in (copy.copy(ls), copy.deepcopy(ls), pickle.loads(pickle.dumps(ls))):
        assert isinstance(other, nnx.List) and list(other) == [1, 2, 3]
        assert jax.tree.leaves(other) == [1]


def test_a_static_item_holding_state_is_an_error():
    for lib in (fnnx, nnx):
        with pytest.raises(ValueError, match="Found data in value of type"):
            lib.List([lib.static(jnp.ones(2))])
    ls = nnx.List()
    with pytest.raises(ValueError, match=r"nnx.static: Found data in value of type list"):
        ls.append(nnx.static([nnx.Param(1)]))
    assert list(ls) == []  # nothing half-written
