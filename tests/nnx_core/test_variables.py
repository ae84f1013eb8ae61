"""Variables: value access, array protocol and operators, metadata, repr, pytree, the kind table,
copies, and TraceContextError for values traced outside their owner's trace."""

from __future__ import annotations

import copy
import operator
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import _variables

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


def test_variable_of_a_variable_takes_its_value():
    inner = nnx.Param(jnp.ones(2), a=1)
    v = nnx.BatchStat(inner)
    assert v.value is inner.value and v.metadata == {}
    v.value = nnx.Param(jnp.zeros(2))
    assert type(v.value) is not nnx.Param and v.value.tolist() == [0.0, 0.0]


# -- operators ----------------------------------------------------------------------------------
# Operators forward to the value whatever its type; numpy values keep these tables fast (every
# new jnp op compiles), and test_jnp_operators checks the jax.Array path once.
X = np.array([1.0, 2.0, 4.0], np.float32)
INTS = np.array([6, 3, 5], np.int32)


@pytest.mark.parametrize(
    "op",
    [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
     operator.mod, operator.pow, operator.lt, operator.le, operator.gt, operator.ge],
)
@pytest.mark.parametrize("other", [2.0, np.array([3.0, 1.0, 2.0], np.float32)])
def test_binary_operators_forward_and_reflected(op, other):
    v = nnx.Variable(X)
    np.testing.assert_array_equal(op(v, other), op(X, other))
    np.testing.assert_array_equal(op(other, v), op(other, X))
    np.testing.assert_array_equal(op(v, nnx.Param(other)), op(X, other))


@pytest.mark.parametrize(
    "op", [operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift]
)
def test_integer_operators_forward_and_reflected(op):
    v = nnx.Variable(INTS)
    np.testing.assert_array_equal(op(v, 1), op(INTS, 1))
    np.testing.assert_array_equal(op(2, v), op(2, INTS))


def test_jnp_operators():
    v = nnx.Param(jnp.array([1.0, 2.0]))
    assert (v + 1).tolist() == [2.0, 3.0] and (1 - v).tolist() == [0.0, -1.0]
    assert isinstance(v * 2, jax.Array) and isinstance(2 * v, jax.Array)
    v -= 1.0
    assert isinstance(v, nnx.Param) and v.value.tolist() == [0.0, 1.0]


def test_matmul_forward_and_reflected():
    m = np.arange(9.0, dtype=np.float32).reshape(3, 3)
    v = nnx.Param(m)
    np.testing.assert_array_equal(v @ X, m @ X)
    np.testing.assert_array_equal(X @ v, X @ m)


@pytest.mark.parametrize("op", [operator.neg, operator.pos, operator.abs])
def test_unary_operators(op):
    np.testing.assert_array_equal(op(nnx.Variable(-X)), op(-X))


def test_invert():
    np.testing.assert_array_equal(~nnx.Variable(INTS), ~INTS)


@pytest.mark.parametrize(
    "iop, op",
    [(operator.iadd, operator.add), (operator.isub, operator.sub), (operator.imul, operator.mul),
     (operator.itruediv, operator.truediv), (operator.ipow, operator.pow)],
)
def test_inplace_operators_keep_the_variable_and_its_kind(iop, op):
    v = nnx.BatchStat(X, tag="t")
    out = iop(v, 2.0)
    assert out is v and type(v) is nnx.BatchStat and v.tag == "t"
    np.testing.assert_array_equal(v.value, op(X, 2.0))


def test_inplace_operator_on_a_module_attribute_keeps_the_same_variable():
    leaf = Leaf(3)
    w = leaf.w
    leaf.w += 1.0
    assert leaf.w is w and leaf.w.value.tolist() == [1.0, 2.0, 3.0]


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


def test_variables_compare_by_identity_and_hash():
    a, b = nnx.Param(jnp.ones(1)), nnx.Param(jnp.ones(1))
    assert a == a and a != b and len({a, b, a}) == 2


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
        (lambda v: v.missing, AttributeError, r"Param has no metadata 'missing'.*metadata keys: \['a'\]"),
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
    "copier", [copy.copy, copy.deepcopy, lambda v: pickle.loads(pickle.dumps(v))],
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
        (nnx.Param(jnp.ones((2, 3)), sharding_names=("in", "out")),
         "Param(float32[2,3], sharding_names=('in', 'out'))"),
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


# -- pytree ---------------------------------------------------------------------------------------
def test_variable_is_a_pytree_with_one_leaf():
    v = nnx.Param(jnp.ones(2), a=1)
    assert jax.tree_util.tree_leaves(v) == [v.value]
    (path, _), = jax.tree_util.tree_leaves_with_path(v)
    assert jax.tree_util.keystr(path) == ".value"
    doubled = jax.tree.map(lambda x: x * 2, v)
    assert type(doubled) is nnx.Param and doubled is not v and doubled.a == 1
    assert v.value.tolist() == [1.0, 1.0]


