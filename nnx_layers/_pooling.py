"""Pooling over windows of the spatial axes: `pool`, `avg_pool`, `max_pool` and `min_pool`.

Inputs are channels-last, ``(batch..., *spatial, features)``, with ``len(window_shape)``
spatial axes; any number of leading batch axes, or none, is accepted. The window never spans
the batch or feature axes. Shapes are checked in Python, so a window that does not fit raises
at trace time with the shapes involved.
"""

import math
from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any, Literal

import jax
import jax.numpy as jnp

from ._checks import as_input, promote_dtype
from ._constraints import Size

__all__ = ["pool", "avg_pool", "max_pool", "min_pool"]

#: ``"SAME"``, ``"VALID"`` (either case), or one ``(low, high)`` pair per spatial axis.
PoolPadding = Literal["SAME", "VALID"] | Sequence[tuple[int, int]]

_PADDING_NAMES = ("SAME", "VALID")


def _window(name: str, window_shape: Any) -> tuple[int, ...]:
    if (
        not isinstance(window_shape, (tuple, list))
        or not window_shape
        or any(isinstance(w, bool) or not isinstance(w, Integral) or w < 1 for w in window_shape)
    ):
        raise ValueError(
            f"{name} window_shape must be a non-empty sequence of positive ints (one per "
            f"spatial axis), got {window_shape!r}. Pass e.g. window_shape=(2, 2) for 2-D inputs."
        )
    return tuple(int(w) for w in window_shape)


def _strides(name: str, strides: Any, rank: int) -> tuple[int, ...]:
    if strides is None:
        return (1,) * rank
    values = (strides,) * rank if isinstance(strides, Integral) else strides
    if (
        not isinstance(values, (tuple, list))
        or len(values) != rank
        or any(isinstance(s, bool) or not isinstance(s, Integral) or s < 1 for s in values)
    ):
        raise ValueError(
            f"{name} strides must be a positive int or {rank} positive ints (one per axis of "
            f"window_shape), got {strides!r}. Pass e.g. strides={(2,) * rank}."
        )
    return tuple(int(s) for s in values)


def _pairs(name: str, padding: Any, rank: int) -> tuple[tuple[int, int], ...] | None:
    """``rank`` non-negative ``(low, high)`` pairs from ``padding``, or None if it is not that."""
    if isinstance(padding, (str, bytes)) or not isinstance(padding, Sequence):
        return None
    pairs = []
    for item in padding:
        if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 2:
            return None
        if any(isinstance(p, bool) or not isinstance(p, Integral) or p < 0 for p in item):
            return None
        pairs.append((int(item[0]), int(item[1])))
    return tuple(pairs) if len(pairs) == rank else None


def _explicit_padding(
    name: str, padding: Any, spatial: tuple[int, ...], window: tuple[int, ...], strides: Any
) -> tuple[tuple[int, int], ...]:
    """Turn a padding spec into one ``(low, high)`` pair per spatial axis."""
    rank = len(window)
    if isinstance(padding, str) and padding.upper() in _PADDING_NAMES:
        return tuple(jax.lax.padtype_to_pads(spatial, window, strides, padding.upper()))
    pairs = _pairs(name, padding, rank)
    if pairs is None:
        raise ValueError(
            f"{name} padding must be 'SAME', 'VALID' or {rank} (low, high) pairs of "
            f"non-negative ints (one per spatial axis), got {padding!r}. Pass e.g. "
            f"padding='SAME' or padding={((1, 1),) * rank}."
        )
    return pairs


