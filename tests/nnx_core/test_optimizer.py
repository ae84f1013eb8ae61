"""Optimizer over optax, and the numerical equivalence of a full train step with plain jax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nnx_core as nnx
from nnx_layers import BatchNorm, Linear


class Block(nnx.Module):
    def __init__(self, din, dout, *, rngs):
        self.linear = Linear(din, dout, rngs=rngs)
        self.bn = BatchNorm(dout, rngs=rngs)

    def __call__(self, x):
        return jax.nn.relu(self.bn(self.linear(x)))


class MLP(nnx.Module):
    def __init__(self, depth, *, rngs):
        self.blocks = [Block(1 if i == 0 else 16, 16, rngs=rngs) for i in range(depth)]
        self.head = Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _plain_forward(params, stats, x):
    new_stats = []
    for p, s in zip(params["blocks"], stats["blocks"]):
        h = x @ p["linear"]["kernel"] + p["linear"]["bias"]
        mean = h.mean(0)
        var = jnp.maximum((h * h).mean(0) - mean * mean, 0.0)
        h = (h - mean) * jax.lax.rsqrt(var + 1e-5) * p["bn"]["scale"] + p["bn"]["bias"]
        new_stats.append(
            {
                "bn": {
                    "mean": 0.99 * s["bn"]["mean"] + 0.01 * mean,
                    "var": 0.99 * s["bn"]["var"] + 0.01 * var,
                }
            }
        )
        x = jax.nn.relu(h)
    return x @ params["head"]["kernel"] + params["head"]["bias"], {"blocks": new_stats}


def test_100_steps_equal_a_plain_jax_train_step():
    model = MLP(3, rngs=nnx.Rngs(0))
    # SGD with momentum: Adam would divide the ~1e-9 gradients of the pre-BatchNorm biases by
    # their own magnitude, turning float rounding noise into full-size steps in either program.
    tx = optax.sgd(0.05, momentum=0.9)
    params = nnx.state(model, nnx.Param).to_pure_dict()
    stats = nnx.state(model, nnx.BatchStat).to_pure_dict()
    params = {"blocks": [params["blocks"][i] for i in range(3)], "head": params["head"]}
    stats = {"blocks": [stats["blocks"][i] for i in range(3)]}
    opt_state = tx.init(params)
    optimizer = nnx.Optimizer(model, tx)
    x = jax.random.normal(jax.random.key(1), (32, 1))
    y = jnp.sin(3 * x)

    @nnx.jit
    def step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    @jax.jit
    def plain_step(params, stats, opt_state, x, y):
        def loss_fn(p):
            pred, new_stats = _plain_forward(p, stats, x)
            return jnp.mean((pred - y) ** 2), new_stats

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state, loss

    for _ in range(100):
        loss = step(model, optimizer, x, y)
        params, stats, opt_state, plain_loss = plain_step(params, stats, opt_state, x, y)
    np.testing.assert_allclose(loss, plain_loss, rtol=1e-5, atol=1e-6)
    ours = nnx.state(model, nnx.Param).to_pure_dict()
    for i in range(3):
        for layer in ("linear", "bn"):
            for name, value in ours["blocks"][i][layer].items():
                np.testing.assert_allclose(value, params["blocks"][i][layer][name], atol=1e-5)
        np.testing.assert_allclose(
            model.blocks[i].bn.mean.value, stats["blocks"][i]["bn"]["mean"], atol=1e-5
        )
    np.testing.assert_allclose(ours["head"]["kernel"], params["head"]["kernel"], atol=1e-5)
    assert int(optimizer.step.value) == 100


@pytest.mark.parametrize("tx", [optax.sgd(0.1, momentum=0.9), optax.adamw(1e-2), optax.lion(1e-3)])
def test_optimizer_matches_optax_on_pure_params(tx):
    model = Linear(3, 2, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, tx)
    params = nnx.state(model, nnx.Param).to_pure_dict()
    opt_state = tx.init(params)
    x = jnp.ones((4, 3))

    def loss(p):
        return jnp.sum((x @ p["kernel"] + p["bias"]) ** 2)

    for _ in range(3):
        opt.update(model, nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model))
        updates, opt_state = tx.update(jax.grad(loss)(params), opt_state, params)
        params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(model.kernel.value, params["kernel"], rtol=1e-5, atol=1e-6)


def test_optimizer_state_is_splittable_and_round_trips():
    model = Linear(3, 2, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-3))
    opt.update(model, nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 3)))))(model))
    graphdef, state = nnx.split(opt)
    assert {type(v).__name__ for _, v in state.flat_state()} == {"OptState"}
    restored = nnx.merge(graphdef, state)
    assert int(restored.step.value) == 1
    restored.update(model, nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 3)))))(model))
    assert int(restored.step.value) == 2


def test_optimizer_with_extra_update_arguments():
    model = Linear(2, 1, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.lbfgs())
    x, y = jnp.ones((4, 2)), jnp.zeros((4, 1))

    def loss_of_params(params):  # (optax hands it arrays, as flax.nnx's Optimizer does)
        return jnp.mean((x @ params["kernel"] + params["bias"] - y) ** 2)

    def loss_now():
        return float(loss_of_params(nnx.state(model, nnx.Param).to_pure_dict()))

    start = loss_now()
    for _ in range(5):
        value, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        opt.update(model, grads, value=value, grad=grads, value_fn=loss_of_params)
    assert loss_now() < start * 0.1


def test_optimizer_wrt_a_custom_kind_leaves_other_params_alone():
    class Lora(nnx.Param):
        pass

    class M(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(2))
            self.a = Lora(jnp.ones(2))

    m = M()
    opt = nnx.Optimizer(m, optax.sgd(1.0), wrt=Lora)
    opt.update(m, nnx.grad(lambda m: jnp.sum(m.w.value * m.a.value), wrt=Lora)(m))
    assert m.w.value.tolist() == [1.0, 1.0] and m.a.value.tolist() == [0.0, 0.0]


def test_optimizer_narrows_gradients_of_all_params_to_wrt_as_flax():
    import flax.nnx as fnnx

    results = []
    for lib in (fnnx, nnx):

        class Lora(lib.Param):
            pass

        class M(lib.Module):
            def __init__(self, lib=lib, Lora=Lora):
                self.w = lib.Param(jnp.ones(2))
                self.a = Lora(jnp.full(2, 2.0))

        m = M()
        opt = lib.Optimizer(m, optax.sgd(1.0), wrt=Lora)
        grads = lib.grad(lambda m: jnp.sum(m.w[...] * m.a[...]))(m)  # of every Param
        opt.update(m, grads)
        results.append((m.w[...].tolist(), m.a[...].tolist()))
    assert results[0] == results[1] == ([1.0, 1.0], [1.0, 1.0])


def test_optimizer_errors():
    model = Linear(3, 2, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="expects an optax GradientTransformation"):
        nnx.Optimizer(model, "adam")
    opt = nnx.Optimizer(model, optax.sgd(0.1))
    grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 3)))))(model)
    del grads["bias"]
    with pytest.raises(ValueError, match=r"Missing: \['bias'\]"):
        opt.update(model, grads)


def test_optax_is_handed_arrays_not_variables():
    seen = []

    def spy(updates, state, params=None):
        seen.append((updates, params))
        return updates, state

    model = Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.GradientTransformation(lambda params: (), spy))
    grads = nnx.grad(lambda m: m(jnp.ones((1, 2))).sum())(model)
    opt.update(model, grads)
    (given,) = seen
    leaves = jax.tree_util.tree_leaves(given, is_leaf=lambda x: isinstance(x, nnx.Variable))
    assert len(leaves) == 4 and all(isinstance(x, jax.Array) for x in leaves)
