"""Attention masks: pairwise masks from per-position inputs, causal masks, combining masks.

A mask is ``True``/non-zero where a query position may attend to a key position, with shape
``(batch..., heads, q_length, kv_length)`` or anything broadcastable to it.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._checks import Dtype

__all__ = ["make_attention_mask", "make_causal_mask", "combine_masks"]


def make_attention_mask(
    query_input: jax.Array,
    key_input: jax.Array,
    pairwise_fn: Callable[..., Any] = jnp.multiply,
    extra_batch_dims: int = 0,
    dtype: Dtype = jnp.float32,
) -> jax.Array:
    """A ``(batch..., 1, q_length, kv_length)`` mask from per-position query and key inputs.

    Entry ``[..., 0, i, j]`` is ``pairwise_fn(query_input[..., i], key_input[..., j])``; with
    the default ``multiply`` and 0/1 padding indicators it masks out every pair that involves
    a padding position.

    Args:
        query_input: ``(batch..., q_length)``, e.g. 1 for tokens and 0 for padding.
        key_input: ``(batch..., kv_length)``.
        pairwise_fn: broadcasting elementwise function of the two.
        extra_batch_dims: number of leading size-1 axes to add.
        dtype: the mask's dtype.

    Raises:
        ValueError: the inputs' batch axes do not broadcast together, or
            ``extra_batch_dims`` is negative.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import make_attention_mask
        >>> tokens = jnp.array([[1, 1, 0]])  # the last position is padding
        >>> mask = make_attention_mask(tokens > 0, tokens > 0)
        >>> mask.shape
        (1, 1, 3, 3)
        >>> mask[0, 0]
        Array([[1., 1., 0.],
               [1., 1., 0.],
               [0., 0., 0.]], dtype=float32)
    """
    query_input, key_input = jnp.asarray(query_input), jnp.asarray(key_input)
    try:
        jnp.broadcast_shapes(query_input.shape[:-1], key_input.shape[:-1])
    except ValueError:
        raise ValueError(
            f"make_attention_mask needs query_input (batch..., q_length) and key_input "
            f"(batch..., kv_length) with broadcastable batch axes, got shapes "
            f"{query_input.shape} and {key_input.shape}. Give both the same batch axes."
        ) from None
    if extra_batch_dims < 0:
        raise ValueError(
            f"make_attention_mask extra_batch_dims must be >= 0, got {extra_batch_dims}."
        )
    mask = pairwise_fn(query_input[..., :, None], key_input[..., None, :])
    mask = jnp.expand_dims(mask, -3)
    mask = jnp.reshape(mask, (1,) * extra_batch_dims + mask.shape)
    return mask.astype(dtype)


def make_causal_mask(
    x: jax.Array, extra_batch_dims: int = 0, dtype: Dtype = jnp.float32
) -> jax.Array:
    """A ``(batch..., 1, length, length)`` mask letting position ``i`` attend to ``j <= i``.

    Args:
        x: any array of shape ``(batch..., length)``; only its shape is used.
        extra_batch_dims: number of leading size-1 axes to add.
        dtype: the mask's dtype.

    Raises:
        ValueError: ``x`` is a scalar.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import make_causal_mask
        >>> make_causal_mask(jnp.ones((1, 3)))[0, 0]
        Array([[1., 0., 0.],
               [1., 1., 0.],
               [1., 1., 1.]], dtype=float32)
    """
    shape = jnp.shape(x)
    if not shape:
        raise ValueError(
            "make_causal_mask needs an input of shape (batch..., length), got a scalar. "
            "Pass e.g. the token ids of shape (batch, length)."
        )
    positions = jnp.broadcast_to(jnp.arange(shape[-1], dtype=jnp.int32), shape)
    return make_attention_mask(
        positions, positions, jnp.greater_equal, extra_batch_dims=extra_batch_dims, dtype=dtype
    )


def combine_masks(*masks: jax.Array | None, dtype: Dtype = jnp.float32) -> jax.Array | None:
    """The logical AND of the masks that are not ``None``; ``None`` if there are none.

    Args:
        *masks: masks of the same rank (``None`` entries are skipped).
        dtype: the result's dtype.

    Raises:
        ValueError: masks of different ranks, or shapes that do not broadcast.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import combine_masks, make_attention_mask, make_causal_mask
        >>> tokens = jnp.array([[1, 1, 0]])
        >>> padding = make_attention_mask(tokens > 0, tokens > 0)
        >>> combine_masks(padding, None, make_causal_mask(tokens))[0, 0]
        Array([[1., 0., 0.],
               [1., 1., 0.],
               [0., 0., 0.]], dtype=float32)
        >>> combine_masks(None) is None
        True
    """
    present = [jnp.asarray(m) for m in masks if m is not None]
    if not present:
        return None
    shapes = [m.shape for m in present]
    if len({len(s) for s in shapes}) != 1:
        raise ValueError(
            f"combine_masks needs masks of the same rank, got shapes {shapes}. Add size-1 "
            f"axes (e.g. mask[None]) so every mask is (batch..., heads, q_length, kv_length)."
        )
    try:
        jnp.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(
            f"combine_masks needs masks whose shapes broadcast together, got {shapes}."
        ) from None
    mask = present[0]
    for other in present[1:]:
        mask = jnp.logical_and(mask, other)
    return mask.astype(dtype)
