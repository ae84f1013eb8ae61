"""Module: plain containers, static attributes, train/eval, sow, traversal, repr, summary."""

from __future__ import annotations

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .corpus import CORPUS, SHARING, Cycle, Leaf, Nested, SharedSub, assert_same_values


def paths(node, *filters):
    return [nnx.format_path(p) for p, _ in nnx.state(node, *filters).flat_state()]


class Dropoutish(nnx.Module):
    def __init__(self):
        self.deterministic = False


class Normish(nnx.Module):
    def __init__(self):
        self.use_running_average = False
        self.mean = nnx.BatchStat(np.zeros(2, np.float32))


class Net(nnx.Module):
    def __init__(self):
        self.blocks = [Dropoutish(), {"norm": Normish()}, (Normish(),)]
        self.head = Dropoutish()
        self.kernel = nnx.Param(np.ones((3, 2), np.float32))
        self.raw = np.zeros(4, np.int8)
        self.label = "net"


def modes(net):
    return [
        (nnx.format_path(p), vars(m).get("deterministic", vars(m).get("use_running_average")))
        for p, m in net.iter_modules()
        if p
    ]


# -- attributes -----------------------------------------------------------------------------------
def test_plain_containers_need_no_wrappers():
    m = Nested()
    assert type(m.layers) is list and type(m.blocks) is dict and type(m.layers[1][1]) is dict
    assert paths(m) == [
        "blocks.a_first[0].w",
        "blocks.a_first[1]",
        "blocks.z_last.w",
        "layers[0].w",
        "layers[1][0].w",
        "layers[1][1].deep",
        "pair[0]",
    ]


def test_other_values_are_static():
    m = Net()
    m.sizes = (3, 4)
    m.config = {"act": "relu", "depth": 2}
    m.fn = len
    graphdef, state = nnx.split(m)
    assert "label" not in state and "sizes" not in state and "config" not in state
    merged = nnx.merge(graphdef, state)
    assert merged.sizes == (3, 4) and merged.config == {"act": "relu", "depth": 2}
    assert merged.fn is len and merged.label == "net"


def test_raw_arrays_are_state():
    assert paths(Net(), np.ndarray) == ["raw"]


def test_bookkeeping_entries_are_not_attributes():
    m = Leaf(2)
    nnx.split(m)
    assert set(vars(m)) == {"_nnx_trace", "_nnx_plan", "w", "n"}
    assert list(nnx.state(m)) == ["w"] and "_nnx" not in repr(m)
    assert set(m.__getstate__()) == {"w", "n"}


def test_mixins_with_slots_are_allowed():
    class Slotted:
        __slots__ = ("extra",)

    class Mixed(nnx.Module, Slotted):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(1))

    m = Mixed()
    assert list(nnx.state(nnx.clone(m))) == ["w"]


def test_no_super_init_needed_and_attributes_are_ordinary():
    class Bare(nnx.Module):
        def __init__(self):
            self.x = 1

    b = Bare()
    b.x += 1
    del b.x
    assert not hasattr(b, "x") and vars(b) == {"_nnx_trace": vars(b)["_nnx_trace"]}


# -- train / eval / set_attributes ----------------------------------------------------------------
def test_eval_and_train_toggle_modes_everywhere():
    net = Net()
    assert net.eval() is net
    assert modes(net) == [
        ("blocks[0]", True),
        ("blocks[1].norm", True),
        ("blocks[2][0]", True),
        ("head", True),
    ]
    assert net.train() is net
    assert all(value is False for _, value in modes(net))


def test_train_and_eval_take_extra_attributes():
    net = Net().eval(label="evaluating")
    assert net.label == "evaluating"


def test_set_attributes_sets_only_existing_attributes():
    net = Net().set_attributes(deterministic=True)
    assert net.head.deterministic is True and "deterministic" not in vars(net)
    assert net.blocks[1]["norm"].use_running_average is False
    assert net.set_attributes(missing=1, raise_if_not_found=False) is net
    assert "missing" not in vars(net)


def test_set_attributes_raises_for_unknown_attributes():
    with pytest.raises(
        ValueError,
        match=r"Could not find at least one instance of the following attributes: "
        r"\['nope', 'other'\] in the modules of Net; pass raise_if_not_found=False",
    ):
        Net().set_attributes(deterministic=True, nope=1, other=2)


