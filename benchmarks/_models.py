"""The benchmark model, three ways: nnx (ours), flax.nnx, and plain jax on a pytree of arrays.

An MLP of blocks (Linear + BatchNorm, width 32) with a counter Variable, as in flax's own
benchmarks/nnx_simple_training.py; trained with optax.sgd on batches of 32 (`configure` sets
another width and batch for every model and step built after it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

WIDTH, BATCH, DIN, DOUT = 32, 32, 1, 1


def configure(*, width: int = 32, batch: int = 32) -> None:
    """The hidden width and the batch of what is built next."""
    global WIDTH, BATCH
    WIDTH, BATCH = width, batch


def data(seed: int = 0) -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(jax.random.key(seed), (BATCH, DIN))
    return x, jnp.sin(3 * x)


# -- ours ----------------------------------------------------------------------------------------
def nnx_model(depth: int, seed: int = 0):
    import nnx_core as nnx
    from nnx_layers import BatchNorm, Linear

    class Count(nnx.Variable):
        pass

    class Block(nnx.Module):
        def __init__(self, din, dout, *, rngs):
            self.linear = Linear(din, dout, rngs=rngs)
            self.bn = BatchNorm(dout, rngs=rngs)

        def __call__(self, x):
            return jax.nn.relu(self.bn(self.linear(x)))

    class MLP(nnx.Module):
        def __init__(self, depth, *, rngs):
            self.count = Count(jnp.array(0))
            self.linear_in = Block(DIN, WIDTH, rngs=rngs)
            self.intermediates = [Block(WIDTH, WIDTH, rngs=rngs) for _ in range(depth - 2)]
            self.linear_out = Block(WIDTH, DOUT, rngs=rngs)

        def __call__(self, x):
            self.count.value += 1
            x = jax.nn.relu(self.linear_in(x))
            for layer in self.intermediates:
                x = jax.nn.relu(layer(x))
            return self.linear_out(x)

    return MLP(depth, rngs=nnx.Rngs(seed))


def nnx_steps(depth: int, *, donate: bool = False):
    """Our train step and a no-op step; ``donate`` opts in to ``donate_argnums=(0, 1)``."""
    import nnx_core as nnx

    jit = functools.partial(nnx.jit, donate_argnums=(0, 1)) if donate else nnx.jit
    model = nnx_model(depth)
    optimizer = nnx.Optimizer(model, optax.sgd(1e-3))

    @jit
    def train_step(model, optimizer, x, y):
        def loss_fn(model):
            return jnp.mean((y - model(x)) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    @jit
    def noop(model, optimizer, x, y):
        return None

    return (model, optimizer), train_step, noop


# -- flax.nnx ------------------------------------------------------------------------------------
def flax_model(depth: int, seed: int = 0):
    from flax import nnx as fnnx

    class Count(fnnx.Variable):
        pass

    class Block(fnnx.Module):
        def __init__(self, din, dout, *, rngs):
            self.linear = fnnx.Linear(din, dout, rngs=rngs)
            self.bn = fnnx.BatchNorm(dout, rngs=rngs)

        def __call__(self, x):
            return jax.nn.relu(self.bn(self.linear(x)))

    class MLP(fnnx.Module):
        def __init__(self, depth, *, rngs):
            self.count = Count(jnp.array(0))
            self.linear_in = Block(DIN, WIDTH, rngs=rngs)
            self.intermediates = fnnx.List(
                [Block(WIDTH, WIDTH, rngs=rngs) for _ in range(depth - 2)]
            )
            self.linear_out = Block(WIDTH, DOUT, rngs=rngs)

        def __call__(self, x):
            self.count[...] += 1
            x = jax.nn.relu(self.linear_in(x))
            for layer in self.intermediates:
                x = jax.nn.relu(layer(x))
            return self.linear_out(x)

    return MLP(depth, rngs=fnnx.Rngs(seed))


def flax_steps(depth: int, mode: str):
    from flax import nnx as fnnx

    model = flax_model(depth)
    optimizer = fnnx.Optimizer(model, optax.sgd(1e-3), wrt=fnnx.Param)

    def train_step(model, optimizer, x, y):
        def loss_fn(model):
            return jnp.mean((y - model(x)) ** 2)

        loss, grads = fnnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    def noop(model, optimizer, x, y):
        return None

    if mode == "default":
        return (model, optimizer), fnnx.jit(train_step), fnnx.jit(noop)
    if mode == "jit_partial":
        return (
            (model, optimizer),
            fnnx.jit_partial(train_step, model, optimizer, graph=False),
            fnnx.jit_partial(noop, model, optimizer, graph=False),
        )
    raise ValueError(mode)


# -- plain jax on a pytree -----------------------------------------------------------------------
def plain_steps(depth: int, *, donate: bool = True):
    """The same math on dicts of arrays: with ``donate`` (params, statistics, count and optimizer
    state donated, so XLA updates them in place) the physical limit of a jitted train step."""
    model = nnx_model(depth)  # same initial values as ours
    import nnx_core as nnx

    params = nnx.state(model, nnx.Param).to_pure_dict()
    stats = nnx.state(model, nnx.BatchStat).to_pure_dict()
    count = jnp.array(0)
    tx = optax.sgd(1e-3)
    opt_state = tx.init(params)
    opt_step = jnp.zeros((), jnp.uint32)  # the optimizer's step count, as ours and flax's keep
    blocks = ["linear_in", *[("intermediates", i) for i in range(depth - 2)], "linear_out"]

    def get(tree, name):
        return tree[name[0]][name[1]] if isinstance(name, tuple) else tree[name]

    def bn(x, p, s):
        squared = x * x  # before the mean: the order XLA compiles best (performance.md)
        mean = x.mean(0)
        var = jnp.maximum(squared.mean(0) - mean * mean, 0.0)
        y = (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]
        new = {"mean": 0.99 * s["mean"] + 0.01 * mean, "var": 0.99 * s["var"] + 0.01 * var}
        return y, new

    def forward(params, stats, x):
        new_stats = {"intermediates": {}}
        for i, name in enumerate(blocks):
            p, s = get(params, name), get(stats, name)
            h = x @ p["linear"]["kernel"] + p["linear"]["bias"]
            h, ns = bn(h, p["bn"], s["bn"])
            x = jax.nn.relu(h)
            if i < len(blocks) - 1:
                x = jax.nn.relu(x)
            if isinstance(name, tuple):
                new_stats["intermediates"][name[1]] = {"bn": ns}
            else:
                new_stats[name] = {"bn": ns}
        return x, new_stats

    @functools.partial(jax.jit, donate_argnums=(0,) if donate else ())
    def train_step(state, x, y):
        params, stats, count, opt_state, opt_step = state

        def loss_fn(params):
            pred, new_stats = forward(params, stats, x)
            return jnp.mean((y - pred) ** 2), new_stats

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        return (new_params, new_stats, count + 1, opt_state, opt_step + 1), loss

    @jax.jit
    def noop(state, x, y):
        return None

    return (params, stats, count, opt_state, opt_step), train_step, noop
