"""`Einsum`: a layer computing ``einsum(equation, inputs, kernel) + bias`` with a learned kernel.

The equation is explicit with two operands, the input then the kernel. Either term may hold
one ``...``: as in ``jnp.einsum``, the axes it stands for in the two operands are aligned from
the right and broadcast together, and appear in the output where its ``...`` is (or are summed
when the output has none). The bias covers the output axes that come from the kernel.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp

from nnx_core import Module, Param, Rngs

from . import initializers
from ._axis_names import dense_names, named_param
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    element_type,
    metadata,
    positive_sizes,
    promote_dtype,
)
from ._sharding import out_sharding_op
from .initializers import Initializer

__all__ = ["Einsum"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_KERNEL_INIT = initializers.lecun_normal()

#: One axis of a term: a letter, or the position (0 = leftmost) among the broadcast axes of
#: ``...``, counted over all of them, so that the two operands' ``...`` line up from the right.
Label = str | int


class Terms(NamedTuple):
    """An equation's input, kernel and output terms as written (``...`` kept)."""

    lhs: str
    rhs: str
    out: str


def parse_equation(equation: str) -> Terms:
    """Split an explicit two-operand einsum equation into its terms, checking their syntax."""
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
    unknown = sorted(set(out.replace("...", "")) - set(lhs + rhs))
    if unknown:
        raise ValueError(
            f"Einsum einsum_str {equation!r} has output axes {unknown} that neither operand "
            f"has. Every output letter must appear in the input or kernel term."
        )
    return Terms(lhs, rhs, out)


def _letters(term: str) -> int:
    return len(term.replace("...", ""))


def _kernel_names(terms: Terms, kernel_shape: tuple[int, ...]) -> tuple[str | None, ...]:
    """The kernel's default axis names: its first contracted axis (in the input, not the output)
    and its first output axis (not in the input) named as `dense_names` names a Linear's."""
    if "..." in terms.rhs:
        return (None,) * len(kernel_shape)
    contracted = [i for i, a in enumerate(terms.rhs) if a in terms.lhs and a not in terms.out]
    produced = [i for i, a in enumerate(terms.rhs) if a in terms.out and a not in terms.lhs]
    sizes = [math.prod(kernel_shape[i] for i in axes) for axes in (contracted, produced)]
    names: list[str | None] = [None] * len(kernel_shape)
    for axes, name in zip((contracted, produced), dense_names(*sizes)):
        if axes:
            names[axes[0]] = name
    return tuple(names)


def check_kernel(equation: str, rhs: str, kernel_shape: tuple[int, ...]) -> None:
    """Raise unless the kernel term fits ``kernel_shape`` (``...`` takes the extra axes)."""
    fits = (
        _letters(rhs) <= len(kernel_shape) if "..." in rhs else _letters(rhs) == len(kernel_shape)
    )
    if not fits:
        raise ValueError(
            f"Einsum kernel term {rhs!r} of {equation!r} names {_letters(rhs)} axes, but "
            f"kernel_shape={kernel_shape} has {len(kernel_shape)}. Give one size per letter "
            f"(a '...' in the kernel term stands for the kernel's remaining axes)."
        )


def _labels(term: str, ndim: int, n_broadcast: int) -> list[Label] | None:
    """The label of each axis of an operand of rank ``ndim``, or None if the rank cannot fit."""
    if "..." not in term:
        return list(term) if len(term) == ndim else None
    head, tail = term.split("...")
    n = ndim - len(head) - len(tail)
    if n < 0:
        return None
    return [*head, *range(n_broadcast - n, n_broadcast), *tail]


def _broadcast_count(terms: Terms, lhs_ndim: int, rhs_ndim: int) -> int:
    """How many axes the operands' ``...`` stand for together (the longer of the two)."""
    counts = [
        ndim - _letters(term)
        for term, ndim in ((terms.lhs, lhs_ndim), (terms.rhs, rhs_ndim))
        if "..." in term
    ]
    return max([0, *counts])


class Resolved(NamedTuple):
    """Every axis of the input, kernel and output labelled (``...`` replaced)."""

    lhs: list[Label]
    rhs: list[Label]
    out: list[Label]


def resolve(equation: str, terms: Terms, inputs_shape: tuple, kernel_shape: tuple) -> Resolved:
    """Label every axis of the operands and the output, checking the ranks and sizes."""
    n = _broadcast_count(terms, len(inputs_shape), len(kernel_shape))
    lhs = _labels(terms.lhs, len(inputs_shape), n)
    if lhs is None:
        raise ValueError(
            f"Einsum {equation!r} expects an input with the axes {terms.lhs!r}, got shape "
            f"{inputs_shape} ({len(inputs_shape)} dimensions). Reshape the input or change "
            f"the equation."
        )
    # (check_kernel has seen the kernel term fit the kernel, so its labels exist)
    rhs = cast(list[Label], _labels(terms.rhs, len(kernel_shape), n))
    head, _, tail = terms.out.partition("...")
    out: list[Label] = [*head, *(range(n) if "..." in terms.out else ()), *tail]
    sizes = dict(zip(rhs, kernel_shape))
    for label, size in zip(lhs, inputs_shape):
        theirs = sizes.get(label)
        if (
            theirs is not None
            and size != theirs
            and (isinstance(label, str) or 1 not in (size, theirs))
        ):
            axis = repr(label) if isinstance(label, str) else "of '...'"
            raise ValueError(
                f"Einsum {equation!r}: input axis {axis} has size {size} (shape "
                f"{inputs_shape}) but the kernel's has size {theirs} (kernel_shape="
                f"{kernel_shape}). Reshape the input or build the layer with a matching "
                f"kernel_shape."
            )
    return Resolved(lhs, rhs, out)


