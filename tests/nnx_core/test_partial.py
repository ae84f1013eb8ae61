"""cached_partial and jit_partial: the same numbers and state as jit, flax parity, leaks."""

from __future__ import annotations

import flax.nnx as fnnx
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx

from .probe import Probe, assert_probed


class Lin(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.array([[0.5], [-0.25]]))
        self.steps = nnx.BatchStat(jnp.array(0))


class FlaxLin(fnnx.Module):
    def __init__(self):
        self.w = fnnx.Param(jnp.array([[0.5], [-0.25]]))
        self.steps = fnnx.BatchStat(jnp.array(0))


def train_step(lib, model, opt, x, y):
    def loss_fn(m):
        m.steps[...] = m.steps[...] + 1
        return jnp.mean((x @ m.w[...] - y) ** 2)

    loss, grads = lib.value_and_grad(loss_fn)(model)
    opt.update(model, grads)
    return loss


X = jnp.arange(8.0).reshape(4, 2) / 8
Y = jnp.ones((4, 1))


def test_cached_partial_matches_flax_cached_partial():
    model, fmodel = Lin(), FlaxLin()
    opt = nnx.Optimizer(model, optax.sgd(0.1))
    fopt = fnnx.Optimizer(fmodel, optax.sgd(0.1), wrt=fnnx.Param)
    step = nnx.cached_partial(nnx.jit(lambda m, o, x, y: train_step(nnx, m, o, x, y)), model, opt)
    fstep = fnnx.cached_partial(
        fnnx.jit(lambda m, o, x, y: train_step(fnnx, m, o, x, y)), fmodel, fopt
    )
    losses = [float(step(X, Y)) for _ in range(5)]
    flax_losses = [float(fstep(X, Y)) for _ in range(5)]
    np.testing.assert_allclose(losses, flax_losses, rtol=1e-6)
    np.testing.assert_allclose(model.w.value, fmodel.w[...], rtol=1e-6)
    assert int(model.steps.value) == int(fmodel.steps[...]) == 5 and int(opt.step.value) == 5


def test_jit_partial_with_donation_gives_the_numbers_of_jit():
    a, b = Lin(), Lin()
    opt_a, opt_b = nnx.Optimizer(a, optax.adam(0.1)), nnx.Optimizer(b, optax.adam(0.1))
    plain = nnx.jit(lambda m, o, x, y: train_step(nnx, m, o, x, y))
    partial = nnx.jit_partial(
        lambda m, o, x, y: train_step(nnx, m, o, x, y), b, opt_b, donate_argnums=(0, 1)
    )
    for _ in range(4):
        assert float(plain(a, opt_a, X, Y)) == float(partial(X, Y))
    assert a.w.value.tolist() == b.w.value.tolist() and int(b.steps.value) == 4


def test_jit_partial_static_argnums_count_the_partial_arguments():
    traces = []

    def scaled(p, k, x):
        traces.append(k)
        return p(x) * k

    p = Probe()
    f = nnx.jit_partial(scaled, p, static_argnums=1)
    assert f(3, jnp.ones(2)).tolist() == [6.0, 6.0] and f(3, jnp.ones(2)).tolist() == [6.0, 6.0]
    assert traces == [3]
    assert_probed(p, calls=2, seen=4.0)
    captured = Probe()
    with pytest.raises(nnx.TraceContextError, match="created outside the JAX transform"):
        nnx.jit_partial(lambda x: captured(x))(jnp.ones(2))