def test_set_attributes_takes_filters_as_flax():
    net = Net().set_attributes(lambda path, m: path == ("head",), deterministic=True)
    assert net.head.deterministic is True
    assert all(value is False for name, value in modes(net) if name != "head")
    with pytest.raises(ValueError, match=r"following attributes: \['use_running_average'\]"):
        Net().set_attributes(lambda path, m: path == ("head",), use_running_average=True)


# -- sow ------------------------------------------------------------------------------------------
class Sower(nnx.Module):
    def __call__(self, x, **kwargs):
        self.sow(nnx.Intermediate, "seen", x, **kwargs)
        return x


def test_sow_appends_to_a_tuple_by_default():
    m = Sower()
    m(1)
    m(2)
    assert type(m.seen) is nnx.Intermediate and m.seen.value == (1, 2)
    assert paths(nnx.pop(m, nnx.Intermediate)) == ["seen"] and "seen" not in vars(m)


def test_sow_with_reduce_and_init_functions():
    m = Sower()
    for x in (1, 2, 3):
        m(x, reduce_fn=lambda total, new: total + new, init_fn=lambda: 10)
    assert m.seen.value == 16


def test_sow_with_a_custom_kind():
    class Probe(nnx.Intermediate):
        pass

    m = Leaf(1)
    m.sow(Probe, "probe", jnp.ones(1))
    assert paths(m, Probe) == ["probe"] and paths(m, nnx.Intermediate) == ["probe"]


@pytest.mark.parametrize(
    "existing, match",
    [
        (
            nnx.Param(1),
            r"sow: expected attribute 'seen' of Sower to be of type Intermediate, got Param\. "
            r"Use another name for the Intermediate values\.",
        ),
        (3, r"sow: expected attribute 'seen' of Sower to be a Variable, got int\."),
    ],
)
def test_sow_into_an_attribute_of_another_type_raises(existing, match):
    m = Sower()
    m.seen = existing
    with pytest.raises(ValueError, match=match):
        m(1)


# -- traversal ------------------------------------------------------------------------------------
def test_iter_modules_yields_each_module_once_root_first():
    m = SharedSub()
    assert [(nnx.format_path(p), type(x).__name__) for p, x in m.iter_modules()] == [
        ("<root>", "SharedSub"),
        ("a", "Leaf"),
    ]
    net = Net()
    assert [nnx.format_path(p) for p, _ in net.iter_modules()] == [
        "<root>",
        "blocks[0]",
        "blocks[1].norm",
        "blocks[2][0]",
        "head",
    ]


def test_iter_modules_handles_cycles():
    m = Cycle()
    assert [nnx.format_path(p) for p, _ in m.iter_modules()] == ["<root>", "parent", "parent.child"]


def test_iter_children_yields_direct_submodule_attributes():
    m = SharedSub()
    assert [(name, child) for name, child in m.iter_children()] == [("a", m.a), ("b", m.a)]
    assert [name for name, _ in Net().iter_children()] == ["head"]
    assert list(Leaf(1).iter_children()) == []


# -- repr -----------------------------------------------------------------------------------------
def test_repr_is_nested_and_readable():
    assert (
        repr(Net())
        == """Net( # BatchStat: 4 (16 B), Param: 6 (24 B), Total: 10 (40 B)
  blocks=[
    Dropoutish(
      deterministic=False,
    ),
    {
      'norm': Normish(
        mean=BatchStat(float32[2]),
        use_running_average=False,
      ),
    },
    (
      Normish(
        mean=BatchStat(float32[2]),
        use_running_average=False,
      ),
    ),
  ],
  head=Dropoutish(
    deterministic=False,
  ),
  kernel=Param(float32[3,2]),
  label='net',
  raw=int8[4],
)"""
    )


def test_repr_of_cycles_and_shared_modules_is_finite():
    assert (
        repr(Cycle())
        == """Cycle( # BatchStat: 1 (4 B), Param: 1 (4 B), Total: 2 (8 B)
  me=Cycle(...),
  parent=Parent(
    child=Child(
      parent=Parent(...),
      v=BatchStat(float32[1]),
    ),
    w=Param(float32[1]),
  ),
)"""
    )
    assert repr(SharedSub()).count("Leaf(...)") == 3


def test_repr_of_an_empty_module_and_static_containers():
    class Empty(nnx.Module):
        pass

    e = Empty()
    assert repr(e) == "Empty()"
    e.sizes = [1, 2]
    assert repr(e) == "Empty(\n  sizes=[1, 2],\n)"


