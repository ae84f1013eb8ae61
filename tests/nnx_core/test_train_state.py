"""TrainState: create, apply (callers, methods, named State fields), apply_gradients under plain
jax.jit, subclasses with extra and static fields, and agreement with nnx_core.Optimizer."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
import pytest

import nnx_core as nnx


class Model(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.array([1.0, -2.0]))
        self.calls = nnx.BatchStat(jnp.array(0))

    def __call__(self, x):
        self.calls.value = self.calls.value + 1
        return x * self.w.value

    def double(self, x):
        return 2 * self(x)


class WithStats(nnx.TrainState):
    stats: nnx.State
    note: str = dataclasses.field(metadata={"static": True})


def _state(cls=nnx.TrainState, **kwargs):
    graphdef, params, stats = nnx.split(Model(), nnx.Param, ...)
    extra = {"stats": stats, "note": "run"} if cls is WithStats else {}
    return cls.create(graphdef, params=params, tx=optax.adam(0.1), **extra, **kwargs), stats


def test_create_fields():
    state, _ = _state(step=3)
    assert int(state.step) == 3 and state.params["w"].value.tolist() == [1.0, -2.0]
    assert jax.tree.structure(state.opt_state) == jax.tree.structure(
        optax.adam(0.1).init(state.params)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.step = 4


def test_apply_returns_the_output_and_the_new_state_without_changing_this_one():
    state, stats = _state(WithStats)
    y, (graphdef, new_state) = state.apply("params", "stats")(jnp.ones(2))
    assert y.tolist() == [1.0, -2.0] and int(new_state["calls"].value) == 1
    assert int(state.stats["calls"].value) == 0  # the TrainState is immutable
    y2, _ = state.apply(state.params, stats).double(jnp.ones(2))
    assert y2.tolist() == [2.0, -4.0] and graphdef == state.graphdef


def test_apply_gradients_matches_the_optimizer():
    state, stats = _state()
    model = Model()
    optimizer = nnx.Optimizer(model, optax.adam(0.1))

    def loss(model, x):
        return (model(x) ** 2).sum()

    @jax.jit
    def train_step(state, x):
        def loss_fn(params):
            y, _ = state.apply(params, stats)(x)
            return (y**2).sum()

        return state.apply_gradients(jax.grad(loss_fn)(state.params))

    for _ in range(3):
        state = train_step(state, jnp.ones(2))
        optimizer.update(model, nnx.grad(loss)(model, jnp.ones(2)))
    assert int(state.step) == 3
    assert state.params["w"].value.tolist() == pytest.approx(model.w.value.tolist())


def test_subclass_fields_ride_through_jit_and_replace():
    state, _ = _state(WithStats)

    @jax.jit
    def step(state):
        _, (_, new) = state.apply("params", "stats")(jnp.ones(2))
        _, stats = new.split(nnx.Param, ...)
        return state.apply_gradients(jax.tree.map(jnp.zeros_like, state.params), stats=stats)

    out = step(step(state))
    assert int(out.stats["calls"].value) == 2 and out.note == "run" and int(out.step) == 2
    leaves_fields = jax.tree_util.tree_flatten_with_path(out)[0]
    assert not any(
        "note" in jax.tree_util.keystr(p) or "tx" in jax.tree_util.keystr(p)
        for p, _ in leaves_fields
    )  # static fields are not leaves
    assert out.replace(note="other").note == "other"


def test_generic_annotation():
    assert nnx.TrainState[Model].__origin__ is nnx.TrainState


def test_apply_rejects_a_field_that_is_not_a_state():
    state, _ = _state(WithStats)
    with pytest.raises(
        TypeError,
        match=r"WithStats.apply\('note'\): the field 'note' holds a "
        r"str, not a State",
    ):
        state.apply("params", "note")


def test_an_apply_caller_has_no_special_attributes():
    state, _ = _state(WithStats)
    caller = state.apply("params", "stats")
    with pytest.raises(AttributeError, match="__len__"):
        caller.__len__  # noqa: B018 - the lookup is the test


def test_graphdef_apply_calls_a_rebuilt_model_as_flax():
    import flax.nnx as fnnx

    outs = []
    for lib in (fnnx, nnx):

        class Scale(lib.Module):
            def __init__(self, lib=lib):
                self.w = lib.Param(jnp.array([1.0, -2.0]))
                self.calls = lib.BatchStat(jnp.array(0))

            def __call__(self, x):
                self.calls[...] = self.calls[...] + 1
                return x * self.w[...]

        graphdef, params, stats = lib.split(Scale(), lib.Param, ...)
        y, (g2, new_state) = graphdef.apply(params, stats)(jnp.ones(2))
        assert g2 == graphdef
        if lib is nnx:  # here the call works on copies: the given states stay as they were
            assert int(stats["calls"][...]) == 0
        outs.append((y.tolist(), int(new_state["calls"][...])))
    assert outs[0] == outs[1] == ([1.0, -2.0], 1)