def _layout(
    name: str, inputs: jax.Array, window_shape: Any, strides: Any, padding: Any
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Check the arguments against ``inputs``; return the full-rank window, strides, padding."""
    window = _window(name, window_shape)
    rank = len(window)
    steps = _strides(name, strides, rank)
    if inputs.ndim < rank + 1:
        raise ValueError(
            f"{name} with window_shape {window} pools over {rank} spatial axes and needs an "
            f"input of shape (batch..., {', '.join(['spatial'] * rank)}, features) with at "
            f"least {rank + 1} dimensions, got shape {inputs.shape}. Add the feature axis "
            f"(x[..., None]) or use a window with one size per spatial axis."
        )
    spatial = inputs.shape[-rank - 1 : -1]
    pads = _explicit_padding(name, padding, spatial, window, steps)
    padded = tuple(size + low + high for size, (low, high) in zip(spatial, pads))
    if any(w > p for w, p in zip(window, padded)):
        raise ValueError(
            f"{name} window_shape {window} is larger than the padded input: spatial shape "
            f"{spatial} of input {inputs.shape} with padding {padding!r} gives {padded}. Use "
            f"a smaller window, padding='SAME', or a larger input."
        )
    batch = inputs.ndim - rank - 1
    no_pad = ((0, 0),)
    return (1,) * batch + window + (1,), (1,) * batch + steps + (1,), no_pad * batch + pads + no_pad


def pool(
    inputs: jax.Array,
    init: Any,
    reduce_fn: Callable[[Any, Any], Any],
    window_shape: Sequence[Size],
    strides: int | Sequence[int] | None = None,
    *,
    padding: PoolPadding = "VALID",
) -> jax.Array:
    """Reduce each window of the spatial axes with ``reduce_fn``, starting from ``init``.

    The building block of the other pooling functions (``lax.reduce_window``). Gradients exist
    for the standard reductions (``lax.add`` with ``0``, ``lax.max`` with ``-inf``, ...).

    Args:
        inputs: array of shape ``(batch..., *spatial, features)``.
        init: the reduction's initial value (its identity, e.g. ``0.0`` for ``lax.add``).
        reduce_fn: ``(a, b) -> c``, e.g. ``jax.lax.add`` or ``jax.lax.max``.
        window_shape: window size per spatial axis.
        strides: step per spatial axis (an int applies to every axis); ``None`` means 1.
        padding: ``"SAME"``, ``"VALID"`` or one ``(low, high)`` pair per spatial axis; padded
            entries take the value ``init``.

    Returns:
        The reduced windows, shape ``(batch..., *out_spatial, features)``.

    Raises:
        ValueError: for a bad window, strides or padding, an input with too few dimensions, or
            a window larger than the padded input.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_layers import pool
        >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
        >>> pool(x, 0.0, jax.lax.add, (2, 2), (2, 2))[0, :, :, 0]
        Array([[10., 18.],
               [42., 50.]], dtype=float32)
    """
    inputs = jnp.asarray(inputs)
    dims, steps, pads = _layout("pool", inputs, window_shape, strides, padding)
    return jax.lax.reduce_window(inputs, init, reduce_fn, dims, steps, pads)


def avg_pool(
    inputs: jax.Array,
    window_shape: Sequence[Size],
    strides: int | Sequence[int] | None = None,
    padding: PoolPadding = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """Average over each window of the spatial axes.

    Args:
        inputs: numeric array of shape ``(batch..., *spatial, features)``.
        window_shape: window size per spatial axis.
        strides: step per spatial axis (an int applies to every axis); ``None`` means 1.
        padding: ``"SAME"``, ``"VALID"`` or one ``(low, high)`` pair per spatial axis.
        count_include_pad: divide by the full window size (padded zeros count); ``False``
            divides by the number of real entries in each window.

    Returns:
        The window averages, in the input's dtype (float32 for an integer input).

    Raises:
        ValueError: for a bad window, strides or padding, an input with too few dimensions, or
            a window larger than the padded input.
        TypeError: for a non-numeric input (integers are averaged as float32, as in flax.nnx).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import avg_pool
        >>> x = jnp.arange(1.0, 4.0).reshape(1, 3, 1)
        >>> avg_pool(x, (2,), padding="SAME")[0, :, 0]
        Array([1.5, 2.5, 1.5], dtype=float32)
        >>> avg_pool(x, (2,), padding="SAME", count_include_pad=False)[0, :, 0]
        Array([1.5, 2.5, 3. ], dtype=float32)
    """
    (inputs,) = promote_dtype((as_input("avg_pool", inputs),))  # integers average as floats
    dims, steps, pads = _layout("avg_pool", inputs, window_shape, strides, padding)
    total = jax.lax.reduce_window(inputs, 0.0, jax.lax.add, dims, steps, pads)
    if count_include_pad:
        return total / math.prod(dims)
    spatial = slice(
        inputs.ndim - len(window_shape) - 1, None
    )  # the spatial axes and the feature axis
    ones = jnp.ones(inputs.shape[spatial][:-1] + (1,), jnp.float32)
    counts = jax.lax.reduce_window(
        ones, 0.0, jax.lax.add, dims[spatial], steps[spatial], pads[spatial]
    )
    return jnp.asarray(total / counts, inputs.dtype)


def _extreme_pool(
    name: str, inputs: Any, window_shape: Any, strides: Any, padding: Any, *, largest: bool
) -> jax.Array:
    """The window maxima (``largest``) or minima, reduced from the identity of max/min."""
    inputs = jnp.asarray(inputs)
    dtype = inputs.dtype
    if jnp.issubdtype(dtype, jnp.floating):
        lowest, highest = -jnp.inf, jnp.inf
    elif jnp.issubdtype(dtype, jnp.integer):
        lowest, highest = jnp.iinfo(dtype).min, jnp.iinfo(dtype).max
    else:
        raise TypeError(
            f"{name} expects a real floating-point or integer input, got dtype {dtype} with "
            f"shape {inputs.shape}. Cast it first, e.g. x.astype(jnp.float32)."
        )
    dims, steps, pads = _layout(name, inputs, window_shape, strides, padding)
    if largest:
        return jax.lax.reduce_window(inputs, lowest, jax.lax.max, dims, steps, pads)
    return jax.lax.reduce_window(inputs, highest, jax.lax.min, dims, steps, pads)


def max_pool(
    inputs: jax.Array,
    window_shape: Sequence[Size],
    strides: int | Sequence[int] | None = None,
    padding: PoolPadding = "VALID",
) -> jax.Array:
    """Maximum over each window of the spatial axes (padded entries never win).

    Args:
        inputs: floating or integer array of shape ``(batch..., *spatial, features)``.
        window_shape: window size per spatial axis.
        strides: step per spatial axis (an int applies to every axis); ``None`` means 1.
        padding: ``"SAME"``, ``"VALID"`` or one ``(low, high)`` pair per spatial axis.

    Returns:
        The window maxima, in the input's dtype.

    Raises:
        ValueError: for a bad window, strides or padding, an input with too few dimensions, or
            a window larger than the padded input.
        TypeError: for an input that is neither real floating point nor integer.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import max_pool
        >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
        >>> max_pool(x, (2, 2), strides=(2, 2))[0, :, :, 0]
        Array([[ 5.,  7.],
               [13., 15.]], dtype=float32)
    """
    return _extreme_pool("max_pool", inputs, window_shape, strides, padding, largest=True)


def min_pool(
    inputs: jax.Array,
    window_shape: Sequence[Size],
    strides: int | Sequence[int] | None = None,
    padding: PoolPadding = "VALID",
) -> jax.Array:
    """Minimum over each window of the spatial axes (padded entries never win).

    Args:
        inputs: floating or integer array of shape ``(batch..., *spatial, features)``.
        window_shape: window size per spatial axis.
        strides: step per spatial axis (an int applies to every axis); ``None`` means 1.
        padding: ``"SAME"``, ``"VALID"`` or one ``(low, high)`` pair per spatial axis.

    Returns:
        The window minima, in the input's dtype.

    Raises:
        ValueError: for a bad window, strides or padding, an input with too few dimensions, or
            a window larger than the padded input.
        TypeError: for an input that is neither real floating point nor integer.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import min_pool
        >>> x = jnp.array([[[3], [1], [2], [5]]])
        >>> min_pool(x, (2,), padding="SAME")[0, :, 0]
        Array([1, 1, 2, 5], dtype=int32)
    """
    return _extreme_pool("min_pool", inputs, window_shape, strides, padding, largest=False)
