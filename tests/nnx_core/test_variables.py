"""Variables: value access (``.value``, ``[...]`` and flax.nnx's accessor API, overridable
accessors), the array protocol, metadata, copies, repr, generic kinds, and TraceContextError for
values traced outside their owner's trace."""

from __future__ import annotations

import copy
import importlib
import operator
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .corpus import Leaf


# -- value access -------------------------------------------------------------------------------
def test_value_and_ellipsis_get_and_set():
    v = nnx.Param(jnp.zeros(3))
    assert v.value is v[...]
    v.value = jnp.ones(3)
    assert v[...].tolist() == [1.0, 1.0, 1.0]
    v[...] = jnp.full(3, 2.0)
    assert v.value.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    "index, value, expected",
    [(1, 9.0, [0.0, 9.0, 0.0, 0.0]), (slice(1, 3), 5.0, [0.0, 5.0, 5.0, 0.0])],
)
def test_setitem_with_an_index_updates_functionally(index, value, expected):
    v = nnx.Param(jnp.zeros(4))
    before = v.value
    v[index] = value
    assert v.value.tolist() == expected
    assert before.tolist() == [0.0] * 4  # the old array is untouched
    assert np.asarray(v[index]).tolist() == np.asarray(expected)[index].tolist()


def test_ellipsis_set_of_a_traced_value_never_asks_a_tracer_for_its_sharding(monkeypatch):
    # a tracer's .sharding raises an error whose message scans the whole trace so far: asked
    # once per Variable, `v[...] = x` over n Variables in a transform cost O(n^2)
    asked = []

    def sharding(self):
        asked.append(self)
        raise AttributeError("no sharding on a tracer")

    monkeypatch.setattr(jax.core.Tracer, "sharding", property(sharding))

    class Many(nnx.Module):
        def __init__(self):
            self.vs = [nnx.Param(jnp.full((2,), float(i))) for i in range(50)]

    @nnx.jit
    def step(m):
        for v in m.vs:
            v[...] = v[...] + 1  # same shape, dtype and (no) sharding: a plain replace

    m = Many()
    step(m)
    assert asked == []
    assert [float(v[0]) for v in m.vs] == [float(i + 1) for i in range(50)]


def test_variable_of_a_variable_takes_its_value():
    inner = nnx.Param(jnp.ones(2), a=1)
    v = nnx.BatchStat(inner)
    assert v.value is inner.value and v.metadata == {}
    v.value = nnx.Param(jnp.zeros(2))
    assert type(v.value) is not nnx.Param and v.value.tolist() == [0.0, 0.0]


def test_array_protocol_and_jnp_functions():
    v = nnx.Param(jnp.arange(6.0).reshape(2, 3))
    assert isinstance(jnp.asarray(v), jax.Array)
    np.testing.assert_array_equal(jnp.asarray(v), v.value)
    np.testing.assert_array_equal(np.asarray(v), np.arange(6.0).reshape(2, 3))
    assert np.asarray(v, dtype=np.int32).dtype == np.int32
    assert float(jnp.sum(v)) == 15.0
    np.testing.assert_allclose(jnp.exp(v), jnp.exp(v.value))
    assert jnp.dot(v, jnp.ones(3)).tolist() == [3.0, 12.0]
    assert (v.shape, v.dtype, v.ndim, v.size, len(v)) == ((2, 3), jnp.float32, 2, 6, 2)
    assert float(v.sum()) == 15.0 and v.T.shape == (3, 2)  # array attributes are forwarded
    assert [row.tolist() for row in v] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_scalar_conversions():
    v = nnx.Variable(jnp.array(3))
    assert (int(v), float(v), bool(v), operator.index(v)) == (3, 3.0, True, 3)
    assert ["a", "b", "c", "d"][v] == "d"


