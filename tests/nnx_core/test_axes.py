"""StateAxes, StateSharding and Carry: construction forms, equality, display."""

from __future__ import annotations

import pickle

import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import nnx_core as nnx


def test_state_axes_from_a_mapping_pairs_or_a_state():
    by_map = nnx.StateAxes({nnx.Param: 0, ...: None})
    by_pairs = nnx.StateAxes([(nnx.Param, 0), (..., None)])
    assert by_map == by_pairs and hash(by_map) == hash(by_pairs)
    assert by_map != nnx.StateSharding({nnx.Param: 0, ...: None})
    assert repr(by_map) == "StateAxes({Param: 0, ...: None})"
    state = nnx.State({"a": {"w": nnx.Param(1)}, "b": 0})
    per_path = nnx.StateAxes(state)
    assert [(repr(f), s) for f, s in per_path.items()] == [("'a.w'", 1), ("'b'", 0)]
    assert per_path.spec_for(("a", "w"), nnx.Param(jnp.ones(1)), "here") == 1


def test_state_sharding_and_carry_display():
    s = nnx.StateSharding({"Param": P("model"), ...: P()})
    assert repr(s) == "StateSharding({'Param': P('model',), ...: P()})"
    assert repr(nnx.Carry) == "Carry" and pickle.loads(pickle.dumps(nnx.Carry)) is nnx.Carry
