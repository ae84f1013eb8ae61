"""Modules (and any Pytree) as JAX pytrees: plain jax.jit / tree.map / tree.leaves / grad, shared
Variables and cycles, static attributes, key paths, Object and pytree=False; parity of the leaves
with flax.nnx for the same model."""

from __future__ import annotations

import importlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
import nnx_layers
from nnx_core._pytree import PathKey

from .corpus import CORPUS, LEAF_COUNTS, SHARING, Cycle, Leaf, SharedVar, assert_same_values


def _model(lib, rngs):
    """The same model in both libraries: layers, a counter, a raw array, a list, a static."""
    zeros = (
        lib.initializers.zeros if hasattr(lib, "initializers") else nnx_layers.initializers.zeros
    )
    listing = (lambda xs: lib.List(xs)) if hasattr(lib, "List") else list

    class Model(lib.Module):
        def __init__(self):
            self.lin = lib.Linear(2, 3, kernel_init=zeros, rngs=rngs)
            self.bn = lib.BatchNorm(3, rngs=rngs)
            self.count = lib.Variable(jnp.array(0))
            self.arr = jnp.ones(2)
            self.name = "model"
            self.layers = listing([lib.Linear(3, 3, kernel_init=zeros, rngs=rngs)])

        def __call__(self, x):
            self.count.value = self.count.value + 1
            return self.layers[0](self.bn(self.lin(x)))

    return Model()


class Layers:
    """nnx_core + nnx_layers under the names the model builder uses."""

    Module, Variable = nnx.Module, nnx.Variable
    Linear, BatchNorm, initializers = (
        nnx_layers.Linear,
        nnx_layers.BatchNorm,
        nnx_layers.initializers,
    )


def ours():
    model = _model(Layers, nnx.Rngs(0))
    model.lin.kernel.value = jnp.arange(6.0).reshape(2, 3) / 10
    return model


def _flax_model():
    flax_nnx = importlib.import_module("flax.nnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _model(flax_nnx, flax_nnx.Rngs(0))


def keystrs(tree):
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


# -- parity with flax.nnx ------------------------------------------------------------------------
def test_leaves_count_order_and_key_paths_match_flax():
    flax_nnx = importlib.import_module("flax.nnx")

    class FlaxDicts(flax_nnx.Module):
        def __init__(self):
            self.d = flax_nnx.Dict({"a": jnp.zeros(2), "b": flax_nnx.Param(jnp.ones(1))})

    class Dicts(nnx.Module):
        def __init__(self):
            self.d = {"a": jnp.zeros(2), "b": nnx.Param(jnp.ones(1))}

    assert keystrs(Dicts()) == keystrs(FlaxDicts()) == [".d.a", ".d.b.value"]
    theirs = _flax_model()
    assert keystrs(ours()) == keystrs(theirs)
    assert len(jax.tree.leaves(ours())) == len(jax.tree.leaves(theirs)) == 10
    assert keystrs(nnx.Rngs(0, dropout=1)) == keystrs(
        importlib.import_module("flax.nnx").Rngs(0, dropout=1)
    )


def test_mutation_inside_plain_jit_stays_inside_as_in_flax():
    def step(m):
        m.count[...] = m.count[...] + 10
        return m

    model, theirs = ours(), _flax_model()
    out, flax_out = jax.jit(step)(model), jax.jit(step)(theirs)
    assert int(model.count.value) == int(theirs.count[...]) == 0  # the argument is unchanged
    assert int(out.count.value) == int(flax_out.count[...]) == 10  # the returned Module changed
    assert out is not model and type(out) is type(model)


# -- the acceptance behaviours ---------------------------------------------------------------------
def test_plain_jit_calls_a_module():
    model = ours()
    x = jnp.ones((4, 2))
    out = jax.jit(lambda m, x: m(x))(model, x)
    np.testing.assert_allclose(out, ours()(x), rtol=1e-6)
    assert int(model.count.value) == 0


def test_tree_map_returns_a_new_module_with_mapped_values():
    model = ours()
    zeroed = jax.tree.map(lambda a: a * 0, model)
    assert type(zeroed) is type(model) and zeroed is not model
    assert type(zeroed.lin.kernel) is nnx.Param and zeroed.name == "model"
    assert all(float(jnp.abs(x).sum()) == 0 for x in jax.tree.leaves(zeroed))
    assert model.lin.kernel.value.tolist()[0] == pytest.approx([0.0, 0.1, 0.2])
    assert float(model.arr.sum()) == 2.0 and zeroed.lin.kernel is not model.lin.kernel


def test_a_module_returned_from_plain_jit():
    model = ours()

    @jax.jit
    def grow(m, x):
        m.lin.bias.value = m.lin.bias.value + x
        m.extra = nnx.BatchStat(x)  # a structural change lands on the returned Module
        return m

    out = grow(model, jnp.ones(3))
    assert out.lin.bias.value.tolist() == [1.0, 1.0, 1.0] and out.extra.value.shape == (3,)
    assert model.lin.bias.value.tolist() == [0.0, 0.0, 0.0] and not hasattr(model, "extra")


def test_leaves_match_the_state():
    model = ours()
    assert len(jax.tree.leaves(model)) == len(jax.tree.leaves(nnx.state(model)))
    for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(nnx.state(model))):
        assert a is b


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_round_trips_through_tree_map_with_sharing_kept(name):
    model = CORPUS[name]()
    assert len(jax.tree.leaves(model)) == LEAF_COUNTS[name]
    copy = jax.tree.map(lambda x: x, model)
    assert copy is not model
    SHARING[name](copy)
    assert_same_values(copy, model)