def test_treedef_equal_for_equal_kind_and_metadata():
    td = jax.tree_util.tree_structure
    assert td(nnx.Param(jnp.ones(1), a=1, b=2)) == td(nnx.Param(jnp.zeros(3), b=2, a=1))
    assert td(nnx.Param(jnp.ones(1), a=1)) != td(nnx.Param(jnp.ones(1), a=2))
    assert td(nnx.Param(jnp.ones(1))) != td(nnx.BatchStat(jnp.ones(1)))
    # unhashable metadata compares by identity
    names = ["x"]
    assert td(nnx.Param(jnp.ones(1), n=names)) == td(nnx.Param(jnp.ones(1), n=names))


def test_plain_jax_jit_accepts_variables():
    out = jax.jit(lambda v: v.value * 2)(nnx.Param(jnp.ones(2)))
    assert out.tolist() == [2.0, 2.0]


# -- the kind name <-> type table ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, cls",
    [("Variable", nnx.Variable), ("Param", nnx.Param), ("BatchStat", nnx.BatchStat),
     ("Cache", nnx.Cache), ("Intermediate", nnx.Intermediate), ("RngKey", nnx.RngKey),
     ("RngCount", nnx.RngCount), ("OptState", nnx.OptState)],
)
def test_builtin_kind_names(name, cls):
    assert nnx.variable_name(cls) == name
    assert nnx.variable_type(name) is cls
    assert nnx.registered_variable_types()[name] is cls


def test_a_subclass_is_a_new_kind_with_an_automatic_name():
    class AutoKind(nnx.Param):
        pass

    name = f"{__name__}.test_a_subclass_is_a_new_kind_with_an_automatic_name.<locals>.AutoKind"
    assert nnx.variable_name(AutoKind) == name
    assert nnx.variable_type(name) is AutoKind
    v = AutoKind(jnp.ones(1))
    assert isinstance(v, nnx.Param) and nnx.OfType(nnx.Param)((), v)


def test_kind_class_keyword_gives_an_explicit_name():
    class Lora(nnx.Param, kind="tests.variables.Lora"):
        pass

    assert nnx.variable_name(Lora) == "tests.variables.Lora"
    assert nnx.variable_type("tests.variables.Lora") is Lora
    assert nnx.register_variable_type(Lora, "tests.variables.Lora") is Lora  # same pair: no-op


def test_explicit_registration_replaces_the_automatic_name():
    class Later(nnx.Variable):
        pass

    auto = nnx.variable_name(Later)
    assert nnx.register_variable_type(Later, "tests.variables.Later") is Later
    assert nnx.variable_name(Later) == "tests.variables.Later"
    with pytest.raises(KeyError, match="No Variable kind is registered as"):
        nnx.variable_type(auto)


def test_an_explicit_name_may_take_another_class_s_automatic_name():
    class Holder(nnx.Variable):
        pass

    class Taker(nnx.Variable):
        pass

    auto = nnx.variable_name(Holder)
    nnx.register_variable_type(Taker, auto)
    assert nnx.variable_type(auto) is Taker
    with pytest.raises(KeyError, match="is not a registered Variable kind"):
        nnx.variable_name(Holder)


def test_redefining_a_class_moves_its_automatic_name_to_the_new_class():
    def define():
        class Redefined(nnx.Variable):
            pass

        return Redefined

    old, new = define(), define()
    assert nnx.variable_type(nnx.variable_name(new)) is new
    with pytest.raises(KeyError, match="Redefined'> is not a registered Variable kind"):
        nnx.variable_name(old)


def test_automatic_names_are_not_listed_as_known_kinds():
    class Unlisted(nnx.Variable):
        pass

    with pytest.raises(KeyError) as info:
        nnx.variable_type("tests.variables.nothing")
    assert "Param" in str(info.value) and "Unlisted" not in str(info.value)


class _Taken(nnx.Variable, kind="tests.variables.Taken"):
    pass


class _Other(nnx.Variable):
    pass


