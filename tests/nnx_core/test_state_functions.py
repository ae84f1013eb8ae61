"""flax.nnx's free functions over States, against flax.nnx's own results."""

from __future__ import annotations

import flax.nnx as fnnx
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx

# flax.nnx 0.12 warns that its State class will be replaced by dict; it is the oracle here
pytestmark = pytest.mark.filterwarnings("ignore:`flax.nnx.State` will be deprecated")


def state_pair():
    ours = nnx.State(
        {"layers": {0: {"w": nnx.Param(jnp.ones(2))}}, "n": nnx.BatchStat(jnp.zeros(1))}
    )
    theirs = fnnx.State(
        {"layers": {0: {"w": fnnx.Param(jnp.ones(2))}}, "n": fnnx.BatchStat(jnp.zeros(1))}
    )
    return ours, theirs


def test_flat_state_and_pure_dict_functions_match_flax():
    ours, theirs = state_pair()
    assert [p for p, _ in nnx.to_flat_state(ours)] == [p for p, _ in fnnx.to_flat_state(theirs)]
    mapping = {("a", "b"): 1, ("c",): 2}
    assert (
        nnx.from_flat_state(mapping).to_pure_dict() == fnnx.from_flat_state(mapping).to_pure_dict()
    )
    pure, fpure = nnx.to_pure_dict(ours), fnnx.to_pure_dict(theirs)
    assert pure.keys() == fpure.keys() and list(pure["layers"]) == list(fpure["layers"]) == [0]
    assert nnx.to_pure_dict(ours, lambda v: v.shape) == {"layers": {0: {"w": (2,)}}, "n": (1,)}
    assert nnx.restore_int_paths({"layers": {"0": {"w": 1}}}) == fnnx.restore_int_paths(
        {"layers": {"0": {"w": 1}}}
    )


def test_replace_by_pure_dict_writes_in_place_as_flax():
    ours, theirs = state_pair()
    w = ours["layers"][0]["w"]
    new = {"layers": {"0": {"w": jnp.full(2, 3.0)}}, "n": jnp.ones(1)}
    nnx.replace_by_pure_dict(ours, new)
    fnnx.replace_by_pure_dict(theirs, fnnx.restore_int_paths(new))
    assert ours["layers"][0]["w"] is w
    np.testing.assert_array_equal(w.value, theirs["layers"][0]["w"][...])
    nnx.replace_by_pure_dict(ours, {"layers": {0: {"w": 1}}, "n": 2}, lambda leaf, v: v * 10)
    assert ours["n"] == 20
    with pytest.raises(KeyError, match=r"Pure dict lacks entries for: n"):
        nnx.replace_by_pure_dict(ours, {"layers": {0: {"w": 1}}})


def test_map_filter_split_merge_and_diff():
    ours, _ = state_pair()
    doubled = nnx.map_state(lambda p, v: v.replace(v.value * 2), ours)
    np.testing.assert_array_equal(doubled["layers"][0]["w"].value, [2.0, 2.0])
    params = nnx.filter_state(ours, nnx.Param)
    assert [p for p, _ in params.flat_state()] == [("layers", 0, "w")]
    p, rest = nnx.split_state(ours, nnx.Param, ...)
    assert nnx.merge_state(p, rest) == ours
    assert nnx.statelib.diff(ours, p) == {"n": ours["n"]} and nnx.statelib.diff(p, ours) == {}
    with pytest.raises(ValueError, match=r"Non-exhaustive filters"):
        nnx.split_state(ours, nnx.Param)