def test_shared_variables_are_one_leaf_and_stay_shared():
    model = SharedVar()
    assert len(jax.tree.leaves(model)) == 3  # encoder.w, decoder.w, the tied embedding once
    doubled = jax.tree.map(lambda x: x * 2, model)
    assert doubled.encoder.embedding is doubled.decoder.embedding
    out = jax.jit(lambda m: m)(model)
    assert out.encoder.embedding is out.decoder.embedding
    assert out.encoder.embedding.sharding_names == ("in", "out")


def test_cycles_flatten_and_rebuild():
    out = jax.jit(lambda m: m)(Cycle())
    assert out.me is out and out.parent.child.parent is out.parent


def test_grad_of_a_module_is_a_module_of_gradients():
    layer = nnx_layers.Linear(2, 3, rngs=nnx.Rngs(0))
    grads = jax.grad(lambda m: m(jnp.ones((1, 2))).sum())(layer)
    assert type(grads) is nnx_layers.Linear and type(grads.kernel) is nnx.Param
    assert grads.kernel.value.tolist() == [[1.0] * 3] * 2 and grads.bias.value.tolist() == [1.0] * 3


def test_tree_map_with_variables_as_leaves():
    def is_variable(x):
        return isinstance(x, nnx.Variable)

    shapes = jax.tree.map(lambda v: v.shape, ours(), is_leaf=is_variable)
    assert shapes.lin.kernel == (2, 3) and shapes.arr == (2,)  # as in flax.nnx
    tied = jax.tree.map(
        lambda v: v.get_metadata("sharding_names", None), SharedVar(), is_leaf=is_variable
    )
    assert tied.encoder.embedding == tied.decoder.embedding == ("in", "out")
    theirs = jax.tree.map(jnp.shape, _flax_model(), is_leaf=is_variable)
    assert theirs.lin.kernel == (2, 3)


def test_static_attributes_are_part_of_the_structure():
    traces = []

    @jax.jit
    def f(m):
        traces.append(m.n)
        return m.w.value.sum()

    f(Leaf(2))
    f(Leaf(2, scale=3.0))  # new values, same structure: no new trace
    f(Leaf(3))  # a new static value (and shape): a new trace
    assert traces == [2, 3]
    assert jax.tree.structure(Leaf(2)) == jax.tree.structure(Leaf(2, scale=5.0))
    assert jax.tree.structure(Leaf(2)) != jax.tree.structure(Leaf(3))


def test_unflatten_from_any_leaves():
    model = Leaf(2)
    treedef = jax.tree.structure(model)
    rebuilt = jax.tree.unflatten(treedef, [np.full(2, 7.0, np.float32)])
    assert type(rebuilt.w) is nnx.Param and rebuilt.w.value.tolist() == [7.0, 7.0]


