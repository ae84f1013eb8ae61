"""The transformer benchmark's model, three ways: nnx (ours), flax.nnx, and plain jax.

A GPT-style decoder: token and position embeddings, pre-LayerNorm blocks (causal
MultiHeadAttention, then a gelu MLP of 4x the width, each in a residual), a final LayerNorm and
a linear head over the vocabulary; next-token cross-entropy, trained with ``optax.adamw``.
The three versions do the same math on the same parameters: flax's and the plain step's are
copied from ours (``copy_into_flax``, ``plain_state``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax


@dataclass(frozen=True)
class Config:
    layers: int = 12
    width: int = 256
    heads: int = 4
    seq: int = 128
    batch: int = 8
    vocab: int = 1024
    learning_rate: float = 3e-4
    epsilon: float = 1e-6  # LayerNorm's, as both libraries' default

    def tx(self) -> optax.GradientTransformation:
        return optax.adamw(self.learning_rate)


def data(cfg: Config, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    """Token ids ``(batch, seq)`` and the next-token targets."""
    ids = jax.random.randint(jax.random.key(seed), (cfg.batch, cfg.seq + 1), 0, cfg.vocab)
    return ids[:, :-1], ids[:, 1:]


def _cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


# -- ours ----------------------------------------------------------------------------------------
def nnx_block(cfg: Config) -> type:
    """Our pre-LayerNorm transformer block class for ``cfg``."""
    import nnx_core as nnx
    from nnx_layers import LayerNorm, Linear, MultiHeadAttention, gelu

    class Block(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs):
            w = cfg.width
            self.ln1 = LayerNorm(w, rngs=rngs)
            self.attn = MultiHeadAttention(cfg.heads, w, decode=False, rngs=rngs)
            self.ln2 = LayerNorm(w, rngs=rngs)
            self.fc = Linear(w, 4 * w, rngs=rngs)
            self.proj = Linear(4 * w, w, rngs=rngs)

        def __call__(self, x, mask):
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.proj(gelu(self.fc(self.ln2(x))))

    return Block


def nnx_model(cfg: Config, seed: int = 0) -> Any:
    import nnx_core as nnx
    from nnx_layers import Embed, LayerNorm, Linear, make_causal_mask

    Block = nnx_block(cfg)

    class GPT(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs):
            self.tokens = Embed(cfg.vocab, cfg.width, rngs=rngs)
            self.positions = Embed(cfg.seq, cfg.width, rngs=rngs)
            self.blocks = [Block(rngs=rngs) for _ in range(cfg.layers)]
            self.ln_f = LayerNorm(cfg.width, rngs=rngs)
            self.head = Linear(cfg.width, cfg.vocab, use_bias=False, rngs=rngs)

        def __call__(self, ids):
            x = self.tokens(ids) + self.positions(jnp.arange(ids.shape[-1]))
            mask = make_causal_mask(ids)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    return GPT(rngs=nnx.Rngs(seed))


def nnx_loss(model: Any, ids: jax.Array, targets: jax.Array) -> jax.Array:
    return _cross_entropy(model(ids), targets)


def nnx_step(cfg: Config, model: Any) -> tuple[tuple[Any, ...], Any]:
    """Our default ``nnx_core.jit`` train step (no opt-in) and its Module arguments."""
    import nnx_core as nnx

    optimizer = nnx.Optimizer(model, cfg.tx(), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, ids, targets):
        loss, grads = nnx.value_and_grad(nnx_loss)(model, ids, targets)
        optimizer.update(model, grads)
        return loss

    return (model, optimizer), train_step


# -- flax.nnx ------------------------------------------------------------------------------------
def flax_block(cfg: Config) -> type:
    """flax.nnx's version of the block class for ``cfg``."""
    from flax import nnx as fnnx

    class Block(fnnx.Module):
        def __init__(self, *, rngs: fnnx.Rngs):
            w = cfg.width
            self.ln1 = fnnx.LayerNorm(w, rngs=rngs)
            self.attn = fnnx.MultiHeadAttention(cfg.heads, w, decode=False, rngs=rngs)
            self.ln2 = fnnx.LayerNorm(w, rngs=rngs)
            self.fc = fnnx.Linear(w, 4 * w, rngs=rngs)
            self.proj = fnnx.Linear(4 * w, w, rngs=rngs)

        def __call__(self, x, mask):
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.proj(fnnx.gelu(self.fc(self.ln2(x))))

    return Block


