"""nnx.data / nnx.static marks, Data / Static annotations and nnx.dataclass, against flax.nnx."""

from __future__ import annotations

import dataclasses

import flax.nnx as fnnx
import jax
import jax.numpy as jnp
import pytest

import nnx_core as nnx


def make(lib):
    class Foo(lib.Pytree):
        def __init__(self, a, b, c):
            self.a = lib.data(a)
            self.b = lib.static(b)
            self.c = c

    return Foo(1, 2, jnp.array(3))


def counts(foo, lib):
    out = [len(jax.tree.leaves(foo))]
    foo.a = 3
    out.append(len(jax.tree.leaves(foo)))
    foo.a = lib.static(3)
    out.append(len(jax.tree.leaves(foo)))
    foo.b = lib.data(4)
    out.append(len(jax.tree.leaves(foo)))
    foo.c = lib.static(5)
    out.append(len(jax.tree.leaves(foo)))
    return out


def test_marks_change_what_is_a_leaf_as_in_flax():
    assert counts(make(nnx), nnx) == counts(make(fnnx), fnnx) == [2, 2, 1, 2, 1]
    foo = make(nnx)
    foo.a = "hello"  # a data attribute stays data
    assert jax.tree.leaves(foo)[0] == "hello" and "_nnx_data_marks" not in repr(foo)
    doubled = jax.tree.map(lambda x: x * 2, make(nnx))
    assert doubled.a == 2 and doubled.b == 2 and int(doubled.c) == 6
    assert int(jax.jit(lambda f: f)(make(nnx)).a) == 1


def test_static_refuses_state_and_data_needs_one_form():
    with pytest.raises(ValueError, match=r"nnx.static: Found data in value of type Array"):
        nnx.static(jnp.ones(1))
    with pytest.raises(ValueError, match=r"Found data in value of type list \(Param\)"):
        nnx.static([nnx.Param(1)])
    with pytest.raises(
        TypeError, match=r"nnx.data\(\) takes either a value .* not both; got \['default'\]"
    ):
        nnx.data(1, default=2)


def test_dataclass_fields_and_annotations():
    @nnx.dataclass
    class Foo(nnx.Pytree):
        a: int = nnx.static()
        b: jax.Array = nnx.data()

    @nnx.dataclass
    class Bar(nnx.Pytree):
        a: int = nnx.data(default=3)

    @dataclasses.dataclass
    class Baz(nnx.Pytree):
        a: nnx.Data[int]
        b: nnx.Static[int]
        c: jax.Array

    assert len(jax.tree.leaves(Foo(a=1, b=jnp.array(2)))) == 1
    assert jax.tree.leaves(Bar()) == [3]
    baz = Baz(a=1, b=2, c=jnp.array(3))
    assert len(jax.tree.leaves(baz)) == 2
    baz.a = nnx.static(3)
    assert len(jax.tree.leaves(baz)) == 1
    with pytest.raises(
        ValueError, match=r"Foo.a \(a static field\): Found unexpected data on value of type Array"
    ):
        Foo(a=jnp.array(3), b=jnp.array(1))


def test_is_data_and_has_data():
    assert nnx.is_data(jnp.ones(1)) and nnx.is_data(nnx.Param(1)) and nnx.is_data(nnx.Rngs(0))
    assert not nnx.is_data(1) and not nnx.is_data("a")
    assert len(nnx.has_data({"x": [jnp.ones(1), 2]})) == 1 and nnx.has_data((1, "a")) == []


def test_an_attribute_marked_static_refuses_data_until_marked_again():
    class Foo(nnx.Pytree):
        def __init__(self):
            self.a = nnx.static(3)

    foo = Foo()
    foo.a = ("hi", 4)  # plain values stay allowed
    with pytest.raises(
        ValueError,
        match=r"Foo.a \(marked nnx.static\): Found data on value of type list \(\w+\)",
    ):
        foo.a = ["hi", jnp.array(6)]
    assert foo.a == ("hi", 4)  # nothing half-written
    foo.a = nnx.data(jnp.array(6))  # a new mark takes the data
    assert len(jax.tree.leaves(foo)) == 1


def test_static_mark_refusal_matches_flax():
    for lib in (fnnx, nnx):

        class Foo(lib.Pytree):
            def __init__(self, lib=lib):
                self.a = lib.static(3)

        with pytest.raises(ValueError, match="Found data on value of type"):
            Foo().a = ["hi", jnp.array(6)]