def test_key_paths():
    model = CORPUS["raw_arrays"]()
    assert keystrs(model) == [
        ".in_dict.x",
        ".in_list[0]",
        ".in_list[1].value",
        ".jax_array",
        ".np_array",
    ]  # dict entries read like attributes, as flax.nnx's nnx.Dict entries do
    (key, _), *_ = jax.tree_util.tree_flatten_with_path(model)[0]
    assert isinstance(key[0], PathKey) and key[0].path == ("in_dict", "x")
    assert repr(key[0]) == "PathKey('in_dict.x')"
    assert key[0] == PathKey(("in_dict", "x"), "other text") and len({key[0], key[0]}) == 1


def test_nnx_jit_still_writes_state_back():
    model = ours()
    nnx.jit(lambda m, x: m(x))(model, jnp.ones((1, 2)))
    assert int(model.count.value) == 1


# -- Pytree, Object and pytree=False ---------------------------------------------------------------
class Counter(nnx.Pytree):
    def __init__(self):
        self.count = nnx.Variable(jnp.array(0))
        self.label = "c"


class Opaque(nnx.Module, pytree=False):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(1))


class Box(nnx.Object):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(1))


def test_a_pytree_that_is_not_a_module():
    c = Counter()
    assert not isinstance(c, nnx.Module)
    out = jax.jit(lambda c: jax.tree.map(lambda x: x + 1, c))(c)
    assert int(out.count.value) == 1 and out.label == "c" and int(c.count.value) == 0
    assert list(nnx.state(c)) == ["count"] and nnx.clone(c).label == "c"
    assert repr(c) == "Counter(\n  count=Variable(int32[]=0),\n  label='c',\n)"


@pytest.mark.parametrize("cls", [Opaque, Box])
def test_graph_nodes_that_are_not_pytrees_are_leaves(cls):
    obj = cls()
    assert jax.tree.leaves(obj) == [obj]
    assert list(nnx.state(obj)) == ["w"]
    assert nnx.jit(lambda o: o.w.value * 2)(obj).tolist() == [2.0]


def test_object_subclasses_cannot_be_pytrees():
    with pytest.raises(
        ValueError,
        match="Bad derives from nnx_core.Object, which is never a "
        "pytree, but its class statement passes pytree=True",
    ):

        class Bad(nnx.Object, pytree=True):
            pass


def test_list_is_a_list_and_dict_reads_entries_as_attributes():
    class Holder(nnx.Module):
        def __init__(self):
            self.layers = nnx.List([Leaf(1), Leaf(2)])
            self.heads = nnx.Dict(b=Leaf(1), a=3)

    h = Holder()
    assert isinstance(h.layers, list) and isinstance(h.heads, nnx.Module)
    assert h.heads["b"] is h.heads.b and list(h.heads) == ["b", "a"] and len(h.heads) == 2
    assert len(jax.tree.leaves(h)) == 3
    h.heads["c"] = Leaf(2)
    del h.heads["a"]
    assert [nnx.format_path(p) for p, _ in nnx.state(h.heads).flat_state()] == ["b.w", "c.w"]
    with pytest.raises(KeyError, match="'a'"):
        h.heads["a"]
    with pytest.raises(TypeError, match=r"nnx.Dict keys are attribute names \(strings\), got 0"):
        nnx.Dict({0: 1})


def test_dict_splits_and_merges_as_flax():
    flax_nnx = importlib.import_module("flax.nnx")
    ours = nnx.Dict(a=[nnx.Param(jnp.array(1)), nnx.BatchStat(jnp.array(2))], b=nnx.Param(2), c=100)
    theirs = flax_nnx.Dict(
        a=flax_nnx.List([flax_nnx.Param(jnp.array(1)), flax_nnx.BatchStat(jnp.array(2))]),
        b=flax_nnx.Param(2),
        c=100,
    )
    (g, p, r), (_, fp, fr) = (
        nnx.split(ours, nnx.Param, ...),
        flax_nnx.split(theirs, flax_nnx.Param, ...),
    )
    assert (len(p), len(r)) == (len(fp), len(fr)) == (2, 1)
    assert [k for k, _ in p.flat_state()] == [k for k, _ in flax_nnx.to_flat_state(fp)]
    assert nnx.merge(g, p, r).c == 100 and keystrs(ours) == keystrs(theirs)
