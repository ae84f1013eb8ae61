"""Scaled dot-product attention over multi-headed queries, keys and values.

Shapes: ``query (batch..., q_length, heads, depth)``, ``key (batch..., kv_length, kv_heads,
depth)``, ``value (batch..., kv_length, kv_heads, v_depth)``; ``heads`` must be a multiple of
``kv_heads`` (grouped-query attention shares each key/value head among ``heads // kv_heads``
query heads). Masks and biases broadcast to ``(batch..., heads, q_length, kv_length)``.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Intermediate, Module

from ._checks import Dtype, PromoteDtypeFn, promote_dtype
from ._constraints import Rate

__all__ = ["dot_product_attention", "dot_product_attention_weights"]


def _check_qk(name: str, query: jax.Array, key: jax.Array) -> None:
    layout = "(batch..., length, heads, depth)"
    if query.ndim < 3 or key.ndim != query.ndim:
        raise ValueError(
            f"{name}: query and key must have same rank, both {layout} with the same batch "
            f"axes, got {query.shape} and {key.shape}. Split the features into heads first, "
            f"e.g. x.reshape(*x.shape[:-1], heads, depth)."
        )
    if key.shape[:-3] != query.shape[:-3]:
        raise ValueError(
            f"{name}: query and key batch dims must match ({layout}), got {query.shape} and "
            f"{key.shape}. Broadcast them to one batch shape first."
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"{name}: q, k depths must match (the last axis), got {query.shape} and {key.shape}."
        )
    if query.shape[-2] % key.shape[-2]:
        raise ValueError(
            f"{name}: the number of query heads ({query.shape[-2]}) must be a multiple of the "
            f"number of key/value heads ({key.shape[-2]}), got query {query.shape} and key "
            f"{key.shape}."
        )


def _check_value(name: str, key: jax.Array, value: jax.Array) -> None:
    if value.ndim != key.ndim or value.shape[:-3] != key.shape[:-3]:
        raise ValueError(
            f"{name}: key and value must have same rank and batch dims must match "
            f"(batch..., kv_length, kv_heads, depth), got {key.shape} and {value.shape}."
        )
    if value.shape[-3] != key.shape[-3]:
        raise ValueError(
            f"{name}: k, v lengths must match (axis -3), got {key.shape} and {value.shape}."
        )
    if value.shape[-2] != key.shape[-2]:
        raise ValueError(
            f"{name}: key and value must have the same number of heads (axis -2), got "
            f"{key.shape} and {value.shape}."
        )


def _check_broadcast(name: str, arg: str, array: Any, target: tuple[int, ...]) -> None:
    """Raise if ``array`` (a mask or bias) does not broadcast to ``target``."""
    if array is None:
        return
    shape = jnp.shape(array)
    ok = len(shape) <= len(target) and all(
        s in (1, t) for s, t in zip(reversed(shape), reversed(target))
    )
    if not ok:
        raise ValueError(
            f"{name} {arg} of shape {shape} does not broadcast to the attention weights' "
            f"shape (batch..., heads, q_length, kv_length) = {target}. Give it size-1 or "
            f"matching axes, e.g. shape {(1,) * (len(target) - 2) + target[-2:]}."
        )


def _weights_shape(query: jax.Array, key: jax.Array) -> tuple[int, ...]:
    return (*query.shape[:-3], query.shape[-2], query.shape[-3], key.shape[-3])


def dot_product_attention_weights(
    query: jax.Array,
    key: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    *,
    broadcast_dropout: bool = True,
    dropout_rng: jax.Array | None = None,
    dropout_rate: Rate = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: Any = None,
    module: Module | None = None,
    promote_dtype: PromoteDtypeFn = promote_dtype,
    is_causal: bool = False,
) -> jax.Array:
    """``softmax(query @ key / sqrt(depth) + bias)`` over the keys, masked, with dropout.

    Args:
        query: ``(batch..., q_length, heads, depth)``.
        key: ``(batch..., kv_length, kv_heads, depth)``.
        bias: added to the logits; broadcastable to ``(batch..., heads, q_length, kv_length)``.
        mask: where it is False/0, the logits are set to the dtype's lowest value.
        broadcast_dropout: share one dropout mask across the batch and head axes.
        dropout_rng: the PRNG key of the dropout mask (needed when dropout applies).
        dropout_rate: probability of dropping a weight.
        deterministic: if True, no dropout.
        dtype: computation dtype; ``None`` promotes ``query`` and ``key`` together.
        precision: ``jax.lax.Precision`` of the contraction.
        module: if given, the weights are recorded with ``module.sow(Intermediate,
            "attention_weights", weights)``.
        promote_dtype: brings ``(query, key)`` to one dtype, called with ``dtype=dtype``
            (see `promote_dtype`).
        is_causal: also mask key positions after each query position.

    Returns:
        The weights, ``(batch..., heads, q_length, kv_length)``.

    Raises:
        ValueError: shapes that do not fit (see the module docstring), or dropout without a
            ``dropout_rng``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import dot_product_attention_weights
        >>> q = k = jnp.ones((2, 5, 4, 8))  # (batch, length, heads, depth)
        >>> w = dot_product_attention_weights(q, k, is_causal=True)
        >>> w.shape
        (2, 4, 5, 5)
        >>> w[0, 0, 2]  # position 2 attends equally to positions 0..2
        Array([0.33333334, 0.33333334, 0.33333334, 0.        , 0.        ], dtype=float32)
    """
    name = "dot_product_attention_weights"
    query, key = promote_dtype((query, key), dtype=dtype)  # (the argument, not the module's)
    dtype = query.dtype
    _check_qk(name, query, key)
    target = _weights_shape(query, key)
    _check_broadcast(name, "bias", bias, target)
    _check_broadcast(name, "mask", mask, target)
    heads, kv_heads = query.shape[-2], key.shape[-2]
    query = query / jnp.sqrt(query.shape[-1]).astype(dtype)
    if heads == kv_heads:
        weights = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=precision)
    else:  # grouped: query heads (kv_heads, group) share key head kv_heads
        grouped = query.reshape(*query.shape[:-2], kv_heads, heads // kv_heads, query.shape[-1])
        weights = jnp.einsum("...qhgd,...khd->...hgqk", grouped, key, precision=precision)
        weights = weights.reshape(target)
    if bias is not None:
        weights = weights + bias
    if mask is not None or is_causal:
        keep = jnp.ones((), bool) if mask is None else jnp.asarray(mask, bool)
        if is_causal:
            keep = jnp.logical_and(keep, jnp.tril(jnp.ones(target[-2:], bool)))
        weights = jnp.where(keep, weights, jnp.finfo(dtype).min)
    weights = jax.nn.softmax(weights).astype(dtype)
    if module is not None:
        module.sow(Intermediate, "attention_weights", weights)
    if deterministic or dropout_rate <= 0.0:
        return weights
    if dropout_rng is None:
        raise ValueError(
            f"{name} applies dropout (dropout_rate={dropout_rate}, deterministic=False) but "
            f"got no dropout_rng. Pass dropout_rng=jax.random.key(...) or deterministic=True."
        )
    keep_prob = 1.0 - dropout_rate
    shape = (1,) * (weights.ndim - 2) + weights.shape[-2:] if broadcast_dropout else weights.shape
    keep_mask = jax.random.bernoulli(dropout_rng, keep_prob, shape)
    return weights * (keep_mask.astype(dtype) / jnp.asarray(keep_prob, dtype))


def _fused(query: Any, key: Any, value: Any, bias: Any, mask: Any, *, is_causal: bool) -> Any:
    """``jax.nn.dot_product_attention``, with several batch axes folded into one."""
    batch = query.shape[:-3]
    if mask is not None:
        mask = jnp.asarray(mask, bool)
    if len(batch) <= 1:
        return jax.nn.dot_product_attention(query, key, value, bias, mask, is_causal=is_causal)

    def fold(x: Any) -> Any:
        if x is None:
            return None
        x = jnp.reshape(x, (1,) * (len(batch) + 3 - x.ndim) + x.shape)
        x = jnp.broadcast_to(x, (*batch, *x.shape[-3:]))
        return jnp.reshape(x, (math.prod(batch), *x.shape[-3:]))

    q, k, v, b, m = (fold(x) for x in (query, key, value, bias, mask))
    out = jax.nn.dot_product_attention(q, k, v, b, m, is_causal=is_causal)
    return jnp.reshape(out, (*batch, *out.shape[-3:]))


def dot_product_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    *,
    broadcast_dropout: bool = True,
    dropout_rng: jax.Array | None = None,
    dropout_rate: Rate = 0.0,
    deterministic: bool = False,
    dtype: Dtype | None = None,
    precision: Any = None,
    module: Module | None = None,
    promote_dtype: PromoteDtypeFn = promote_dtype,
    is_causal: bool = False,
) -> jax.Array:
    """Attention: the `dot_product_attention_weights` applied to ``value``.

    Without dropout and without ``module`` this runs ``jax.nn.dot_product_attention`` (XLA's
    fused form: logits and softmax in float32); otherwise the weights are computed explicitly
    in ``dtype`` (so they can be dropped out or recorded), as flax.nnx does. Values whose
    depth differs from the keys' (which the fused form rejects) also take the explicit path.

    Args:
        query: ``(batch..., q_length, heads, depth)``.
        key: ``(batch..., kv_length, kv_heads, depth)``.
        value: ``(batch..., kv_length, kv_heads, v_depth)``.
        bias: see `dot_product_attention_weights`.
        mask: see `dot_product_attention_weights`.
        broadcast_dropout: see `dot_product_attention_weights`.
        dropout_rng: see `dot_product_attention_weights`.
        dropout_rate: see `dot_product_attention_weights`.
        deterministic: see `dot_product_attention_weights`.
        dtype: computation dtype; ``None`` promotes the three inputs together.
        precision: see `dot_product_attention_weights`.
        module: see `dot_product_attention_weights`.
        promote_dtype: brings ``(query, key, value)`` to one dtype, called with
            ``dtype=dtype`` (see `promote_dtype`).
        is_causal: see `dot_product_attention_weights`.

    Returns:
        ``(batch..., q_length, heads, v_depth)``.

    Raises:
        ValueError: shapes that do not fit, or dropout without a ``dropout_rng``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import dot_product_attention
        >>> q = jnp.ones((2, 5, 4, 8))
        >>> kv = jnp.ones((2, 7, 2, 8))  # 2 key/value heads shared by 4 query heads
        >>> dot_product_attention(q, kv, kv).shape
        (2, 5, 4, 8)
    """
    name = "dot_product_attention"
    query, key, value = promote_dtype((query, key, value), dtype=dtype)
    _check_qk(name, query, key)
    _check_value(name, key, value)
    target = _weights_shape(query, key)
    _check_broadcast(name, "bias", bias, target)
    _check_broadcast(name, "mask", mask, target)
    if dropout_rate == 0.0 and module is None and value.shape[-1] == query.shape[-1]:
        return _fused(query, key, value, bias, mask, is_causal=is_causal)
    weights = dot_product_attention_weights(
        query,
        key,
        bias,
        mask,
        broadcast_dropout=broadcast_dropout,
        dropout_rng=dropout_rng,
        dropout_rate=dropout_rate,
        deterministic=deterministic,
        dtype=query.dtype,
        precision=precision,
        module=module,
        promote_dtype=promote_dtype,
        is_causal=is_causal,
    )
    heads, kv_heads = query.shape[-2], key.shape[-2]
    if heads == kv_heads:
        return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)
    grouped = weights.reshape(*weights.shape[:-3], kv_heads, heads // kv_heads, *target[-2:])
    out = jnp.einsum("...hgqk,...khd->...qhgd", grouped, value, precision=precision)
    return out.reshape(*out.shape[:-3], heads, value.shape[-1])
