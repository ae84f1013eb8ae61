"""update_context / split_context / merge_context: flax.nnx's identity-keeping split and merge
across a boundary, checked against flax.nnx on the same protocol."""

from __future__ import annotations

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import pytest

import nnx_core as nnx


def _round_trip(lib, model, change, *, jitted=False):
    """Outer split, inner merge, ``change`` on the copy, inner split, outer merge."""
    with lib.update_context("t"):
        with lib.split_context("t") as ctx:
            graphdef, state = ctx.split(model)

        def inner(graphdef, state):
            with lib.merge_context("t", inner=True) as ctx:
                copy = ctx.merge(graphdef, state)
            change(copy)
            with lib.split_context("t") as ctx:
                return ctx.split(copy)

        graphdef, state = (
            inner(graphdef, state) if not jitted else _jit_inner(inner, graphdef, state)
        )
        with lib.merge_context("t", inner=False) as ctx:
            return ctx.merge(graphdef, state)


def _jit_inner(inner, graphdef, state):
    out = {}

    @jax.jit
    def f(state):
        g, s = inner(graphdef, state)
        out["graphdef"] = g
        return s

    new_state = f(state)
    return out["graphdef"], new_state


def _models(lib):
    class Bar(lib.Module):
        def __init__(self):
            self.x = 1
            self.w = lib.Param(jnp.ones(2))

    class Foo(lib.Module):
        def __init__(self):
            self.a = Bar()
            self.b = self.a

    return Foo, Bar


def _add_field(m):
    m.a.y = 2


def _new_submodule(m):
    m.c = type(m.a)()


def _add_shared(m):
    m.c = m.a


def _set_static(m):
    m.a.x = 2


@pytest.mark.parametrize("change", [_add_field, _new_submodule, _add_shared, _set_static])
def test_outer_merge_returns_the_outer_objects_changed_as_flax(change):
    seen = []
    for lib in (fnnx, nnx):
        Foo, _ = _models(lib)
        m1 = Foo()
        a, w = m1.a, m1.a.w
        m3 = _round_trip(lib, m1, change)
        assert m3 is m1 and m1.a is a and m1.b is a and m1.a.w is w
        seen.append(
            (
                m1.a.x,
                getattr(m1.a, "y", None),
                hasattr(m1, "c"),
                getattr(m1, "c", None) is m1.a,
            )
        )
    assert seen[0] == seen[1]


def test_values_changed_under_jit_come_back_into_the_outer_variables():
    Foo, _ = _models(nnx)
    m1 = Foo()
    w = m1.a.w

    def change(m):
        m.a.w.value = m.a.w.value * 3

    m3 = _round_trip(nnx, m1, change, jitted=True)
    assert m3 is m1 and m1.a.w is w
    assert m1.a.w.value.tolist() == [3.0, 3.0]


def test_an_attribute_deleted_inside_is_deleted_outside():
    Foo, _ = _models(nnx)
    m1 = Foo()
    m3 = _round_trip(nnx, m1, lambda m: delattr(m.a, "x"))
    assert m3 is m1 and not hasattr(m1.a, "x")


@pytest.mark.parametrize(
    "action, match",
    [
        (lambda: nnx.split_context("t").__enter__(), r"split_context\('t'\) needs an enclosing"),
        (
            lambda: nnx.merge_context("t", inner=True).__enter__(),
            r"merge_context\('t'\) needs an enclosing `with nnx.update_context\('t'\):`",
        ),
        (lambda: nnx.current_update_context("t"), r"none is active for tag 't'"),
    ],
)
def test_outside_an_update_context(action, match):
    with pytest.raises(ValueError, match=match):
        action()


def test_merge_before_split():
    g, s = nnx.split(_models(nnx)[0]())
    with nnx.update_context("t"), nnx.merge_context("t", inner=True) as ctx:
        with pytest.raises(ValueError, match=r"came before any split_context\('t'\).split"):
            ctx.merge(g, s)


def test_contexts_nest_per_tag():
    with nnx.update_context("t") as outer:
        with nnx.update_context("t") as inner:
            assert nnx.current_update_context("t") is inner
        assert nnx.current_update_context("t") is outer
    with pytest.raises(ValueError, match="none is active"):
        nnx.current_update_context("t")
