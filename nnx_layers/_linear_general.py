"""Dense layers over chosen axes: `LinearGeneral` (several axes in and out) and `Einsum`."""

import math
from collections.abc import Mapping, Sequence
from numbers import Integral
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Param, Rngs

from . import initializers
from ._checks import Dtype, as_input, metadata, promote_dtype
from .initializers import Initializer

__all__ = ["LinearGeneral", "Einsum"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_KERNEL_INIT = initializers.lecun_normal()


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _stored(value: Any) -> Any:
    """An int as a Python int, a sequence as a tuple (the hashable form kept on the layer)."""
    return int(value) if _is_int(value) else tuple(int(v) if _is_int(v) else v for v in value)


def _sizes(layer: str, name: str, value: Any) -> tuple[int, ...]:
    """``value`` (an int or a non-empty sequence of ints >= 1) as a tuple."""
    sizes = (value,) if _is_int(value) else value
    if (
        not isinstance(sizes, Sequence)
        or isinstance(sizes, str)
        or not sizes
        or not all(_is_int(s) and s >= 1 for s in sizes)
    ):
        raise ValueError(
            f"{layer} {name} must be a positive int or a non-empty sequence of positive ints, "
            f"got {value!r}. Pass e.g. {name}=8 or {name}=(4, 2)."
        )
    return tuple(int(s) for s in sizes)


def _axes(value: Any) -> tuple[int, ...]:
    """``axis`` (an int or a non-empty sequence of distinct ints) as a tuple."""
    axes = (value,) if _is_int(value) else value
    if (
        not isinstance(axes, Sequence)
        or isinstance(axes, str)
        or not axes
        or not all(_is_int(a) for a in axes)
        or len(set(axes)) != len(axes)
    ):
        raise ValueError(
            f"LinearGeneral axis must be an int or a non-empty sequence of distinct ints, got "
            f"{value!r}. Pass e.g. axis=-1 or axis=(-2, -1)."
        )
    return tuple(int(a) for a in axes)


def _batch_axis(value: Any) -> dict[int, int]:
    """``batch_axis`` as a dict; its axes must be ``0 .. n-1`` and its sizes positive."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f"LinearGeneral batch_axis must map leading axes to their sizes, got {value!r}. "
            f"Pass e.g. batch_axis={{0: 4}}."
        )
    items = {int(k) if _is_int(k) else k: v for k, v in value.items()}
    if sorted(items, key=str) != list(range(len(items))) or not all(
        _is_int(v) and v >= 1 for v in items.values()
    ):
        raise ValueError(
            f"LinearGeneral batch_axis must map the leading axes 0, 1, ... (consecutive, from 0) "
            f"to positive sizes, got {dict(value)!r}. Pass e.g. batch_axis={{0: 4}}; move "
            f"batch axes to the front with jnp.moveaxis first."
        )
    return {k: int(v) for k, v in sorted(items.items())}


def _flat_init(init: Initializer, key: jax.Array, shape: tuple[int, ...], split: int, dtype: Any):
    """Initialize as the 2-D ``(prod(shape[:split]), prod(shape[split:]))`` matrix, then reshape.

    That keeps fan-in/fan-out based initializers meaningful for any number of axes.
    """
    flat = (math.prod(shape[:split]), math.prod(shape[split:]))
    return jnp.reshape(init(key, flat, dtype), shape)


class LinearGeneral(Module):
    """A dense layer contracting one or several input axes into one or several output axes.

    The kernel has shape ``(*batch_sizes, *in_features, *out_features)``. The input's axes
    ``axis`` (sizes ``in_features``) are contracted away and replaced by ``out_features`` at
    the end; ``batch_axis`` maps leading axes to sizes that get a separate kernel each.

    Args:
        in_features: the size (int) or sizes (sequence) of the contracted input axes.
        out_features: the size or sizes of the new output axes.
        axis: the input axes to contract, one per entry of ``in_features``.
        batch_axis: ``{axis: size}`` for leading axes ``0 .. n-1`` with a kernel each.
        use_bias: whether to add a bias of shape ``(*batch_sizes, *out_features)``.
        dtype: computation dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``kernel`` and ``bias``.
        kernel_init: initializer of ``kernel``, called with the flattened 2-D shape
            ``(prod(batch) * prod(in_features), prod(out_features))`` and reshaped.
        bias_init: initializer of ``bias``, called with its flattened 1-D shape.
        precision: ``jax.lax.Precision`` for the contraction.
        preferred_element_type: accumulation/result dtype passed to ``lax.dot_general``.
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata (e.g. ``sharding_names``) for the ``kernel`` Param.
        bias_metadata: metadata for the ``bias`` Param.

    Raises:
        ValueError: bad sizes, axes or ``batch_axis`` (at construction); at call time, axes
            out of range or input sizes that do not match ``in_features`` / ``batch_axis``.
        TypeError: a non-floating input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import LinearGeneral
        >>> layer = LinearGeneral((2, 3), (4, 5), axis=(1, -1), rngs=Rngs(0))
        >>> layer.kernel.value.shape, layer.bias.value.shape
        ((2, 3, 4, 5), (4, 5))
        >>> layer(jnp.ones((16, 2, 3))).shape
        (16, 4, 5)
        >>> heads = LinearGeneral(8, (2, 4), rngs=Rngs(0))  # split features into 2 heads
        >>> heads(jnp.ones((3, 7, 8))).shape
        (3, 7, 2, 4)
    """

    def __init__(
        self,
        in_features: int | Sequence[int],
        out_features: int | Sequence[int],
        *,
        axis: int | Sequence[int] = -1,
        batch_axis: Mapping[int, int] = _EMPTY,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        precision: Any = None,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        in_shape = _sizes("LinearGeneral", "in_features", in_features)
        out_shape = _sizes("LinearGeneral", "out_features", out_features)
        axes = _axes(axis)
        if len(in_shape) != len(axes):
            raise ValueError(
                f"LinearGeneral needs one input size per contracted axis, got in_features="
                f"{in_features!r} ({len(in_shape)} sizes) and axis={axis!r} ({len(axes)} axes). "
                f"Pass e.g. in_features=(2, 3) with axis=(-2, -1)."
            )
        batch = _batch_axis(batch_axis)
        self.in_features = _stored(in_features)
        self.out_features = _stored(out_features)
        self.axis = _stored(axis)
        self.batch_axis = batch
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.precision = precision
        self.preferred_element_type = preferred_element_type
        self.kernel_metadata = metadata(kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        batch_shape = tuple(batch.values())
        kernel_shape = (*batch_shape, *in_shape, *out_shape)
        split = len(batch_shape) + len(in_shape)
        kernel = _flat_init(kernel_init, rngs.params(), kernel_shape, split, param_dtype)
        self.kernel = Param(kernel, **self.kernel_metadata)
        self.bias: Param | None = None
        if use_bias:
            bias_shape = (*batch_shape, *out_shape)
            flat = bias_init(rngs.params(), (math.prod(bias_shape),), param_dtype)
            bias = jnp.reshape(flat, bias_shape)
            self.bias = Param(bias, **self.bias_metadata)

    def __call__(self, inputs: jax.Array) -> jax.Array:
        """Contract ``inputs``' axes ``axis``; the output ends with ``out_features``."""
        inputs = as_input("LinearGeneral", inputs)
        axes, batch_axes = self._input_axes(inputs)
        out_shape = _sizes("LinearGeneral", "out_features", self.out_features)
        bias = None if self.bias is None else self.bias.value
        inputs, kernel, bias = promote_dtype((inputs, self.kernel.value, bias), dtype=self.dtype)
        n_batch = len(batch_axes)
        contract = tuple(range(n_batch, n_batch + len(axes)))
        y = jax.lax.dot_general(
            inputs,
            kernel,
            ((axes, contract), (batch_axes, tuple(range(n_batch)))),
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )
        if bias is not None:
            kept = [a for a in range(inputs.ndim) if a not in axes]
            lead = tuple(inputs.shape[a] if a in batch_axes else 1 for a in kept)
            y = y + jnp.reshape(bias, (*lead, *out_shape))
        return y

    def _input_axes(self, inputs: jax.Array) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The contracted and batch axes of ``inputs`` (non-negative), checked against it."""
        ndim, shape = inputs.ndim, inputs.shape
        given = _axes(self.axis)
        if not all(-ndim <= a < ndim for a in given):
            raise ValueError(
                f"LinearGeneral axis={self.axis!r} is out of range for an input of shape "
                f"{shape} ({ndim} dimensions). Pass axes in [{-ndim}, {ndim - 1}] or reshape "
                f"the input."
            )
        axes = tuple(a % ndim for a in given)
        batch_axes = tuple(self.batch_axis)
        if len(set(axes)) != len(axes) or set(axes) & set(batch_axes):
            raise ValueError(
                f"LinearGeneral axis={self.axis!r} names an axis twice (or a batch axis) for an "
                f"input of shape {shape}: it resolves to {axes}, batch axes {batch_axes}. Pass "
                f"distinct axes outside batch_axis."
            )
        expected = _sizes("LinearGeneral", "in_features", self.in_features)
        got = tuple(shape[a] for a in axes)
        if got != expected:
            raise ValueError(
                f"LinearGeneral expects sizes {expected} (in_features) on axes {self.axis!r}, got "
                f"{got} from an input of shape {shape}. Reshape the input or build "
                f"LinearGeneral(in_features={got}, ...)."
            )
        got_batch = tuple(shape[a] for a in batch_axes)
        if got_batch != tuple(self.batch_axis.values()):
            raise ValueError(
                f"LinearGeneral expects batch sizes {self.batch_axis} (batch_axis), got "
                f"{dict(zip(batch_axes, got_batch))} from an input of shape {shape}. Build it "
                f"with batch_axis={dict(zip(batch_axes, got_batch))} or reshape the input."
            )
        return axes, batch_axes


def _parse_equation(equation: str) -> tuple[str, str, str]:
    """Split an explicit two-operand einsum equation into ``(input, kernel, output)`` terms."""
    eq = equation.replace(" ", "")
    if eq.count("->") != 1:
        raise ValueError(
            f"Einsum einsum_str must be explicit, with one '->' before the output axes, got "
            f"{equation!r}. Write e.g. einsum_str='btd,dh->bth'."
        )
    operands, out = eq.split("->")
    terms = operands.split(",")
    if len(terms) != 2:
        raise ValueError(
            f"Einsum einsum_str must have exactly two operands (the input, then the kernel), "
            f"got {len(terms)} in {equation!r}. Write e.g. einsum_str='btd,dh->bth'."
        )
    lhs, rhs = terms
    for term in (lhs, rhs, out):
        letters = term.replace("...", "", 1)
        if not all(c.isalpha() for c in letters):
            raise ValueError(
                f"Einsum einsum_str terms may hold letters and one '...', got {term!r} in "
                f"{equation!r}."
            )
    if "..." in rhs:
        raise ValueError(
            f"Einsum's kernel term {rhs!r} uses '...': name every kernel axis with a letter, "
            f"e.g. 'btd,dh->bth'."
        )
    unknown = sorted(set(out.replace("...", "")) - set(lhs + rhs))
    if unknown:
        raise ValueError(
            f"Einsum einsum_str {equation!r} has output axes {unknown} that neither operand "
            f"has. Every output letter must appear in the input or kernel term."
        )
    return lhs, rhs, out


def _check_kernel(equation: str, rhs: str, kernel_shape: tuple[int, ...]) -> None:
    if len(rhs) != len(kernel_shape):
        raise ValueError(
            f"Einsum kernel term {rhs!r} of {equation!r} names {len(rhs)} axes, but "
            f"kernel_shape={kernel_shape} has {len(kernel_shape)}. Give one size per letter."
        )


def _bias_size(rhs: str, out: str, kernel_shape: tuple[int, ...]) -> int:
    """The number of bias entries: the sizes of the kernel axes kept in the output."""
    return math.prod(kernel_shape[rhs.index(c)] for c in out if c in rhs)


def _lhs_axes(lhs: str, ndim: int) -> dict[str, int] | None:
    """The input axis of each letter of the input term, or None if the rank cannot fit."""
    if "..." not in lhs:
        return {c: i for i, c in enumerate(lhs)} if len(lhs) == ndim else None
    head, tail = lhs.split("...")
    if len(head) + len(tail) > ndim:
        return None
    return {
        **{c: i for i, c in enumerate(head)},
        **{c: ndim - len(tail) + i for i, c in enumerate(tail)},
    }


class Einsum(Module):
    """A layer computing ``einsum(einsum_str, inputs, kernel) + bias`` with a learned kernel.

    ``einsum_str`` is an explicit equation with two operands, the input first and the kernel
    second (e.g. ``'btd,dnh->btnh'``). The input term may use ``...`` for leading axes; the
    kernel term names each of its axes with a letter. The bias (if ``bias_shape`` is given)
    is added over the output axes that come from the kernel.

    Args:
        einsum_str: the equation.
        kernel_shape: the kernel's shape, one size per letter of the kernel term.
        bias_shape: the bias' shape (its size must be the product of the kernel sizes kept in
            the output); ``None`` means no bias.
        dtype: computation dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``kernel`` and ``bias``.
        precision: ``jax.lax.Precision`` for the contraction.
        kernel_init: initializer of ``kernel``.
        bias_init: initializer of ``bias``.
        preferred_element_type: accumulation/result dtype of the contraction.
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata (e.g. ``sharding_names``) for the ``kernel`` Param.
        bias_metadata: metadata for the ``bias`` Param.

    Raises:
        ValueError: an equation that is not explicit or has not two operands, a kernel term
            that does not match ``kernel_shape``, or a bias size that does not fit; at call
            time, an input whose rank or sizes do not match the equation.
        TypeError: a non-floating input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Einsum
        >>> layer = Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=Rngs(0))
        >>> layer.kernel.value.shape, layer.bias.value.shape
        ((8, 2, 4), (8, 4))
        >>> layer(jnp.ones((16, 11, 2))).shape
        (16, 11, 8, 4)
    """

    def __init__(
        self,
        einsum_str: str,
        kernel_shape: Sequence[int],
        bias_shape: Sequence[int] | None = None,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        if not isinstance(einsum_str, str):
            raise TypeError(
                f"Einsum einsum_str must be a string, got {einsum_str!r}. Write e.g. "
                f"einsum_str='btd,dh->bth'."
            )
        _, rhs, out = _parse_equation(einsum_str)
        kernel = _sizes("Einsum", "kernel_shape", kernel_shape)
        _check_kernel(einsum_str, rhs, kernel)
        bias = None if bias_shape is None else _sizes("Einsum", "bias_shape", bias_shape)
        if bias is not None and math.prod(bias) != _bias_size(rhs, out, kernel):
            kept = "".join(c for c in out if c in rhs)
            shape = tuple(kernel[rhs.index(c)] for c in kept)
            raise ValueError(
                f"Einsum bias_shape={bias} has {math.prod(bias)} entries, but the kernel axes "
                f"kept in the output of {einsum_str!r} ({kept!r}) have sizes {shape}. Pass "
                f"bias_shape={shape}."
            )
        self.einsum_str = einsum_str
        self.kernel_shape = kernel
        self.bias_shape = bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.preferred_element_type = preferred_element_type
        self.kernel_metadata = metadata(kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        self.kernel = Param(kernel_init(rngs.params(), kernel, param_dtype), **self.kernel_metadata)
        self.bias: Param | None = None
        if bias is not None:
            self.bias = Param(bias_init(rngs.params(), bias, param_dtype), **self.bias_metadata)

    def __call__(self, inputs: jax.Array, einsum_str: str | None = None) -> jax.Array:
        """Apply the layer; ``einsum_str`` replaces the layer's equation for this call."""
        equation = self.einsum_str if einsum_str is None else einsum_str
        lhs, rhs, out = _parse_equation(equation)
        _check_kernel(equation, rhs, self.kernel_shape)
        inputs = as_input("Einsum", inputs)
        self._check_input(equation, lhs, rhs, inputs)
        bias = None if self.bias is None else self.bias.value
        inputs, kernel, bias = promote_dtype((inputs, self.kernel.value, bias), dtype=self.dtype)
        y = jnp.einsum(
            equation.replace(" ", ""),
            inputs,
            kernel,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )
        if bias is not None:
            if bias.size != _bias_size(rhs, out, self.kernel_shape):
                raise ValueError(
                    f"Einsum's bias of shape {bias.shape} does not fit the kernel axes kept in "
                    f"the output of {equation!r}. Use an equation that keeps the kernel axes "
                    f"of the layer's einsum_str {self.einsum_str!r}."
                )
            n_ellipsis = y.ndim - len(out.replace("...", ""))
            letters = out.replace("...", "." * n_ellipsis)
            shape = [self.kernel_shape[rhs.index(c)] if c in rhs else 1 for c in letters]
            y = y + jnp.reshape(bias, shape)
        return y

    def _check_input(self, equation: str, lhs: str, rhs: str, inputs: jax.Array) -> None:
        positions = _lhs_axes(lhs, inputs.ndim)
        if positions is None:
            raise ValueError(
                f"Einsum {equation!r} expects an input with the axes {lhs!r}, got shape "
                f"{inputs.shape} ({inputs.ndim} dimensions). Reshape the input or change the "
                f"equation."
            )
        for letter, axis in positions.items():
            if letter in rhs and inputs.shape[axis] != self.kernel_shape[rhs.index(letter)]:
                raise ValueError(
                    f"Einsum {equation!r}: input axis {letter!r} has size {inputs.shape[axis]} "
                    f"(shape {inputs.shape}) but the kernel's has size "
                    f"{self.kernel_shape[rhs.index(letter)]} (kernel_shape={self.kernel_shape})."
                    f" Reshape the input or build the layer with a matching kernel_shape."
                )