def test_variables_compare_values_as_flax_and_hash_by_identity():
    import flax.nnx as fnnx

    a, b = nnx.Param(jnp.array([1, 2, 3])), nnx.Param(jnp.array([1, 5, 3]))
    fa, fb = fnnx.Param(jnp.array([1, 2, 3])), fnnx.Param(jnp.array([1, 5, 3]))
    pairs = [(a == b, fa == fb), (a == 1, fa == 1), (a < b, fa[...] < fb[...])]
    pairs.append((a != b, ~(fa == fb)))  # flax.nnx's != on several elements raises
    for ours, theirs in pairs:
        np.testing.assert_array_equal(ours, theirs)
    assert (nnx.Variable(jnp.array(1)) == 1).all()
    assert len({a, b, a}) == 2 and {a: "a"}[a] == "a"  # flax.nnx's are unhashable


# -- metadata -----------------------------------------------------------------------------------
def test_metadata_from_kwargs_attribute_and_set_metadata():
    v = nnx.Param(jnp.ones(2), sharding_names=("batch",))
    v.note = "hello"
    v.set_metadata(lr_scale=0.5, note="bye")
    assert v.metadata == {"sharding_names": ("batch",), "note": "bye", "lr_scale": 0.5}
    assert v.sharding_names == ("batch",) and v.lr_scale == 0.5
    v.metadata["note"] = "not stored"  # .metadata is a copy
    assert v.note == "bye"


def test_metadata_survives_split_merge_clone_tree_map_and_copies():
    leaf = Leaf(2)
    leaf.w.set_metadata(sharding_names=("in",), frozen=True)
    g, s = nnx.split(leaf)
    merged = nnx.merge(g, jax.tree.map(lambda x: x * 2, s))
    cloned = nnx.clone(leaf)
    raw = nnx.merge(g, s.to_pure_dict())
    for w in (merged.w, cloned.w, raw.w, copy.deepcopy(leaf.w), pickle.loads(pickle.dumps(leaf.w))):
        assert w.metadata == {"sharding_names": ("in",), "frozen": True}
    assert merged.w.value.tolist() == [0.0, 2.0]


@pytest.mark.parametrize(
    "action, error, match",
    [
        (
            lambda v: v.missing,
            AttributeError,
            r"Param has no metadata 'missing'.*metadata keys: \['a'\]",
        ),
        (lambda v: v.__nope__, AttributeError, "^__nope__$"),  # no metadata/value lookup
        (lambda v: setattr(v, "_value", 1), AttributeError, "_value is internal to Variable"),
        (lambda v: setattr(v, "_meta", {}), AttributeError, "_meta is internal to Variable"),
    ],
)
def test_attribute_errors(action, error, match):
    with pytest.raises(error, match=match):
        action(nnx.Param(jnp.ones(1), a=1))


def test_replace_and_copy():
    v = nnx.Param(jnp.ones(2), a=1)
    r = v.replace(jnp.zeros(2), b=2)
    assert type(r) is nnx.Param and r.metadata == {"a": 1, "b": 2} and r.value.tolist() == [0, 0]
    c = v.copy()
    assert c is not v and c.value is v.value and c.metadata == v.metadata
    c.a = 5
    assert v.a == 1


