"""The GPT of ``_gpt.py`` with its blocks stacked and applied by scan, three ways.

- ours: ``nnx_layers.Repeat`` (one block Module, Variables on a leading block axis);
- flax.nnx: the hand-written form its documentation teaches (``split_rngs`` + ``vmap`` to build
  the stack, ``nnx.scan`` to apply it);
- plain: ``jax.lax.scan`` over the stacked block parameters of a pytree, under a ``jax.jit``
  step that donates its state.

All three take the parameters of an unrolled model of ``_gpt.py`` (ours), stacked, so the
losses can be checked equal.
"""

from __future__ import annotations

import functools
from typing import Any

import _gpt  # (benchmarks/ is on sys.path, as for every benchmark module)
import jax
import jax.numpy as jnp
import optax
from _gpt import Config


def stacked_pure(pure: dict[str, Any]) -> dict[str, Any]:
    """The pure dict of an unrolled model (``blocks`` keyed 0..L-1) with the blocks stacked."""
    blocks = [pure["blocks"][i] for i in range(len(pure["blocks"]))]
    return {**pure, "blocks": jax.tree.map(lambda *xs: jnp.stack(xs), *blocks)}


# -- ours ----------------------------------------------------------------------------------------
def nnx_repeat_model(cfg: Config, seed: int = 0, *, remat: bool = False) -> Any:
    import nnx_core as nnx
    from nnx_layers import Embed, LayerNorm, Linear, Repeat, make_causal_mask

    Block = _gpt.nnx_block(cfg)

    class GPT(nnx.Module):
        def __init__(self, *, rngs: nnx.Rngs):
            self.tokens = Embed(cfg.vocab, cfg.width, rngs=rngs)
            self.positions = Embed(cfg.seq, cfg.width, rngs=rngs)
            self.blocks = Repeat(lambda r: Block(rngs=r), cfg.layers, rngs=rngs, remat=remat)
            self.ln_f = LayerNorm(cfg.width, rngs=rngs)
            self.head = Linear(cfg.width, cfg.vocab, use_bias=False, rngs=rngs)

        def __call__(self, ids):
            x = self.tokens(ids) + self.positions(jnp.arange(ids.shape[-1]))
            return self.head(self.ln_f(self.blocks(x, make_causal_mask(ids))))

    return GPT(rngs=nnx.Rngs(seed))


def copy_into_repeat(unrolled: Any, model: Any) -> None:
    """Give our Repeat GPT the parameters of our unrolled one."""
    from nnx_layers import Repeat

    for name in ("tokens", "positions", "ln_f", "head"):
        setattr(model, name, getattr(unrolled, name))
    model.blocks = Repeat.from_layers(unrolled.blocks, remat=model.blocks.remat)


# -- flax.nnx ------------------------------------------------------------------------------------
def flax_scan_model(cfg: Config, seed: int = 0) -> Any:
    from flax import nnx as fnnx

    Block = _gpt.flax_block(cfg)

    @fnnx.split_rngs(splits=cfg.layers)
    @fnnx.vmap(in_axes=(0,), out_axes=0)
    def create_blocks(rngs: fnnx.Rngs) -> Any:
        return Block(rngs=rngs)

    class GPT(fnnx.Module):
        def __init__(self, *, rngs: fnnx.Rngs):
            self.tokens = fnnx.Embed(cfg.vocab, cfg.width, rngs=rngs)
            self.positions = fnnx.Embed(cfg.seq, cfg.width, rngs=rngs)
            self.blocks = create_blocks(rngs)
            self.ln_f = fnnx.LayerNorm(cfg.width, rngs=rngs)
            self.head = fnnx.Linear(cfg.width, cfg.vocab, use_bias=False, rngs=rngs)

        def __call__(self, ids):
            x = self.tokens(ids) + self.positions(jnp.arange(ids.shape[-1]))
            mask = fnnx.make_causal_mask(ids)

            @fnnx.scan(in_axes=(fnnx.Carry, 0), out_axes=fnnx.Carry)
            def forward(x: jax.Array, block: Block) -> jax.Array:
                return block(x, mask)

            return self.head(self.ln_f(forward(x, self.blocks)))

    return GPT(rngs=fnnx.Rngs(seed))


# -- plain jax on a pytree -----------------------------------------------------------------------
def plain_scan_logits(params: dict[str, Any], ids: jax.Array, eps: float) -> jax.Array:
    positions = jnp.arange(ids.shape[-1])
    x = params["tokens"]["embedding"][ids] + params["positions"]["embedding"][positions]
    causal = positions[:, None] >= positions[None, :]
    mask = jnp.broadcast_to(causal, (ids.shape[0], 1, *causal.shape))

    def body(x: jax.Array, block: dict[str, Any]) -> tuple[jax.Array, None]:
        return _gpt._block(block, x, mask, eps), None

    x, _ = jax.lax.scan(body, x, params["blocks"])
    return _gpt._layer_norm(params["ln_f"], x, eps) @ params["head"]["kernel"]


def plain_scan_step(cfg: Config) -> Any:
    """A plain ``jax.jit`` train step over stacked blocks that donates its state."""
    tx, eps = cfg.tx(), cfg.epsilon

    def loss_fn(params, ids, targets):
        logits = plain_scan_logits(params, ids, eps)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

    @functools.partial(jax.jit, donate_argnums=(0,))
    def train_step(state, ids, targets):
        params, opt_state, count = state
        loss, grads = jax.value_and_grad(loss_fn)(params, ids, targets)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, count + 1), loss

    return train_step
