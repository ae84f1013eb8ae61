"""What every Variable class gets installed: operators on the value (in-place ones keep the
Variable) and the pytree registration (one leaf, the value)."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

from .corpus import Leaf

# Operators forward to the value whatever its type; numpy values keep these tables fast (every
# new jnp op compiles), and test_jnp_operators checks the jax.Array path once.
X = np.array([1.0, 2.0, 4.0], np.float32)
INTS = np.array([6, 3, 5], np.int32)


@pytest.mark.parametrize(
    "op",
    [
        operator.add,
        operator.sub,
        operator.mul,
        operator.truediv,
        operator.floordiv,
        operator.mod,
        operator.pow,
        operator.lt,
        operator.le,
        operator.gt,
        operator.ge,
    ],
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
    [
        (operator.iadd, operator.add),
        (operator.isub, operator.sub),
        (operator.imul, operator.mul),
        (operator.itruediv, operator.truediv),
        (operator.ipow, operator.pow),
    ],
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


# -- pytree ---------------------------------------------------------------------------------------
def test_variable_is_a_pytree_with_one_leaf():
    v = nnx.Param(jnp.ones(2), a=1)
    assert jax.tree_util.tree_leaves(v) == [v.value]
    ((path, _),) = jax.tree_util.tree_leaves_with_path(v)
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