@pytest.mark.parametrize(
    "copier",
    [copy.copy, copy.deepcopy, lambda v: pickle.loads(pickle.dumps(v))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_copy_deepcopy_and_pickle(copier):
    v = nnx.BatchStat(jnp.arange(3.0), sharding_names=("x",))
    c = copier(v)
    assert type(c) is nnx.BatchStat and c is not v and c.metadata == {"sharding_names": ("x",)}
    np.testing.assert_array_equal(c.value, v.value)
    c.value = jnp.zeros(3)  # usable afterwards
    assert v.value.tolist() == [0.0, 1.0, 2.0]


# -- repr ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "variable, expected",
    [
        (
            nnx.Param(jnp.ones((2, 3)), sharding_names=("in", "out")),
            "Param(float32[2,3], sharding_names=('in', 'out'))",
        ),
        (nnx.Variable(jnp.array(3)), "Variable(int32[]=3)"),
        (nnx.BatchStat(jnp.array(0.5)), "BatchStat(float32[]=0.5)"),
        (nnx.Cache(np.zeros((0,), np.int8)), "Cache(int8[0])"),
        (nnx.Intermediate((1, 2)), "Intermediate((1, 2))"),
        (nnx.RngKey(jax.random.key(0), tag="params"), "RngKey(key<fry>[], tag='params')"),
    ],
)
def test_repr(variable, expected):
    assert repr(variable) == expected


def test_repr_of_a_deleted_scalar_shows_its_type():
    v = nnx.Variable(jnp.array(1.0))
    v.value.delete()
    assert repr(v) == "Variable(float32[])"


# -- tracer safety --------------------------------------------------------------------------------
OUTSIDE = nnx.Param(jnp.zeros(2))
OUTSIDE_MODULE = Leaf(2)
OUTSIDE_NUMPY = nnx.Variable(np.zeros(2, np.float32))


def _sow(x):
    OUTSIDE_MODULE.sow(nnx.Intermediate, "leaked", x)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (
            lambda x: setattr(OUTSIDE, "value", x),
            r"Cannot set a traced value on Param\(float32\[2\]\)",
        ),
        (lambda x: OUTSIDE.__setitem__(..., x), "created outside the JAX transform"),
        (lambda x: OUTSIDE.__setitem__(0, x[0]), "created outside the JAX transform"),
        (lambda x: OUTSIDE.set_value(x), "created outside the JAX transform"),
        (lambda x: OUTSIDE.set_raw_value(x), "created outside the JAX transform"),
        (lambda x: OUTSIDE.copy_from(nnx.Param(x)), "created outside the JAX transform"),
        (lambda x: OUTSIDE_NUMPY.set_value(x[0], index=0), "created outside the JAX transform"),
        (lambda x: operator.iadd(OUTSIDE, x), "created outside the JAX transform"),
        (lambda x: setattr(OUTSIDE_MODULE.w, "value", x), "Pass the Module that owns it"),
        (lambda x: setattr(OUTSIDE_MODULE, "raw", x), "Cannot set the traced value 'raw' on Leaf"),
        (lambda x: setattr(OUTSIDE_MODULE, "w", nnx.Param(x)), "traced value 'w' on Leaf"),
        (_sow, "traced value 'leaked' on Leaf"),
        (lambda x: setattr(OUTSIDE_MODULE, "leaked", {0: [x], "a": 1}), "traced value 'leaked'"),
    ],
)
def test_mutating_captured_objects_with_a_tracer_raises(mutate, match):
    def f(x):
        mutate(x)
        return x.sum()

    with pytest.raises(nnx.TraceContextError, match=match):
        jax.jit(f)(jnp.ones(2))
    assert OUTSIDE.value.tolist() == [0.0, 0.0] and "raw" not in vars(OUTSIDE_MODULE)
    assert "leaked" not in vars(OUTSIDE_MODULE)


@pytest.mark.parametrize("transform", [jax.grad, jax.vmap], ids=["grad", "vmap"])
def test_other_transforms_detect_captured_mutation(transform):
    def f(x):
        OUTSIDE.value = x
        return x.sum()

    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        transform(f)(jnp.ones(2))


def test_objects_created_inside_the_trace_accept_tracers():
    def f(x):
        v = nnx.Param(jnp.zeros(2))
        v.value = x
        v[0] = x[1]
        leaf = Leaf(2)
        leaf.raw = x
        leaf.w = nnx.Param(x)
        return v.value + leaf.raw + leaf.w.value

    assert jax.jit(f)(jnp.array([1.0, 2.0])).tolist() == [4.0, 6.0]


def test_concrete_values_may_be_set_inside_a_trace():
    v = nnx.Param(jnp.zeros(2))

    def f(x):
        v.value = np.ones(2, np.float32)
        return x

    jax.jit(f)(jnp.ones(2))
    assert v.value.tolist() == [1.0, 1.0]