@pytest.mark.parametrize(
    "register, error, match",
    [
        (lambda: nnx.register_variable_type(_Other, "tests.variables.Taken"), ValueError,
         r"'tests.variables.Taken' is already registered to .*_Taken; cannot also register "
         r".*_Other"),
        (lambda: nnx.register_variable_type(_Taken, "tests.variables.Renamed"), ValueError,
         r"_Taken is already registered as 'tests.variables.Taken'; it cannot also be "
         r"registered as 'tests.variables.Renamed'"),
        (lambda: nnx.register_variable_type(nnx.Param, "Weight"), ValueError,
         "already registered as 'Param'"),
        (lambda: nnx.register_variable_type(_Other, "Param"), ValueError,
         "'Param' is already registered to nnx_core._variables.Param"),
        (lambda: nnx.register_variable_type(int, "tests.int"), TypeError,
         "expects a subclass of nnx_core.Variable, got <class 'int'>"),
        (lambda: nnx.register_variable_type(_Other(1), "tests.inst"), TypeError,
         "expects a subclass of nnx_core.Variable"),
        (lambda: nnx.register_variable_type(_Other, ""), TypeError,
         "must be a non-empty string, got ''"),
        (lambda: nnx.register_variable_type(_Other, 3), TypeError,
         "must be a non-empty string, got 3"),
        (lambda: nnx.variable_type("tests.variables.Unknown"), KeyError,
         r"No Variable kind is registered as 'tests.variables.Unknown'. Registered kinds: "
         r"BatchStat, Cache, .*Param"),
        (lambda: nnx.variable_name(int), KeyError, "<class 'int'> is not a registered"),
    ],
)
def test_kind_table_errors(register, error, match):
    with pytest.raises(error, match=match):
        register()


def test_kind_keyword_collision_fails_the_class_definition():
    with pytest.raises(ValueError, match="'tests.variables.Taken' is already registered to"):

        class Clash(nnx.Variable, kind="tests.variables.Taken"):
            pass

    assert nnx.variable_type("tests.variables.Taken") is _Taken


# -- the kind resolver hook (nnx_plugins installs one for entry-point names) ----------------------
@pytest.fixture
def asked():
    """Install a resolver that records what it is asked and names ``_Resolved`` on demand."""
    calls = []

    def resolver(key):
        calls.append(key)
        if key in ("tests.resolved", _Resolved):
            nnx.register_variable_type(_Resolved, "tests.resolved")
        if key == "tests.raises":
            raise LookupError("resolver failed for tests.raises")

    previous = nnx.set_variable_kind_resolver(resolver)
    yield calls
    nnx.set_variable_kind_resolver(previous)


class _Resolved(nnx.Variable):
    pass


class _Unnamed(nnx.Variable):
    pass


def test_resolver_names_a_kind_by_name_or_by_class(asked):
    assert nnx.variable_name(nnx.Param) == "Param"  # explicit names never ask
    assert nnx.variable_type("Param") is nnx.Param
    assert asked == []
    auto = nnx.variable_name(_Unnamed)  # an automatic name asks, and stays if nothing is known
    assert auto.endswith("._Unnamed") and asked == [_Unnamed]
    assert nnx.variable_type("tests.resolved") is _Resolved
    assert nnx.variable_name(_Resolved) == "tests.resolved"
    assert asked == [_Unnamed, "tests.resolved"]


def test_resolver_errors_propagate_and_unknown_names_still_raise_key_error(asked):
    with pytest.raises(LookupError, match="resolver failed for tests.raises"):
        nnx.variable_type("tests.raises")
    with pytest.raises(KeyError, match="No Variable kind is registered as 'tests.nothing'"):
        nnx.variable_type("tests.nothing")
    assert asked == ["tests.raises", "tests.nothing"]


def test_setting_none_removes_the_resolver(asked):
    nnx.set_variable_kind_resolver(None)
    with pytest.raises(KeyError, match="'tests.still.nothing'"):
        nnx.variable_type("tests.still.nothing")
    nnx.variable_name(_Unnamed)
    assert asked == []


# -- tracer safety --------------------------------------------------------------------------------
OUTSIDE = nnx.Param(jnp.zeros(2))
OUTSIDE_MODULE = Leaf(2)


def _sow(x):
    OUTSIDE_MODULE.sow(nnx.Intermediate, "leaked", x)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda x: setattr(OUTSIDE, "value", x), r"Cannot set a traced value on Param\(float32\[2\]\)"),
        (lambda x: OUTSIDE.__setitem__(..., x), "created outside the JAX transform"),
        (lambda x: OUTSIDE.__setitem__(0, x[0]), "created outside the JAX transform"),
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


def test_describe_helper_handles_non_arrays():
    assert _variables._describe("text") == "'text'"
    box = [1]
    assert _variables.hashable(box) == _variables.hashable(box)
    assert _variables.hashable(box) != _variables.hashable([1])
    assert repr(_variables.hashable(box)) == "[1]"


def test_a_kind_class_defined_again_takes_its_name_over():
    def define():
        class Reloaded(nnx.Variable, kind="tests.variables.Reloaded"):
            pass

        return Reloaded

    old, new = define(), define()  # e.g. a reloaded module or a re-run notebook cell
    assert nnx.variable_type("tests.variables.Reloaded") is new
    assert nnx.variable_name(new) == "tests.variables.Reloaded"
    with pytest.raises(KeyError, match="Reloaded'> is not a registered Variable kind"):
        nnx.variable_name(old)
