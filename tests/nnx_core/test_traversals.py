"""nnx_core.traversals: flat {path: leaf} dicts of nested mappings and back, as flax.nnx's."""

from __future__ import annotations

import flax.nnx as fnnx
import jax.numpy as jnp
import pytest

import nnx_core as nnx
from nnx_core import traversals

NESTED = {"a": {"w": 1, "b": {"c": 2}}, "e": {}, "d": 3}


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"sep": "/"}, {"keep_empty_nodes": True}, {"is_leaf": lambda p, v: p == ("a", "b")}],
)
def test_flatten_mapping_matches_flax(kwargs):
    ours = traversals.flatten_mapping(NESTED, **kwargs)
    theirs = fnnx.traversals.flatten_mapping(NESTED, **kwargs)
    assert list(ours) == list(theirs)
    assert [v for v in ours.values() if v is not traversals.empty_node] == [
        v for v in theirs.values() if v is not fnnx.traversals.empty_node
    ]


@pytest.mark.parametrize("sep", [None, "/"])
def test_unflatten_mapping_inverts_flatten_as_flax(sep):
    flat = traversals.flatten_mapping(NESTED, keep_empty_nodes=True, sep=sep)
    assert traversals.unflatten_mapping(flat, sep=sep) == NESTED
    assert fnnx.traversals.unflatten_mapping(
        fnnx.traversals.flatten_mapping(NESTED, sep=sep), sep=sep
    ) == traversals.unflatten_mapping(traversals.flatten_mapping(NESTED, sep=sep), sep=sep)


def test_flatten_a_state_and_put_it_back():
    class M(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(2))

    state = nnx.state(M()).to_pure_dict()
    flat = traversals.flatten_mapping(state)
    assert list(flat) == [("w",)]
    assert traversals.flatten_to_sequence(state)[0][0] == ("w",)
    assert traversals.unflatten_mapping(flat)["w"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "action, error, match",
    [
        (lambda: traversals.flatten_mapping([1]), TypeError, "expects a mapping .*got list"),
        (lambda: traversals.flatten_to_sequence(3), TypeError, "expects a mapping .*got int"),
        (lambda: traversals.unflatten_mapping({"a": 1}), ValueError, "'a' is not a tuple path"),
        (
            lambda: traversals.unflatten_mapping({("a",): 1, ("a", "b"): 2}),
            ValueError,
            r"runs through the leaf at \('a',\)",
        ),
    ],
)
def test_errors(action, error, match):
    with pytest.raises(error, match=match):
        action()