def flax_model(cfg: Config, seed: int = 0) -> Any:
    from flax import nnx as fnnx

    Block = flax_block(cfg)

    class GPT(fnnx.Module):
        def __init__(self, *, rngs: fnnx.Rngs):
            self.tokens = fnnx.Embed(cfg.vocab, cfg.width, rngs=rngs)
            self.positions = fnnx.Embed(cfg.seq, cfg.width, rngs=rngs)
            self.blocks = fnnx.List([Block(rngs=rngs) for _ in range(cfg.layers)])
            self.ln_f = fnnx.LayerNorm(cfg.width, rngs=rngs)
            self.head = fnnx.Linear(cfg.width, cfg.vocab, use_bias=False, rngs=rngs)

        def __call__(self, ids):
            x = self.tokens(ids) + self.positions(jnp.arange(ids.shape[-1]))
            mask = fnnx.make_causal_mask(ids)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    return GPT(rngs=fnnx.Rngs(seed))


def copy_into_flax(pure: dict[str, Any], model: Any) -> None:
    """Give the flax.nnx model the parameters of ours (``nnx.state(ours).to_pure_dict()``)."""
    from flax import nnx as fnnx

    state = fnnx.state(model)
    fnnx.replace_by_pure_dict(state, pure)
    fnnx.update(model, state)


def flax_step(cfg: Config, model: Any) -> tuple[tuple[Any, ...], Any]:
    """flax.nnx's default ``nnx.jit`` train step and its Module arguments."""
    from flax import nnx as fnnx

    optimizer = fnnx.Optimizer(model, cfg.tx(), wrt=fnnx.Param)

    @fnnx.jit
    def train_step(model, optimizer, ids, targets):
        loss, grads = fnnx.value_and_grad(nnx_loss)(model, ids, targets)
        optimizer.update(model, grads)
        return loss

    return (model, optimizer), train_step


# -- plain jax on a pytree -----------------------------------------------------------------------
def _layer_norm(p: dict[str, Any], x: jax.Array, eps: float) -> jax.Array:
    squared = jnp.square(x)  # before the mean: the order XLA compiles best (performance.md)
    mean = x.mean(-1, keepdims=True)
    var = jnp.maximum(0.0, squared.mean(-1, keepdims=True) - jnp.square(mean))
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["scale"] + p["bias"]


def _attention(p: dict[str, Any], x: jax.Array, mask: jax.Array) -> jax.Array:
    def project(name: str) -> jax.Array:
        return jnp.einsum("bld,dhk->blhk", x, p[name]["kernel"]) + p[name]["bias"]

    out = jax.nn.dot_product_attention(
        project("query"), project("key"), project("value"), mask=mask
    )
    return jnp.einsum("blhk,hkd->bld", out, p["out"]["kernel"]) + p["out"]["bias"]


def _block(p: dict[str, Any], x: jax.Array, mask: jax.Array, eps: float) -> jax.Array:
    x = x + _attention(p["attn"], _layer_norm(p["ln1"], x, eps), mask)
    h = _layer_norm(p["ln2"], x, eps) @ p["fc"]["kernel"] + p["fc"]["bias"]
    return x + jax.nn.gelu(h) @ p["proj"]["kernel"] + p["proj"]["bias"]


def plain_logits(params: dict[str, Any], ids: jax.Array, eps: float) -> jax.Array:
    positions = jnp.arange(ids.shape[-1])
    x = params["tokens"]["embedding"][ids] + params["positions"]["embedding"][positions]
    causal = positions[:, None] >= positions[None, :]
    mask = jnp.broadcast_to(causal, (ids.shape[0], 1, *causal.shape))
    for i in range(len(params["blocks"])):
        x = _block(params["blocks"][i], x, mask, eps)
    return _layer_norm(params["ln_f"], x, eps) @ params["head"]["kernel"]


def plain_state(cfg: Config, pure: dict[str, Any]) -> tuple[Any, ...]:
    """The plain step's state: parameters, optax state and the optimizer's step count."""
    params = jax.tree.map(jnp.array, pure)  # own buffers: this state is donated
    return params, cfg.tx().init(params), jnp.zeros((), jnp.uint32)


def plain_step(cfg: Config) -> Any:
    """A plain ``jax.jit`` train step that donates its state (the limit)."""
    tx, eps = cfg.tx(), cfg.epsilon

    def loss_fn(params, ids, targets):
        return _cross_entropy(plain_logits(params, ids, eps), targets)

    @functools.partial(jax.jit, donate_argnums=(0,))
    def train_step(state, ids, targets):
        params, opt_state, count = state
        loss, grads = jax.value_and_grad(loss_fn)(params, ids, targets)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, count + 1), loss

    return train_step