# -- flax.nnx's accessor API ----------------------------------------------------------------------
def _accessor_script(mod):
    """The same reads and writes through flax.nnx's accessor API, for both libraries."""
    v = mod.Param(jnp.zeros(3))
    out = []
    v[...] = 1.0  # broadcast into the existing shape and dtype
    out.append((v.get_value().tolist(), str(v.get_value().dtype)))
    v[...] = jnp.array([1, 2, 3])  # an int array: the float32 dtype is kept
    out.append((v.get_value().tolist(), str(v.get_value().dtype)))
    v[1] = 7
    out.append(v.get_value().tolist())
    v.set_value(jnp.ones(2))  # no index: replaced, any shape
    out.append((v.get_value().shape, v.get_value(index=0).tolist()))
    n = mod.Variable(np.zeros(3))
    n[1] = 5  # numpy values are assigned into in place
    out.append(n.get_value().tolist())
    p, q = mod.Param(jnp.ones(1), note="a"), mod.Param(jnp.zeros(1), note="b")
    p.copy_from(q)
    out.append((p.get_value().tolist(), p.get_metadata("note"), p.get_metadata("x", 3)))
    out.append(p.replace(None).get_raw_value())  # None is a value, not "keep the old one"
    return out


def test_accessor_api_matches_flax():
    flax_nnx = importlib.import_module("flax.nnx")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        expected = _accessor_script(flax_nnx)
    assert _accessor_script(nnx) == expected


def test_ellipsis_assignment_of_the_same_type_replaces_the_array():
    v = nnx.Param(jnp.zeros(3))
    new = jnp.ones(3)
    v[...] = new
    assert v.get_value() is new and v.get_raw_value() is new


def test_set_value_by_index_into_a_value_without_item_assignment():
    v = nnx.Intermediate((1, 2))
    v[...] = (3,)  # a whole replacement is fine
    assert v.value == (3,)
    with pytest.raises(
        TypeError,
        match=r"Intermediate holds a tuple, which cannot be assigned "
        r"into at index 0\. Replace the whole value instead",
    ):
        v[0] = 5


class Doubled(nnx.Variable[jax.Array]):
    """Stores twice what it was built with; reads add one; writes are clipped to [0, 10]."""

    def create_value(self, value):
        return value * 2

    def get_value(self, *, index=nnx._variables.MISSING):
        return super().get_value(index=index) + 1

    def set_value(self, value, *, index=nnx._variables.MISSING):
        super().set_value(jnp.clip(value, 0, 10), index=index)


class HasDoubled(nnx.Module):
    def __init__(self):
        self.d = Doubled(jnp.array([1.0, 2.0]))


def test_overridden_accessors_serve_every_user_read_and_write():
    v = Doubled(jnp.array([1.0, 2.0]))
    assert v.get_raw_value().tolist() == [2.0, 4.0]  # create_value ran once
    assert v.value.tolist() == v[...].tolist() == [3.0, 5.0]
    assert (v + 0).tolist() == [3.0, 5.0] and jnp.asarray(v).tolist() == [3.0, 5.0]
    assert float(jnp.sum(v)) == 8.0 and v.shape == (2,)
    v.value = jnp.array([20.0, -3.0])
    assert v.get_raw_value().tolist() == [10.0, 0.0]
    v.set_raw_value(jnp.array([20.0, -3.0]))
    assert v.get_raw_value().tolist() == [20.0, -3.0]


def test_graph_api_and_transforms_move_raw_values():
    m = HasDoubled()
    assert nnx.state(m)["d"].get_raw_value().tolist() == [2.0, 4.0]
    nnx.update(m, {"d": jnp.array([50.0, 60.0])})  # raw: no clipping
    assert m.d.get_raw_value().tolist() == [50.0, 60.0]
    copy_ = nnx.merge(*nnx.split(m))
    assert copy_.d.get_raw_value().tolist() == [50.0, 60.0]  # no second create_value
    out = nnx.jit(lambda m: m.d.value)(m)  # the override runs inside the transform too
    assert out.tolist() == [51.0, 61.0]


def test_get_metadata_forms():
    v = nnx.Param(1.0, note="x")
    assert v.get_metadata() == {"note": "x"} and v.get_metadata("note") == "x"
    assert v.get_metadata("lr", None) is None and v.get_metadata()["note"] == "x"
    v.get_metadata()["note"] = "changed"  # a copy
    assert v.note == "x"


