"""`LinearGeneral`: a dense layer contracting several input axes into several output axes."""

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Param, Rngs

from . import initializers
from ._axis_names import general_names, named_param
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    element_type,
    is_int,
    metadata,
    positive_sizes,
    promote_dtype,
)
from ._constraints import Sizes
from ._sharding import out_sharding_op
from .initializers import Initializer

__all__ = ["LinearGeneral"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_KERNEL_INIT = initializers.lecun_normal()


def _stored(value: Any) -> Any:
    """An int as a Python int, a sequence as a tuple (the hashable form kept on the layer)."""
    return int(value) if is_int(value) else tuple(int(v) if is_int(v) else v for v in value)


def _axes(value: Any) -> tuple[int, ...]:
    """``axis`` (an int or a non-empty sequence of distinct ints) as a tuple."""
    axes = (value,) if is_int(value) else value
    if (
        not isinstance(axes, Sequence)
        or isinstance(axes, str)
        or not axes
        or not all(is_int(a) for a in axes)
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
    items = {int(k) if is_int(k) else k: v for k, v in value.items()}
    if sorted(items, key=str) != list(range(len(items))) or not all(
        is_int(v) and v >= 1 for v in items.values()
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
        promote_dtype: brings ``(inputs, kernel, bias)`` to one dtype, called with
            ``dtype=dtype`` (see `promote_dtype`: integer inputs become float32).
        dot_general: the contraction, called as ``jax.lax.dot_general`` is (the default;
            ``None`` means it too); it gets ``preferred_element_type``/``out_sharding`` only
            when they are set.
        dot_general_cls: a class whose instance (made at each call) is the contraction; it
            takes precedence over ``dot_general``.
        preferred_element_type: accumulation/result dtype passed to ``lax.dot_general``.
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata (e.g. ``sharding_names``) for the ``kernel`` Param.
        bias_metadata: metadata for the ``bias`` Param.

    Raises:
        ValueError: bad sizes, axes or ``batch_axis`` (at construction); at call time, axes
            out of range or input sizes that do not match ``in_features`` / ``batch_axis``.
        TypeError: a non-numeric input.

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
        in_features: Sizes,
        out_features: Sizes,
        *,
        axis: int | Sequence[int] = -1,
        batch_axis: Mapping[int, int] = _EMPTY,
        use_bias: bool = True,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        precision: Any = None,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        dot_general: Callable[..., jax.Array] | None = jax.lax.dot_general,
        dot_general_cls: Callable[[], Callable[..., jax.Array]] | None = None,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        in_shape = positive_sizes("LinearGeneral", "in_features", in_features)
        out_shape = positive_sizes("LinearGeneral", "out_features", out_features)
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
        self.promote_dtype = promote_dtype
        self.dot_general = dot_general
        self.dot_general_cls = dot_general_cls
        self.preferred_element_type = preferred_element_type
        self.kernel_metadata = metadata(kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        batch_shape = tuple(batch.values())
        kernel_shape = (*batch_shape, *in_shape, *out_shape)
        split = len(batch_shape) + len(in_shape)
        kernel = _flat_init(kernel_init, rngs.params(), kernel_shape, split, param_dtype)
        kernel_names, bias_names = general_names(in_shape, out_shape, len(batch_shape))
        self.kernel = named_param(kernel, self.kernel_metadata, kernel_names)
        self.bias: Param | None = None
        if use_bias:
            bias_shape = (*batch_shape, *out_shape)
            flat = bias_init(rngs.params(), (math.prod(bias_shape),), param_dtype)
            bias = jnp.reshape(flat, bias_shape)
            self.bias = named_param(bias, self.bias_metadata, bias_names)

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        """Contract ``inputs``' axes ``axis``; the output ends with ``out_features``.

        ``out_sharding`` lays the output out over the mesh (see `Linear`).
        """
        inputs = as_input("LinearGeneral", inputs)
        axes, batch_axes = self._input_axes(inputs)
        out_shape = positive_sizes("LinearGeneral", "out_features", self.out_features)
        bias = None if self.bias is None else self.bias.value
        inputs, kernel, bias = self.promote_dtype(
            (inputs, self.kernel.value, bias), dtype=self.dtype
        )
        n_batch = len(batch_axes)
        contract = tuple(range(n_batch, n_batch + len(axes)))
        op = self.dot_general or jax.lax.dot_general
        if self.dot_general_cls is not None:
            op = self.dot_general_cls()
        y = out_sharding_op("LinearGeneral", op, out_sharding)(
            inputs,
            kernel,
            ((axes, contract), (batch_axes, tuple(range(n_batch)))),
            precision=self.precision,
            **element_type(self.preferred_element_type),
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
        expected = positive_sizes("LinearGeneral", "in_features", self.in_features)
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
