"""Shared helpers: dtype promotion and input/argument checks with clear error messages."""

import math
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from typing import Any

import jax
import jax.numpy as jnp

#: A dtype given as a jnp scalar type, numpy dtype or string (``"bfloat16"``).
Dtype = Any

#: How a layer brings its input and parameters to one dtype before computing (flax.nnx's
#: ``PromoteDtypeFn``): called as ``fn((x, kernel, bias, ...), dtype=layer.dtype)`` (and
#: ``inexact=False`` by `Embed`'s lookup), it returns the tuple cast; ``None`` entries stay.
PromoteDtypeFn = Callable[..., tuple[Any, ...]]


def promote_dtype(
    arrays: Sequence[Any], /, *, dtype: Dtype | None = None, inexact: bool = True
) -> tuple[Any, ...]:
    """Cast ``arrays`` to ``dtype``, or to their common result type; ``None`` entries stay.

    The layers' default ``promote_dtype=``. With ``inexact=True`` (every layer but `Embed`'s
    lookup) an integer or boolean result type becomes at least float32, so integer inputs
    work as in flax.nnx, and a ``dtype`` that is not floating or complex is refused.

    Args:
        arrays: the arrays (or ``None``) to cast, e.g. ``(inputs, kernel, bias)``.
        dtype: the dtype to cast to; ``None`` infers it with ``jnp.result_type``.
        inexact: require a floating or complex result.

    Returns:
        A tuple of arrays of one dtype (``None`` where the entry was ``None``).

    Raises:
        ValueError: ``inexact`` with an integer or boolean ``dtype``.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import promote_dtype
        >>> x, w, b = promote_dtype((jnp.ones(2, jnp.int32), jnp.ones(2, jnp.bfloat16), None))
        >>> x.dtype, w.dtype, b
        (dtype(bfloat16), dtype(bfloat16), None)
        >>> [a.dtype for a in promote_dtype((jnp.ones(2, jnp.int32),), dtype=None)]
        [dtype('float32')]
    """
    if dtype is None:
        dtype = jnp.result_type(*(jnp.asarray(a) for a in arrays if a is not None))
        if inexact and not jnp.issubdtype(dtype, jnp.inexact):
            dtype = jnp.promote_types(jnp.float32, dtype)
    elif inexact and not jnp.issubdtype(dtype, jnp.inexact):
        raise ValueError(
            f"Dtype must be inexact (a floating or complex dtype) for this computation, got "
            f"dtype={jnp.dtype(dtype)}. Pass e.g. dtype=jnp.float32, or dtype=None to promote "
            f"the input and the parameters together."
        )
    return tuple(None if a is None else jnp.asarray(a, dtype) for a in arrays)


def element_type(preferred_element_type: Dtype | None) -> dict[str, Any]:
    """``{"preferred_element_type": ...}`` when it is set, else ``{}``: a user's contraction
    function (``dot_general=``, ``einsum_op=``) gets the keyword only when it means something."""
    if preferred_element_type is None:
        return {}
    return {"preferred_element_type": preferred_element_type}


def as_input(layer: str, x: Any) -> jax.Array:
    """Return ``x`` as an array, raising if it is not numeric (bool, integer, float, complex).

    Integer and boolean inputs are promoted by the layer's ``promote_dtype`` (to float32 by
    default), as in flax.nnx.
    """
    x = jnp.asarray(x)
    if not (jnp.issubdtype(x.dtype, jnp.number) or jnp.issubdtype(x.dtype, jnp.bool_)):
        raise TypeError(
            f"{layer} expects a numeric input, got dtype {x.dtype} with shape {x.shape}. "
            f"Pass an array of numbers, e.g. x.astype(jnp.float32)."
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


def check_param_dtype(layer: str, name: str, value: Dtype) -> Dtype:
    """Return ``value`` (unchanged) if it is a floating or complex dtype, else raise naming
    ``name`` (``param_dtype``, ``lora_param_dtype``): a layer's parameters are trained, and
    gradients exist for floating and complex values only.

    flax.nnx takes any dtype here; a bool or integer parameter only fails later, when training
    differentiates it (``grad requires real- or complex-valued inputs``) or when an initializer
    draws it (``dtype argument to `normal` must be a float dtype``).

    Raises:
        ValueError: a bool, integer or unsigned dtype.
        TypeError: a value that is no dtype at all.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers._checks import check_param_dtype
        >>> check_param_dtype("Linear", "param_dtype", "bfloat16")
        'bfloat16'
        >>> check_param_dtype("Linear", "param_dtype", jnp.int8)
        Traceback (most recent call last):
        ...
        ValueError: Linear param_dtype must be a floating dtype (...), got int8. Use a floating ...
    """
    try:
        dtype = jnp.dtype(value)
    except TypeError:
        raise TypeError(
            f"{layer} {name} must be a dtype such as float32, got {value!r}. Pass e.g. "
            f"{name}=jnp.float32 (in a config: {name}: float32)."
        ) from None
    if not jnp.issubdtype(dtype, jnp.inexact):
        raise ValueError(
            f"{layer} {name} must be a floating dtype (its parameters are trained, and gradients "
            f"exist for floating and complex values only), got {dtype}. Use a floating dtype "
            f"such as float32 or bfloat16."
        )
    return value


def is_int(value: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def positive_sizes(layer: str, name: str, value: Any) -> tuple[int, ...]:
    """``value`` (a positive int or a non-empty sequence of them) as a tuple of ints."""
    sizes = (value,) if is_int(value) else value
    if (
        not isinstance(sizes, Sequence)
        or isinstance(sizes, str)
        or not sizes
        or not all(is_int(s) and s >= 1 for s in sizes)
    ):
        raise ValueError(
            f"{layer} {name} must be a positive int or a non-empty sequence of positive ints, "
            f"got {value!r}. Pass e.g. {name}=8 or {name}=(4, 2)."
        )
    return tuple(int(s) for s in sizes)


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
