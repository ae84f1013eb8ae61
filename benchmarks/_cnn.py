"""A small CNN, three ways: nnx (ours), flax.nnx, and plain jax on a pytree of arrays.

The model of ``examples/digits_cnn.yaml``: 8x8x1 images, Conv 3x3 (32) + BatchNorm + relu, Conv
3x3 stride 2 (64) + BatchNorm + relu, flatten, Linear to 10 classes; softmax cross-entropy,
``optax.adamw``, batches of 64. Dropout is left out (the three would draw other masks), so the
three steps do the same math: flax's and the plain step's parameters are copied from ours.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

BATCH, CLASSES = 64, 10
EPSILON, MOMENTUM = 1e-5, 0.99


def tx() -> optax.GradientTransformation:
    return optax.adamw(3e-3)


def data(seed: int = 0) -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(jax.random.key(seed), (BATCH, 8, 8, 1))
    return x, jax.random.randint(jax.random.key(seed + 1), (BATCH,), 0, CLASSES)


def _loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def nnx_model(seed: int = 0) -> Any:
    import nnx_core as nnx
    from nnx_layers import BatchNorm, Conv, Linear

    class CNN(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs):
            self.conv1 = Conv(1, 32, (3, 3), rngs=rngs)
            self.bn1 = BatchNorm(32, rngs=rngs)
            self.conv2 = Conv(32, 64, (3, 3), strides=2, rngs=rngs)
            self.bn2 = BatchNorm(64, rngs=rngs)
            self.head = Linear(4 * 4 * 64, CLASSES, rngs=rngs)

        def __call__(self, x):
            x = jax.nn.relu(self.bn1(self.conv1(x)))
            x = jax.nn.relu(self.bn2(self.conv2(x)))
            return self.head(x.reshape(x.shape[0], -1))

    return CNN(rngs=nnx.Rngs(seed))


def nnx_step(model: Any) -> tuple[tuple[Any, ...], Any]:
    import nnx_core as nnx

    optimizer = nnx.Optimizer(model, tx(), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, x, labels):
        loss, grads = nnx.value_and_grad(lambda m: _loss(m(x), labels))(model)
        optimizer.update(model, grads)
        return loss

    return (model, optimizer), train_step


def flax_step(pure: dict[str, Any]) -> tuple[tuple[Any, ...], Any]:
    from flax import nnx as fnnx

    class CNN(fnnx.Module):
        def __init__(self, *, rngs: fnnx.Rngs):
            self.conv1 = fnnx.Conv(1, 32, (3, 3), rngs=rngs)
            self.bn1 = fnnx.BatchNorm(32, rngs=rngs)
            self.conv2 = fnnx.Conv(32, 64, (3, 3), strides=2, rngs=rngs)
            self.bn2 = fnnx.BatchNorm(64, rngs=rngs)
            self.head = fnnx.Linear(4 * 4 * 64, CLASSES, rngs=rngs)

        def __call__(self, x):
            x = jax.nn.relu(self.bn1(self.conv1(x)))
            x = jax.nn.relu(self.bn2(self.conv2(x)))
            return self.head(x.reshape(x.shape[0], -1))

    model = CNN(rngs=fnnx.Rngs(0))
    fnnx.update(model, fnnx.State(pure))
    optimizer = fnnx.Optimizer(model, tx(), wrt=fnnx.Param)

    @fnnx.jit
    def train_step(model, optimizer, x, labels):
        loss, grads = fnnx.value_and_grad(lambda m: _loss(m(x), labels))(model)
        optimizer.update(model, grads)
        return loss

    return (model, optimizer), train_step


def _conv(x: jax.Array, p: dict[str, Any], stride: int) -> jax.Array:
    y = jax.lax.conv_general_dilated(
        x, p["kernel"], (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return y + p["bias"]


def _bn(x: jax.Array, p: dict[str, Any], s: dict[str, Any]) -> tuple[jax.Array, dict]:
    mean = x.mean((0, 1, 2))
    var = jnp.maximum((x * x).mean((0, 1, 2)) - mean * mean, 0.0)
    y = (x - mean) * jax.lax.rsqrt(var + EPSILON) * p["scale"] + p["bias"]
    new = {
        "mean": MOMENTUM * s["mean"] + (1 - MOMENTUM) * mean,
        "var": MOMENTUM * s["var"] + (1 - MOMENTUM) * var,
    }
    return y, new


def plain_step(params: dict[str, Any], stats: dict[str, Any]) -> tuple[list[Any], Any]:
    """The same step on dicts of arrays, its state (params, statistics, optimizer state)
    donated: the limit. Returns ``([state], step)``; ``step(state, x, labels)``."""
    optimizer = tx()

    def forward(params, stats, x):
        h, s1 = _bn(_conv(x, params["conv1"], 1), params["bn1"], stats["bn1"])
        h = jax.nn.relu(h)
        h, s2 = _bn(_conv(h, params["conv2"], 2), params["bn2"], stats["bn2"])
        h = jax.nn.relu(h).reshape(x.shape[0], -1)
        logits = h @ params["head"]["kernel"] + params["head"]["bias"]
        return logits, {"bn1": s1, "bn2": s2}

    @functools.partial(jax.jit, donate_argnums=(0,))
    def train_step(state, x, labels):
        params, stats, opt_state = state

        def loss_fn(params):
            logits, new_stats = forward(params, stats, x)
            return _loss(logits, labels), new_stats

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), new_stats, opt_state), loss

    return [(params, stats, optimizer.init(params))], train_step
