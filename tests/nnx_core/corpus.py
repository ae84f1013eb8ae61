"""Shared corpus of example graphs, reused by the graph, state, API and round-trip tests.

Every entry of ``CORPUS`` builds a fresh model (deterministic values, no randomness except the
seed example's ``Rngs(0)``) that exercises one structural feature: nested plain containers,
shared submodules, shared Variables, reference cycles, a registered container type, raw arrays.
``SHARING[name](model)`` asserts the identities that must survive a round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx


# -- the seed example of the contract -------------------------------------------------------------
class SeedBatchStat(nnx.Variable):
    pass


class MultiState(nnx.Module):
    def __init__(self, in_features, hidden, rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (in_features, hidden)) * 0.1)
        self.bias = nnx.Param(jnp.zeros((hidden,)))
        self.running_mean = SeedBatchStat(jnp.zeros((hidden,)))
        self.running_var = SeedBatchStat(jnp.ones((hidden,)))
        self.step_count = nnx.Variable(jnp.array(0.0))
        self.cache = nnx.Cache(jnp.zeros((4, hidden)))


# -- a registered container type -----------------------------------------------------------------
class Bag:
    """A user container traversed like a dict (registered below)."""

    def __init__(self, **items: Any):
        self.items = dict(items)

    def __repr__(self) -> str:
        return f"Bag({sorted(self.items)})"


nnx.register_node_type(
    Bag,
    flatten=lambda b: (sorted(b.items.items()), None),
    unflatten=lambda children, aux: Bag(**dict(children)),
    set_key=lambda b, k, v: b.items.__setitem__(k, v),
    pop_key=lambda b, k: b.items.pop(k),
)


class Pair(NamedTuple):
    first: Any
    second: Any


# -- modules ---------------------------------------------------------------------------------------
class Leaf(nnx.Module):
    def __init__(self, n: int, scale: float = 1.0):
        self.w = nnx.Param(jnp.arange(n, dtype=jnp.float32) * scale)
        self.n = n


class Nested(nnx.Module):
    """Plain lists, tuples, dicts and a NamedTuple, nested, with static entries mixed in."""

    def __init__(self):
        self.layers = [Leaf(1), [Leaf(2), {"deep": nnx.BatchStat(jnp.ones(2))}], "static-in-list"]
        self.blocks = {"z_last": Leaf(3), "a_first": (Leaf(4), nnx.Cache(jnp.zeros(1)), 7)}
        self.pair = Pair(nnx.Param(jnp.full((2,), 5.0)), "label")
        self.name = "nested"
        self.activation = None


class SharedSub(nnx.Module):
    def __init__(self):
        shared = Leaf(2, scale=2.0)
        self.a = shared
        self.b = shared
        self.many = [shared, {"again": shared}]


class SharedVar(nnx.Module):
    def __init__(self):
        tied = nnx.Param(jnp.ones((2, 2)), sharding_names=("in", "out"))
        self.encoder = Leaf(1)
        self.decoder = Leaf(1)
        self.encoder.embedding = tied
        self.decoder.embedding = tied


class Parent(nnx.Module):
    def __init__(self):
        self.child = Child(self)
        self.w = nnx.Param(jnp.ones(1))


class Child(nnx.Module):
    def __init__(self, parent: Parent):
        self.parent = parent
        self.v = nnx.BatchStat(jnp.zeros(1))


class Cycle(nnx.Module):
    def __init__(self):
        self.parent = Parent()
        self.me = self


class WithBag(nnx.Module):
    def __init__(self):
        inner = Leaf(2)
        self.bag = Bag(w=nnx.Param(jnp.ones(2)), raw=jnp.zeros(3), inner=inner)
        self.same_inner = inner
        self.bags = [Bag(x=nnx.Intermediate(jnp.array(1)))]


class RawArrays(nnx.Module):
    def __init__(self):
        self.jax_array = jnp.arange(3.0)
        self.np_array = np.arange(4, dtype=np.int32)
        self.in_list = [jnp.ones(2), nnx.Param(jnp.zeros(2))]
        self.in_dict = {"x": np.ones((1, 2), np.float32)}


class WithRngs(nnx.Module):
    def __init__(self):
        self.rngs = nnx.Rngs(0, dropout=1)
        self.w = nnx.Param(jnp.ones(2))


def _seed() -> MultiState:
    return MultiState(3, 5, rngs=nnx.Rngs(0))


CORPUS: dict[str, Callable[[], Any]] = {
    "seed": _seed,
    "nested": Nested,
    "shared_sub": SharedSub,
    "shared_var": SharedVar,
    "cycle": Cycle,
    "with_bag": WithBag,
    "raw_arrays": RawArrays,
    "with_rngs": WithRngs,
}


def _sharing_nested(m: Nested) -> None:
    assert list(m.blocks) == ["z_last", "a_first"]  # dict insertion order survives
    assert type(m.pair) is Pair and type(m.blocks["a_first"]) is tuple
    assert m.layers[2] == "static-in-list" and m.blocks["a_first"][2] == 7


def _sharing_shared_sub(m: SharedSub) -> None:
    assert m.a is m.b is m.many[0] is m.many[1]["again"]


def _sharing_shared_var(m: SharedVar) -> None:
    assert m.encoder.embedding is m.decoder.embedding
    assert m.encoder.embedding.sharding_names == ("in", "out")
    assert m.encoder is not m.decoder


def _sharing_cycle(m: Cycle) -> None:
    assert m.me is m
    assert m.parent.child.parent is m.parent


def _sharing_with_bag(m: WithBag) -> None:
    assert type(m.bag) is Bag and m.bag.items["inner"] is m.same_inner
    assert type(m.bags[0]) is Bag


def _no_sharing(m: Any) -> None:
    pass


SHARING: dict[str, Callable[[Any], None]] = {
    "seed": _no_sharing,
    "nested": _sharing_nested,
    "shared_sub": _sharing_shared_sub,
    "shared_var": _sharing_shared_var,
    "cycle": _sharing_cycle,
    "with_bag": _sharing_with_bag,
    "raw_arrays": _no_sharing,
    "with_rngs": _no_sharing,
}

# number of leaves (Variables and raw arrays), each shared object counted once
LEAF_COUNTS = {
    "seed": 6,
    "nested": 7,
    "shared_sub": 1,
    "shared_var": 3,
    "cycle": 2,
    "with_bag": 4,
    "raw_arrays": 5,
    "with_rngs": 5,
}


def values(node: Any) -> list[tuple[tuple[Any, ...], np.ndarray]]:
    """``(path, value as numpy)`` for every leaf of ``node``, in State order (key data for keys)."""
    out = []
    for path, leaf in nnx.state(node).flat_state():
        value = leaf.value if isinstance(leaf, nnx.Variable) else leaf
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        out.append((path, np.asarray(value)))
    return out


def assert_same_values(a: Any, b: Any) -> None:
    va, vb = values(a), values(b)
    assert [p for p, _ in va] == [p for p, _ in vb]
    for (path, x), (_, y) in zip(va, vb):
        assert x.dtype == y.dtype, path
        np.testing.assert_array_equal(x, y, err_msg=str(path))


def kinds(node: Any) -> list[tuple[tuple[Any, ...], str]]:
    return [(p, type(v).__name__) for p, v in nnx.state(node).flat_state()]
