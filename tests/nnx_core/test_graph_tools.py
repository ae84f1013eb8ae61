"""recursive_map, find_duplicates, set_metadata, variables, the graph/statelib/filterlib module
paths, and flax.nnx's keywords on the graph API (graph=, merge(copy=), clone(arrays=))."""

from __future__ import annotations

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx


class Tied(nnx.Module):
    def __init__(self):
        self.a = nnx.Param(jnp.ones(2))
        self.b = self.a
        self.items = [self.a, nnx.BatchStat(jnp.zeros(2))]
        self.raw = jnp.arange(3.0)
        self.mode = False


class FTied(fnnx.Module):
    def __init__(self):
        self.a = fnnx.Param(jnp.ones(2))
        self.b = self.a
        self.items = fnnx.List([self.a, fnnx.BatchStat(jnp.zeros(2))])


def test_find_duplicates_lists_every_path_of_a_shared_object_as_flax():
    assert nnx.find_duplicates(Tied()) == [[("a",), ("b",), ("items", 0)]]
    assert nnx.find_duplicates(Tied()) == fnnx.find_duplicates(FTied())
    assert nnx.find_duplicates(Tied(), only=nnx.BatchStat) == []


def test_recursive_map_maps_children_first_on_a_copy():
    m = Tied()
    seen = []

    def f(path, x):
        seen.append(path)
        if isinstance(x, Tied):
            x.mode = True
        return x * 2 if path == ("raw",) else x

    out = nnx.recursive_map(f, m)
    assert out is not m and out.mode and not m.mode and out.a is m.a
    np.testing.assert_array_equal(out.raw, [0.0, 2.0, 4.0])
    assert seen[-1] == () and seen.count(("a",)) == 1  # the shared Param is mapped once
    assert nnx.recursive_map(lambda p, x: x, (1, [jnp.ones(1)]))[0] == 1


def test_set_metadata_and_variables_as_flax():
    m = Tied()
    nnx.set_metadata(m, only=nnx.Param, lr_scale=0.5)
    assert m.a.get_metadata() == {"lr_scale": 0.5} and m.items[1].get_metadata() == {}
    assert list(nnx.variables(m)) == ["a", "items"] and "raw" in nnx.state(m)
    params, stats = nnx.variables(m, nnx.Param, nnx.BatchStat)
    assert list(params) == ["a"] and list(stats) == ["items"]


def test_graph_keyword_is_accepted_and_changes_nothing():
    m = Tied()
    for graph in (True, False, None):
        g, s = nnx.split(m, graph=graph)
        assert nnx.graphdef(m, graph=graph) == g and nnx.state(m, graph=graph) == s
        assert nnx.clone(m, graph=graph).a is not m.a
        assert [p for p, _ in nnx.iter_graph(m, graph=graph)] == [p for p, _ in nnx.iter_graph(m)]


def test_merge_copy_and_clone_arrays_and_variables():
    m = Tied()
    g, s = nnx.split(m)
    shared, copied = nnx.merge(g, s), nnx.merge(g, s, copy=True)
    assert shared.a is m.a and copied.a is not m.a and copied.a is copied.b
    assert copied.a.value is m.a.value
    distinct = nnx.clone(m, arrays=True)
    assert distinct.a.value is not m.a.value and distinct.a is distinct.b
    assert distinct.a.value.unsafe_buffer_pointer() != m.a.value.unsafe_buffer_pointer()
    np.testing.assert_array_equal(distinct.raw, m.raw)
    same_vars = nnx.clone(m, variables=False)
    assert same_vars is not m and same_vars.a is m.a
    theirs = fnnx.clone(FTied(), arrays=True)
    assert theirs.a is theirs.b  # flax.nnx keeps the sharing too


def test_module_paths_flax_code_imports():
    from nnx_core import filterlib, graph, statelib

    g, flat = graph.flatten(Tied())
    assert [p for p, _ in flat][:2] == [("a",), ("items", 1)]
    assert graph.unflatten(g, flat).a.shape == (2,)
    assert statelib.State is nnx.State is nnx.GraphState
    assert filterlib.to_predicate((nnx.Param, "dropout"))((), nnx.Param(jnp.ones(1)))
    assert nnx.graph.GraphDef is nnx.GraphDef and callable(nnx.graph.recursive_map)
    assert jax.tree.leaves(statelib.diff({"a": 1, "b": 2}, {"a": 5})) == [2]


def test_display_prints_the_repr(capsys):
    nnx.display(nnx.Param(jnp.ones(2)), [1])
    assert capsys.readouterr().out == "Param(float32[2])\n[1]\n"


def test_iter_modules_and_iter_children_functions_follow_flax_order():
    class Leaf(nnx.Module):
        pass

    class FLeaf(fnnx.Module):
        pass

    class Tree(nnx.Module):
        def __init__(self):
            self.sub = [{"a": Leaf()}, {"b": Leaf()}]
            self.linear, self.drop = Leaf(), Leaf()
            self.rngs = nnx.Rngs(0)

    class FTree(fnnx.Module):
        def __init__(self):
            self.sub = fnnx.data([{"a": FLeaf()}, {"b": FLeaf()}])
            self.linear, self.drop = FLeaf(), FLeaf()
            self.rngs = fnnx.Rngs(0)

    ours, theirs = list(nnx.iter_modules(Tree())), list(fnnx.iter_modules(FTree()))
    assert [p for p, _ in ours] == [p for p, _ in theirs]
    assert [k for k, _ in nnx.iter_children(Tree())] == [k for k, _ in fnnx.iter_children(FTree())]
    assert nnx.to_flat_state({"a": 1}).leaves == (1,)
