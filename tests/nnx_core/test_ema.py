"""EMA: a moving average of a model's Variables, against flax.nnx's, eagerly and under jit."""

from __future__ import annotations

import flax.nnx as fnnx
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx


def _model(lib):
    class M(lib.Module):
        def __init__(self):
            self.w = lib.Param(jnp.arange(4.0).reshape(2, 2))
            self.b = lib.Param(jnp.zeros(2))
            self.steps = lib.BatchStat(jnp.array(0))

        def __call__(self, x):
            return x @ self.w[...] + self.b[...]

    return M()


def _train(lib):
    model = _model(lib)
    optimizer = lib.Optimizer(model, optax.sgd(0.1), wrt=lib.Param)
    ema = lib.EMA(model, decay=0.9, only=lib.Param)
    smoothed = ema.apply_to(model)

    @lib.jit
    def step(model, optimizer, ema, x):
        grads = lib.grad(lambda m: jnp.sum(m(x) ** 2))(model)
        optimizer.update(model, grads)
        ema.update(model)

    for _ in range(3):
        step(model, optimizer, ema, jnp.ones((1, 2)))
    return model, ema, smoothed


def test_update_and_apply_to_match_flax():
    (model, ema, smoothed), (_, fema, fsmoothed) = _train(nnx), _train(fnnx)
    np.testing.assert_allclose(ema.params["w"][...], fema.params["w"][...], rtol=1e-6)
    np.testing.assert_allclose(smoothed.w[...], fsmoothed.w[...], rtol=1e-6)
    assert smoothed.w is ema.params["w"]  # shared: later updates show in the view
    assert smoothed.steps is model.steps  # untracked state is the model's
    assert not np.allclose(smoothed.w[...], model.w[...])


def test_the_average_is_a_copy_of_the_start():
    model = _model(nnx)
    ema = nnx.EMA(model, decay=0.5)
    assert ema.params["w"] is not model.w and sorted(ema.params) == ["b", "steps", "w"]
    model.w.value = model.w.value + 2
    ema.update(model)
    assert ema.params["w"].value.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert type(ema.params["steps"]) is nnx.BatchStat


def test_errors():
    class Raw(nnx.Module):
        def __init__(self):
            self.x = jnp.ones(2)

    with pytest.raises(TypeError, match=r"EMA tracks Variables only, got \w+ at 'x'"):
        nnx.EMA(Raw(), decay=0.9)
    ema = nnx.EMA(_model(nnx), decay=0.9, only=nnx.Param)
    with pytest.raises(ValueError, match=r"the updates have no Variable at 'b'"):
        ema.update({"w": nnx.Param(jnp.ones((2, 2)))})
