"""Shared helpers: dtype promotion and input/argument checks with clear error messages."""

import math
from collections.abc import Mapping, Sequence
from numbers import Integral
from typing import Any

import jax
import jax.numpy as jnp

#: A dtype given as a jnp scalar type, numpy dtype or string (``"bfloat16"``).
Dtype = Any


def promote_dtype(arrays: Sequence[Any], *, dtype: Dtype | None, inexact: bool = True) -> tuple:
    """Cast ``arrays`` (``None`` entries kept) to ``dtype``, or to their common result type.

    With ``inexact=True`` an integer result type is promoted to at least float32.
    """
    present = [jnp.asarray(a) for a in arrays if a is not None]
    if dtype is None:
        dtype = jnp.result_type(*present)
        if inexact and not jnp.issubdtype(dtype, jnp.inexact):
            dtype = jnp.promote_types(jnp.float32, dtype)
    return tuple(None if a is None else jnp.asarray(a, dtype) for a in arrays)


def as_input(layer: str, x: Any) -> jax.Array:
    """Return ``x`` as an array, raising if it is not floating point (or complex)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        raise TypeError(
            f"{layer} expects a floating-point input, got dtype {x.dtype} with shape {x.shape}. "
            f"Cast it first, e.g. x.astype(jnp.float32); integer token ids go through Embed."
        )
    return x


def check_last_axis(layer: str, x: jax.Array, expected: int, arg: str) -> None:
    """Raise if the last axis of ``x`` is not ``expected`` wide."""
    if x.ndim == 0:
        raise ValueError(
            f"{layer} expects an input whose last axis is {expected} ({arg}), got a scalar "
            f"(shape ()). Give the input a feature axis, e.g. x.reshape(1, {expected})."
        )
    if x.shape[-1] != expected:
        raise ValueError(
            f"{layer} expects an input whose last axis is {expected} ({arg}), got shape "
            f"{x.shape}. Reshape the input or build the layer with {arg}={x.shape[-1]}."
        )


def check_positive_int(layer: str, name: str, value: Any) -> int:
    """Return ``value`` if it is an int >= 1, else raise a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(
            f"{layer} {name} must be a positive integer, got {value!r}. Pass e.g. {name}=8."
        )
    return int(value)


def canonical_axes(layer: str, axes: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    """Turn ``axes`` (int or sequence, may be negative) into sorted non-negative axes."""
    axes_tuple = tuple(int(a) for a in (axes if isinstance(axes, Sequence) else [axes]))
    for axis in axes_tuple:
        if not -ndim <= axis < ndim:
            raise ValueError(
                f"{layer} axis {axis} is out of range for an input with {ndim} dimensions. "
                f"Pass axes in [{-ndim}, {ndim - 1}] or reshape the input."
            )
    return tuple(sorted({axis % ndim for axis in axes_tuple}))


def check_feature_size(layer: str, x: jax.Array, axes: tuple[int, ...], num_features: int) -> None:
    """Raise if the product of ``x``'s sizes over ``axes`` is not ``num_features``."""
    size = math.prod(x.shape[a] for a in axes)
    if size != num_features:
        raise ValueError(
            f"{layer} expects {num_features} features over axes {axes}, got shape {x.shape} "
            f"({size} features). Reshape the input or build {layer}(num_features={size}, ...)."
        )


def frozen(value: Any) -> Any:
    """Turn nested lists into tuples so a static attribute is hashable."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def metadata(value: Mapping[str, Any]) -> dict[str, Any]:
    """Copy a ``*_metadata`` mapping into a plain dict."""
    return dict(value)


def check_sequence_shape(layer: str, input_shape: Any, example: str) -> tuple[int, ...]:
    """``input_shape`` as a tuple, if it is ``(batch..., length, features)`` with positive sizes
    (what a layer's ``init_cache`` takes); else a ValueError suggesting ``example``."""
    shape = tuple(input_shape)
    if len(shape) < 2 or not all(
        isinstance(s, int | jnp.integer) and not isinstance(s, bool) and s >= 1 for s in shape
    ):
        raise ValueError(
            f"{layer}.init_cache needs the shape of a whole sequence, (batch..., length, "
            f"features) with positive sizes, got {input_shape!r}. Pass e.g. {example}."
        )
    return shape