def bias_shape_in_output(resolved: Resolved, kernel_shape: tuple[int, ...]) -> list[int]:
    """The bias' shape broadcast against the output: kernel sizes on kernel axes, else 1."""
    sizes = dict(zip(resolved.rhs, kernel_shape))
    return [sizes.get(label, 1) for label in resolved.out]


class Einsum(Module):
    """A layer computing ``einsum(einsum_str, inputs, kernel) + bias`` with a learned kernel.

    ``einsum_str`` is an explicit equation with two operands, the input first and the kernel
    second (e.g. ``'btd,dnh->btnh'``). Either term may use one ``...`` (in the kernel term it
    stands for the kernel axes the letters do not name); the axes of the two ``...`` are
    broadcast together as in ``jnp.einsum``. The bias (if ``bias_shape`` is given) is added over
    the output axes that come from the kernel; it is checked against the equation of each call,
    which may replace the layer's own.

    Args:
        einsum_str: the equation.
        kernel_shape: the kernel's shape, one size per letter of the kernel term (plus the
            axes of its ``...``).
        bias_shape: the bias' shape (its size must be the product of the kernel sizes kept in
            the output); ``None`` means no bias.
        dtype: computation dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``kernel`` and ``bias``.
        precision: ``jax.lax.Precision`` for the contraction.
        kernel_init: initializer of ``kernel``.
        bias_init: initializer of ``bias``.
        promote_dtype: brings ``(inputs, kernel, bias)`` to one dtype, called with
            ``dtype=dtype`` (see `promote_dtype`: integer inputs become float32).
        einsum_op: the contraction, called as ``jnp.einsum`` is; it gets
            ``preferred_element_type``/``out_sharding`` only when they are set.
        preferred_element_type: accumulation/result dtype of the contraction.
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata (e.g. ``sharding_names``) for the ``kernel`` Param.
        bias_metadata: metadata for the ``bias`` Param.

    Raises:
        ValueError: an equation that is not explicit or has not two operands, or a kernel
            term that does not fit ``kernel_shape``; at call time, an input whose rank or sizes
            do not match the equation, or a bias that does not fit the output's kernel axes.
        TypeError: a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Einsum
        >>> layer = Einsum("nta,hab->nthb", (8, 2, 4), (8, 4), rngs=Rngs(0))
        >>> layer.kernel.value.shape, layer.bias.value.shape
        ((8, 2, 4), (8, 4))
        >>> layer(jnp.ones((16, 11, 2))).shape
        (16, 11, 8, 4)
        >>> per_position = Einsum("b...d,...de->b...e", (5, 3, 4), (5, 4), rngs=Rngs(0))
        >>> per_position(jnp.ones((2, 5, 3))).shape
        (2, 5, 4)
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
        promote_dtype: PromoteDtypeFn = promote_dtype,
        einsum_op: Callable[..., jax.Array] = jnp.einsum,
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
        terms = parse_equation(einsum_str)
        kernel = positive_sizes("Einsum", "kernel_shape", kernel_shape)
        check_kernel(einsum_str, terms.rhs, kernel)
        bias = None if bias_shape is None else positive_sizes("Einsum", "bias_shape", bias_shape)
        self.einsum_str = einsum_str
        self.kernel_shape = kernel
        self.bias_shape = bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.promote_dtype = promote_dtype
        self.einsum_op = einsum_op
        self.preferred_element_type = preferred_element_type
        self.kernel_metadata = metadata(kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        value = kernel_init(rngs.params(), kernel, param_dtype)
        self.kernel = named_param(value, self.kernel_metadata, _kernel_names(terms, kernel))
        self.bias: Param | None = None
        if bias is not None:
            value = bias_init(rngs.params(), bias, param_dtype)
            self.bias = named_param(value, self.bias_metadata, (None,) * len(bias))

    def __call__(
        self, inputs: jax.Array, einsum_str: str | None = None, out_sharding: Any = None
    ) -> jax.Array:
        """Apply the layer; ``einsum_str`` replaces the layer's equation for this call.

        ``out_sharding`` lays the output out over the mesh (see `Linear`).
        """
        equation = self.einsum_str if einsum_str is None else einsum_str
        terms = parse_equation(equation)
        check_kernel(equation, terms.rhs, self.kernel_shape)
        inputs = as_input("Einsum", inputs)
        resolved = resolve(equation, terms, inputs.shape, self.kernel_shape)
        bias = None if self.bias is None else self.bias.value
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel.value, bias), dtype=self.dtype
        )
        einsum = out_sharding_op("Einsum", self.einsum_op, out_sharding)
        y = einsum(
            equation.replace(" ", ""),
            inputs,
            kernel,
            precision=self.precision,
            **element_type(self.preferred_element_type),
        )
        if bias is not None:
            y = y + jnp.reshape(bias, self._bias_shape(equation, resolved, bias.shape))
        return y

    def _bias_shape(self, equation: str, resolved: Resolved, shape: tuple) -> list[int]:
        """The bias' shape against the output, checking that the bias has that many entries."""
        broadcast = bias_shape_in_output(resolved, self.kernel_shape)
        kept = tuple(s for s, label in zip(broadcast, resolved.out) if label in resolved.rhs)
        if math.prod(shape) != math.prod(kept):
            raise ValueError(
                f"Einsum's bias of shape {shape} does not fit the output of {equation!r}: the "
                f"kernel axes kept in the output have sizes {kept}, so the bias needs "
                f"{math.prod(kept)} entries. Build the layer with bias_shape={kept}, or use an "
                f"equation that keeps the kernel axes of the bias."
            )
        return broadcast