# -- summary --------------------------------------------------------------------------------------
def test_summary_counts_and_bytes_per_kind():
    assert (
        Net().summary()
        == """Net: 6 parameters in 4 Variables (44 B)
kind       variables  elements  bytes
BatchStat          2         4   16 B
Param              1         6   24 B
array              1         4    4 B"""
    )


def test_summary_with_a_filter_and_large_counts():
    class Big(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(np.zeros((1000, 1000), np.float32))
            self.n = nnx.Variable(np.zeros((), np.int32))

    assert (
        Big().summary(nnx.Param)
        == """Big: 1,000,000 parameters in 1 Variables (3.8 MB)
kind   variables   elements   bytes
Param          1  1,000,000  3.8 MB"""
    )


def test_summary_of_an_empty_module_and_unnamed_kinds():
    class Empty(nnx.Module):
        pass

    assert (
        Empty().summary() == "Empty: 0 parameters in 0 Variables (0 B)\n"
        "kind   variables  elements  bytes"
    )
    m = Empty()
    m.v = nnx.Variable(np.zeros(300, np.float32))
    assert m.summary().splitlines()[0] == "Empty: 0 parameters in 1 Variables (1.2 KB)"


# -- copies ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "copier", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))], ids=["deepcopy", "pickle"]
)
@pytest.mark.parametrize("name", CORPUS)
def test_deepcopy_and_pickle_keep_structure_and_sharing(copier, name):
    m = CORPUS[name]()
    nnx.split(m)  # a cached Plan is not copied along
    c = copier(m)
    assert nnx.graphdef(c) == nnx.graphdef(m)
    assert_same_values(c, m)
    SHARING[name](c)


def test_a_deep_copy_is_independent():
    m = Cycle()
    c = copy.deepcopy(m)
    assert c.me is c and c.parent.w is not m.parent.w
    c.parent.w.value = jnp.zeros(1)
    assert m.parent.w.value.tolist() == [1.0]


def test_copy_is_shallow():
    m = Leaf(2)
    c = copy.copy(m)
    assert c is not m and c.w is m.w and c.n == 2


# -- perturb ---------------------------------------------------------------------------------------
class Perturbed(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.array([1.0, 2.0]))

    def __call__(self, x):
        h = self.perturb("h", x * self.w.value)
        return (h**2).sum()


def test_perturb_gives_the_gradient_of_an_intermediate_value():
    m = Perturbed()
    assert float(m(jnp.ones(2))) == 5.0 and m.h.value.tolist() == [0.0, 0.0]
    assert type(m.h) is nnx.Perturbation and isinstance(m.h, nnx.Intermediate)
    grads = nnx.grad(lambda m: m(jnp.ones(2)), wrt=nnx.Perturbation)(m)
    assert grads["h"].value.tolist() == [2.0, 4.0]  # d/dh sum(h**2) at h = x * w
    m.h.value = jnp.array([1.0, 1.0])
    assert float(m(jnp.ones(2))) == 13.0  # the stored perturbation is added


def test_perturb_refuses_an_attribute_of_another_kind():
    m = Perturbed()
    m.h = nnx.Param(jnp.zeros(2))
    with pytest.raises(
        ValueError,
        match="perturb: expected attribute 'h' of Perturbed to be of type Perturbation, got Param",
    ):
        m(jnp.ones(2))


def test_modules_are_pytrees():
    assert isinstance(Leaf(1), nnx.Pytree)
    assert len(jax.tree_util.tree_leaves(Leaf(3))) == 1


def test_repr_first_line_counts_elements_per_kind_as_flax():
    import flax.nnx as fnnx

    firsts = []
    for lib in (fnnx, nnx):

        class Block(lib.Module):
            def __init__(self, lib=lib):
                self.w = lib.Param(jnp.ones((2, 3)))
                self.mean = lib.BatchStat(jnp.zeros(3))
                self.rngs = lib.Rngs(0)

        head, _, counts = repr(Block()).splitlines()[0].partition(" # ")
        firsts.append((head, set(counts.split(", "))))  # flax lists kinds in attribute order
    assert firsts[0] == firsts[1]
    assert repr(Block()).splitlines()[0] == (
        "Block( # BatchStat: 3 (12 B), RngState: 2 (12 B), Param: 6 (24 B), Total: 11 (48 B)"
    )


def test_repr_of_a_module_without_variables_has_no_counts():
    class Empty(nnx.Module):
        def __init__(self):
            self.n = 3

    assert repr(Empty()).splitlines()[0] == "Empty("
