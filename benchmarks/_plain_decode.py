"""The physical limit of cached decoding: a hand-written KV-cache decoder in plain JAX.

The GPT of ``examples/text_gpt.yaml`` (token and position embeddings, pre-norm blocks of causal
self-attention and a gelu MLP, a final LayerNorm, a vocabulary head) written as pure functions
of its weights, taken from one of our models (unrolled blocks or a `Repeat`) so both compute the
same logits. It does what a careful JAX programmer would, in the layout that measured fastest:
each block's weights and its key and value caches ``(batch, length, heads, head_dim)`` are
arrays of their own, the caches carried through the steps' ``lax.scan`` and written in place
(one ``dynamic_update_slice`` each per step), one position index for the whole model, the
blocks unrolled. No Modules, no Variables, nothing checked. (Tried and slower on the CPU: all
caches in one ``(blocks, 2, ...)`` array, 1.9x the time at batch 1; the blocks' weights stacked
and sliced inside the step, 1.6x; the query, key and value products fused into one, 1.2x.)

`benchmarks/generate.py` times it beside `decode` to show what any JAX program reaches.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import nnx_core as nnx

__all__ = ["plain_decode", "plain_weights"]

EPSILON = 1e-6


def plain_weights(model: Any) -> dict[str, Any]:
    """The GPT's weights as plain arrays, the blocks' stacked on a leading axis.

    ``model`` is a `Sequential` of Embed, PositionEmbed, the blocks (a `Repeat` or one layer
    each), LayerNorm, Linear, as in ``examples/text_gpt.yaml``.

    Raises:
        ValueError: ``model`` is not of that layout.
    """
    kinds = [type(layer).__name__ for layer in getattr(model, "layers", [])]
    if kinds[:2] != ["Embed", "PositionEmbed"] or kinds[-2:] != ["LayerNorm", "Linear"]:
        raise ValueError(f"not the example GPT's layout: its layers are {kinds}")
    flat = {tuple(p): np.asarray(v.value) for p, v in nnx.state(model, nnx.Param).flat_state()}
    layers = model.layers
    last = len(layers) - 1

    def block_param(i: int | None, *tail: Any) -> np.ndarray:
        if i is None:  # a Repeat at layers[2]: already stacked
            return flat[("layers", 2, "block", *tail)]
        return flat[("layers", i, *tail)]

    blocks = [None] if type(layers[2]).__name__ == "Repeat" else list(range(2, last - 1))

    def stacked(*tail: Any) -> np.ndarray:
        """The Param at ``tail`` inside a block, for every block: (blocks, ...)."""
        parts = [block_param(i, *tail) for i in blocks]
        return np.concatenate([p if i is None else p[None] for i, p in zip(blocks, parts)])

    attn = ("layers", 0, "block", "layers", 1)
    mlp = ("layers", 1, "block", "layers")
    names = {
        "ln1": ("layers", 0, "block", "layers", 0),
        "q": (*attn, "query"),
        "k": (*attn, "key"),
        "v": (*attn, "value"),
        "out": (*attn, "out"),
        "ln2": (*mlp, 0),
        "fc1": (*mlp, 1),
        "fc2": (*mlp, 3),
    }
    weights = {
        name: (stacked(*path, "scale"), stacked(*path, "bias"))
        if name.startswith("ln")
        else (stacked(*path, "kernel"), stacked(*path, "bias"))
        for name, path in names.items()
    }
    count = weights["q"][0].shape[0]
    return {
        "embed": flat[("layers", 0, "embedding")],
        "position": flat[("layers", 1, "embedding")],
        "blocks": [{k: (v[0][i], v[1][i]) for k, v in weights.items()} for i in range(count)],
        "ln_f": (flat[("layers", last - 1, "scale")], flat[("layers", last - 1, "bias")]),
        "head": (flat[("layers", last, "kernel")], flat[("layers", last, "bias")]),
    }


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + EPSILON) * scale + bias


def _step(w: dict[str, Any], caches: list[Any], token: jax.Array, t: jax.Array) -> Any:
    """One position through the model: ``(logits (batch, vocab), caches)``."""
    length = caches[0][0].shape[1]
    x = w["embed"][token] + w["position"][t]  # (batch, width)
    seen = jnp.arange(length) <= t
    out = []
    for block, (keys, values) in zip(w["blocks"], caches):
        h = _layer_norm(x, *block["ln1"])
        q, k, v = (jnp.einsum("bi,ind->bnd", h, block[n][0]) + block[n][1] for n in "qkv")
        keys = jax.lax.dynamic_update_slice(keys, k[:, None], (0, t, 0, 0))
        values = jax.lax.dynamic_update_slice(values, v[:, None], (0, t, 0, 0))
        out.append((keys, values))
        scores = jnp.einsum("bnd,bsnd->bns", q, keys) / np.sqrt(q.shape[-1]).astype(x.dtype)
        scores = jnp.where(seen, scores, jnp.finfo(scores.dtype).min)
        att = jnp.einsum("bns,bsnd->bnd", jax.nn.softmax(scores, axis=-1), values)
        x = x + jnp.einsum("bnd,ndo->bo", att, block["out"][0]) + block["out"][1]
        h = _layer_norm(x, *block["ln2"])
        h = jax.nn.gelu(h @ block["fc1"][0] + block["fc1"][1], approximate=True)
        x = x + h @ block["fc2"][0] + block["fc2"][1]
    x = _layer_norm(x, *w["ln_f"])
    return x @ w["head"][0] + w["head"][1], out


@functools.partial(jax.jit, static_argnames=("new",))
def _loop(w: dict[str, Any], prompt: jax.Array, new: int) -> jax.Array:
    batch, length = prompt.shape
    _, heads, head_dim = w["blocks"][0]["k"][0].shape
    empty = jnp.zeros((batch, length + new, heads, head_dim), jnp.float32)
    caches = [(empty, empty) for _ in w["blocks"]]

    def step(carry: Any, t: jax.Array) -> Any:
        caches, previous = carry
        token = jnp.where(t < length, prompt[:, jnp.minimum(t, length - 1)], previous)
        logits, caches = _step(w, caches, token, t)
        drawn = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return (caches, drawn), drawn

    _, drawn = jax.lax.scan(
        step, (caches, jnp.zeros((batch,), jnp.int32)), jnp.arange(length + new - 1)
    )
    return drawn[length - 1 :].T


def plain_decode(weights: dict[str, Any], prompt: Any, *, max_tokens: int) -> jax.Array:
    """Greedy decoding of ``max_tokens`` after ``prompt`` ``(batch, length)``: token ids
    ``(batch, max_tokens)``, as `nnx_plugins.generation._decode.decode` at temperature 0."""
    return _loop(weights, jnp.asarray(prompt, jnp.int32), max_tokens)