@pytest.mark.parametrize(
    "action, error, match",
    [
        (
            lambda v: v.get_metadata("lr"),
            KeyError,
            r"Param has no metadata 'lr'; metadata keys: \['note'\]\. Pass a default",
        ),
        (lambda v: v.get_metadata(default=1), TypeError, r"get_metadata got default=1 but no name"),
        (
            lambda v: v.set_metadata("a", 1, b=2),
            TypeError,
            r"set_metadata takes keyword arguments or positional ones, not both",
        ),
        (
            lambda v: v.set_metadata(),
            TypeError,
            r"set_metadata expects set_metadata\(key=value, \.\.\.\).*got the positional arguments \(\)",
        ),
        (lambda v: v.set_metadata(["a"]), TypeError, r"got the positional arguments \(\['a'\],\)"),
        (lambda v: v.del_metadata("lr"), KeyError, r"Param has no metadata 'lr' to delete"),
        (
            lambda v: v.copy_from(nnx.BatchStat(1.0)),
            ValueError,
            r"copy_from: cannot copy a BatchStat into a Param; both must be the same kind",
        ),
        (
            lambda v: setattr(v, "__orig__", 1),
            AttributeError,
            r"Param does not store the special attribute '__orig__'",
        ),
    ],
)
def test_accessor_errors(action, error, match):
    with pytest.raises(error, match=match):
        action(nnx.Param(1.0, note="x"))


def test_set_has_and_del_metadata():
    v = nnx.Param(1.0, a=1)
    v.set_metadata("b", 2)
    v.set_metadata(c=3)
    assert v.metadata == {"a": 1, "b": 2, "c": 3} and v.has_metadata("b")
    v.del_metadata("b")
    assert not v.has_metadata("b")
    v.set_metadata({"only": True})
    assert v.metadata == {"only": True}


def test_metadata_changes_are_structural():
    m = HasDoubled()
    before = nnx.graphdef(m)
    m.d.set_metadata("sharding_names", ("x",))
    assert nnx.graphdef(m) != before
    m.d.del_metadata("sharding_names")
    assert nnx.graphdef(m) == before


def test_copy_from_update_from_state_and_from_metadata():
    a, b = nnx.Param(jnp.ones(1), note="a"), nnx.Param(jnp.zeros(1), note="b")
    a.copy_from(a)  # itself: nothing to do
    a.copy_from(b)
    assert a.value is b.value and a.metadata == {"note": "b"}
    c = nnx.BatchStat(jnp.full(1, 5.0))
    a.update_from_state(c)  # any kind: value and metadata
    assert a.value is c.value and a.metadata == {} and type(a) is nnx.Param
    made = Doubled.from_metadata(jnp.ones(1), {"k": 1})
    assert made.get_raw_value().tolist() == [1.0] and made.k == 1  # no create_value
    assert made.var_type is Doubled


def test_replace_and_copy_take_a_value_and_metadata():
    v = nnx.Param(jnp.ones(1), a=1)
    assert v.copy(jnp.zeros(1), b=2).metadata == {"a": 1, "b": 2}
    assert v.replace().value is v.value


def test_variable_classes_are_generic():
    class Count(nnx.Variable[nnx.A]):
        pass

    assert Count[jax.Array] is not Count and nnx.Param[jax.Array].__origin__ is nnx.Param
    for cls in (
        nnx.Variable,
        nnx.Param,
        nnx.BatchStat,
        nnx.Cache,
        nnx.Intermediate,
        nnx.Perturbation,
    ):
        assert cls[int].__origin__ is cls
    v = nnx.Param[jax.Array](jnp.ones(2))  # typing tries to set __orig_class__; it is refused
    assert type(v) is nnx.Param and v.metadata == {}
    assert isinstance(Count(jnp.ones(1)), nnx.Variable)


@pytest.mark.parametrize(
    "register, match",
    [
        (
            lambda: nnx.register_variable_type(int, "tests.int"),
            "expects a subclass of nnx_core.Variable, got <class 'int'>",
        ),
        (
            lambda: nnx.register_variable_type(nnx.Param(1), "tests.inst"),
            "expects a subclass of nnx_core.Variable",
        ),
        (lambda: nnx.register_variable_type(nnx.Cache, ""), "must be a non-empty string, got ''"),
        (lambda: nnx.register_variable_type(nnx.Cache, 3), "must be a non-empty string, got 3"),
    ],
)
def test_register_variable_type_checks_its_arguments(register, match):
    with pytest.raises(TypeError, match=match):
        register()
