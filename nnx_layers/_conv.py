"""Convolutions over 1, 2 or 3 (or more) spatial axes: `Conv` and `ConvTranspose`.

Inputs are channels-last: ``(batch..., *spatial, in_features)``. An input without a batch axis
(``len(kernel_size) + 1`` dimensions) is accepted, and several leading batch axes are
flattened for the convolution and restored after it.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from types import MappingProxyType
from typing import Any, Literal

import jax
import jax.numpy as jnp

from nnx_core import Module, Param, Rngs

from . import initializers
from ._axis_names import CONV_IN, CONV_OUT, named_param
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    check_last_axis,
    check_positive_int,
    element_type,
    frozen,
    metadata,
    promote_dtype,
)
from ._constraints import Count, Size, Sizes
from ._sharding import out_sharding_op, place
from .initializers import Initializer

__all__ = ["Conv", "ConvTranspose"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_KERNEL_INIT = initializers.lecun_normal()
_PADDING_NAMES = ("SAME", "SAME_LOWER", "VALID", "CIRCULAR", "CAUSAL")

#: ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"``, ``"CIRCULAR"``, ``"CAUSAL"``, an int, or per-axis
#: ints / ``(low, high)`` pairs. (The layers also accept the names in lower case; configs take
#: the canonical upper-case spelling the layers store.)
PaddingLike = (
    Literal["SAME", "SAME_LOWER", "VALID", "CIRCULAR", "CAUSAL"]
    | Count
    | Sequence[Count | tuple[Count, Count]]
)
#: the paddings of `ConvTranspose`: ``"SAME"``, ``"VALID"``, ``"CIRCULAR"``, ints or pairs.
TransposePaddingLike = (
    Literal["SAME", "VALID", "CIRCULAR"] | Count | Sequence[Count | tuple[Count, Count]]
)


def _kernel_size(layer: str, kernel_size: Any) -> tuple[int, ...]:
    sizes = (kernel_size,) if isinstance(kernel_size, Integral) else kernel_size
    if not isinstance(sizes, (tuple, list)) or not sizes:
        raise ValueError(
            f"{layer} kernel_size must be an int or a non-empty sequence of ints, got "
            f"{kernel_size!r}. Pass e.g. kernel_size=3 (1-D) or kernel_size=(3, 3) (2-D)."
        )
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, Integral) or size < 1:
            raise ValueError(
                f"{layer} kernel_size must contain positive integers, got {kernel_size!r}. "
                f"Pass e.g. kernel_size=(3, 3)."
            )
    return tuple(int(size) for size in sizes)


def _per_axis(layer: str, name: str, value: Any, rank: int) -> tuple[int, ...]:
    """Expand ``None``, an int or a sequence into ``rank`` positive ints."""
    if value is None:
        return (1,) * rank
    values = (value,) * rank if isinstance(value, Integral) else tuple(value)
    if len(values) != rank or any(
        isinstance(v, bool) or not isinstance(v, Integral) or v < 1 for v in values
    ):
        raise ValueError(
            f"{layer} {name} must be a positive int or {rank} positive ints (one per spatial "
            f"axis of kernel_size), got {value!r}. Pass e.g. {name}={(1,) * rank}."
        )
    return tuple(int(v) for v in values)


def _bad_padding(layer: str, padding: Any, rank: int) -> ValueError:
    return ValueError(
        f"{layer} padding must be one of {_PADDING_NAMES}, a non-negative int, or {rank} "
        f"non-negative ints or (low, high) pairs (one per spatial axis), got {padding!r}. "
        f"Pass e.g. padding='SAME' or padding={((1, 1),) * rank}."
    )


def _canonical_padding(padding: Any) -> Any:
    """A padding name in upper case (the spelling configs use), anything else made hashable."""
    return padding.upper() if isinstance(padding, str) else frozen(padding)


def _as_pair(item: Any) -> tuple[int, int] | None:
    """``p`` -> ``(p, p)``, a ``(low, high)`` pair of non-negative ints as is, else ``None``."""
    pair = (item, item) if isinstance(item, Integral) else item
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        return None
    if any(isinstance(p, bool) or not isinstance(p, Integral) or p < 0 for p in pair):
        return None
    return (int(pair[0]), int(pair[1]))


def _padding(layer: str, padding: Any, rank: int) -> str | tuple[tuple[int, int], ...]:
    """Canonicalize a padding spec to an upper-case name or ``rank`` ``(low, high)`` pairs."""
    if isinstance(padding, str):
        if padding.upper() not in _PADDING_NAMES:
            raise _bad_padding(layer, padding, rank)
        return padding.upper()
    items = [padding] if isinstance(padding, Integral) else padding
    if not isinstance(items, (list, tuple)) or len(items) not in (1, rank):
        raise _bad_padding(layer, padding, rank)
    pairs = [_as_pair(item) for item in items]
    if any(pair is None for pair in pairs):
        raise _bad_padding(layer, padding, rank)
    return tuple(pairs) * (rank if len(pairs) == 1 else 1)  # type: ignore[return-value]


def _flatten_batch(layer: str, inputs: jax.Array, rank: int) -> tuple[jax.Array, tuple]:
    """Reshape to exactly one batch axis; return the original batch shape to restore."""
    if inputs.ndim < rank + 1:
        raise ValueError(
            f"{layer} with a {rank}-D kernel expects an input of shape (batch..., "
            f"{', '.join(['spatial'] * rank)}, features), got shape {inputs.shape}. "
            f"Add the missing axes or use a kernel_size with {max(inputs.ndim - 1, 1)} entries."
        )
    batch_shape = inputs.shape[: inputs.ndim - rank - 1]
    flat = inputs.reshape((math.prod(batch_shape),) + inputs.shape[len(batch_shape) :])
    return flat, batch_shape


def _dimension_numbers(ndim: int) -> jax.lax.ConvDimensionNumbers:
    spatial = tuple(range(1, ndim - 1))
    lhs = (0, ndim - 1) + spatial
    rhs = (ndim - 1, ndim - 2) + tuple(range(ndim - 2))
    return jax.lax.ConvDimensionNumbers(lhs_spec=lhs, rhs_spec=rhs, out_spec=lhs)


def _check_mask(layer: str, mask: Any, kernel_shape: tuple[int, ...]) -> None:
    if mask is not None and tuple(jnp.shape(mask)) != kernel_shape:
        raise ValueError(
            f"{layer} mask must have the kernel's shape {kernel_shape}, got shape "
            f"{tuple(jnp.shape(mask))}. Build the mask with that shape (1 keeps a weight)."
        )


def _add_bias(y: jax.Array, bias: jax.Array | None) -> jax.Array:
    return y if bias is None else y + bias.reshape((1,) * (y.ndim - 1) + (-1,))


class Conv(Module):
    """Convolution ``y = conv(x, kernel) + bias`` over ``len(kernel_size)`` spatial axes.

    Args:
        in_features: channels of the input (its last axis).
        out_features: channels of the output.
        kernel_size: an int (1-D) or one int per spatial axis.
        strides: an int or one per spatial axis (``None`` means 1).
        padding: ``"SAME"``, ``"VALID"``, ``"CIRCULAR"`` (periodic), ``"CAUSAL"`` (1-D only,
            pads on the left), an int, or per-axis ints or ``(low, high)`` pairs.
        input_dilation: dilation of the input (a.k.a. transposed-conv stride).
        kernel_dilation: dilation of the kernel (a.k.a. atrous convolution).
        feature_group_count: split the channels into this many groups (depthwise when equal
            to ``in_features``); must divide ``in_features`` and ``out_features``.
        use_bias: whether to add a bias.
        mask: optional array of the kernel's shape multiplied into the kernel.
        dtype: computation dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``kernel`` and ``bias``.
        precision: ``jax.lax.Precision`` for the convolution.
        kernel_init: initializer of ``kernel``, shape
            ``kernel_size + (in_features // feature_group_count, out_features)``.
        bias_init: initializer of ``bias``, shape ``(out_features,)``.
        conv_general_dilated: the convolution, called as ``jax.lax.conv_general_dilated``
            is; it gets ``preferred_element_type``/``out_sharding`` only when they are set.
        promote_dtype: brings ``(inputs, kernel, bias)`` to one dtype, called with
            ``dtype=dtype`` (see `promote_dtype`: integer inputs become float32).
        preferred_element_type: accumulation/result dtype for the convolution.
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata for the ``kernel`` Param.
        bias_metadata: metadata for the ``bias`` Param.

    Raises:
        ValueError: for a bad ``kernel_size``, ``strides``, dilation, padding, group count or
            mask at construction, and for an input of the wrong rank or channel count.
        TypeError: for a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Conv
        >>> conv = Conv(3, 8, kernel_size=(3, 3), rngs=Rngs(0))
        >>> conv.kernel.value.shape
        (3, 3, 3, 8)
        >>> conv(jnp.ones((2, 16, 16, 3))).shape
        (2, 16, 16, 8)
        >>> Conv(3, 8, (3, 3), strides=2, padding="VALID", rngs=Rngs(0))(jnp.ones((2, 16, 16, 3))).shape
        (2, 7, 7, 8)
    """

    def __init__(
        self,
        in_features: Size,
        out_features: Size,
        kernel_size: Sizes,
        strides: None | Sizes = 1,
        *,
        padding: PaddingLike = "SAME",
        input_dilation: None | Sizes = 1,
        kernel_dilation: None | Sizes = 1,
        feature_group_count: Size = 1,
        use_bias: bool = True,
        mask: jax.Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        conv_general_dilated: Callable[..., jax.Array] = jax.lax.conv_general_dilated,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.in_features = check_positive_int("Conv", "in_features", in_features)
        self.out_features = check_positive_int("Conv", "out_features", out_features)
        self.kernel_size = _kernel_size("Conv", kernel_size)
        rank = len(self.kernel_size)
        self.strides = frozen(strides)
        self.padding = _canonical_padding(padding)
        self.input_dilation = frozen(input_dilation)
        self.kernel_dilation = frozen(kernel_dilation)
        self.feature_group_count = feature_group_count
        self._check_config(rank)
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.conv_general_dilated = conv_general_dilated
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type
        self.kernel_metadata = metadata(kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        kernel_shape = self.kernel_size + (in_features // feature_group_count, out_features)
        _check_mask("Conv", mask, kernel_shape)
        window: tuple[None, ...] = (None,) * len(self.kernel_size)
        self.kernel = named_param(
            kernel_init(rngs.params(), kernel_shape, param_dtype),
            self.kernel_metadata,
            (*window, CONV_IN, CONV_OUT),
        )
        self.bias: Param | None = None
        if use_bias:
            bias_value = bias_init(rngs.params(), (out_features,), param_dtype)
            self.bias = named_param(bias_value, self.bias_metadata, (CONV_OUT,))

    def _check_config(self, rank: int) -> None:
        _per_axis("Conv", "strides", self.strides, rank)
        _per_axis("Conv", "input_dilation", self.input_dilation, rank)
        _per_axis("Conv", "kernel_dilation", self.kernel_dilation, rank)
        if _padding("Conv", self.padding, rank) == "CAUSAL" and rank != 1:
            raise ValueError(
                f"Conv padding='CAUSAL' is only defined for 1-D convolutions, got "
                f"kernel_size={self.kernel_size}. Use explicit pairs, e.g. padding="
                f"{tuple((k - 1, 0) for k in self.kernel_size)}, for the same effect."
            )
        groups = check_positive_int("Conv", "feature_group_count", self.feature_group_count)
        if self.in_features % groups or self.out_features % groups:
            raise ValueError(
                f"Conv feature_group_count={groups} must divide both in_features="
                f"{self.in_features} and out_features={self.out_features}. Choose a common "
                f"divisor, e.g. feature_group_count={math.gcd(self.in_features, self.out_features)}."
            )

    def _pad_input(self, inputs: jax.Array, rank: int) -> tuple[jax.Array, Any]:
        """Apply CIRCULAR/CAUSAL padding explicitly; return the padding left for lax."""
        padding = _padding("Conv", self.padding, rank)
        dilation = _per_axis("Conv", "kernel_dilation", self.kernel_dilation, rank)
        if padding == "CIRCULAR":
            spans = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, dilation)]
            pads = [(0, 0)] + [((s - 1) // 2, s // 2) for s in spans] + [(0, 0)]
            return jnp.pad(inputs, pads, mode="wrap"), "VALID"
        if padding == "CAUSAL":
            left = dilation[0] * (self.kernel_size[0] - 1)
            return jnp.pad(inputs, [(0, 0), (left, 0), (0, 0)]), "VALID"
        return inputs, padding

    def __call__(self, inputs: jax.Array, out_sharding: Any = None) -> jax.Array:
        """Convolve ``inputs`` of shape ``(batch..., *spatial, in_features)``.

        ``out_sharding`` lays the output out over the mesh (see `Linear`).
        """
        rank = len(self.kernel_size)
        inputs = as_input("Conv", inputs)
        check_last_axis("Conv", inputs, self.in_features, "in_features")
        flat, batch_shape = _flatten_batch("Conv", inputs, rank)
        flat, padding = self._pad_input(flat, rank)
        kernel = self.kernel.value
        if self.mask is not None:
            kernel = kernel * self.mask
        bias = None if self.bias is None else self.bias.value
        flat, kernel, bias = self.promote_dtype((flat, kernel, bias), dtype=self.dtype)
        # one batch axis: the convolution lays its own output out; else the reshaped output
        native = len(batch_shape) == 1
        conv = out_sharding_op("Conv", self.conv_general_dilated, out_sharding if native else None)
        y = conv(
            flat,
            kernel,
            _per_axis("Conv", "strides", self.strides, rank),
            padding,
            lhs_dilation=_per_axis("Conv", "input_dilation", self.input_dilation, rank),
            rhs_dilation=_per_axis("Conv", "kernel_dilation", self.kernel_dilation, rank),
            dimension_numbers=_dimension_numbers(flat.ndim),
            feature_group_count=self.feature_group_count,
            precision=self.precision,
            **element_type(self.preferred_element_type),
        )
        y = _add_bias(y, bias).reshape(batch_shape + y.shape[1:])
        return y if native else place("Conv", y, out_sharding)


def _circular_shift(size: int, period: int, span: int, transpose_kernel: bool) -> int:
    """Where entry 0 of a full (VALID) transposed-conv output lands on the periodic grid.

    With ``transpose_kernel`` the layer is the gradient of a circular `Conv`, whose padding
    puts ``(span - 1) // 2`` on the left; otherwise the overhang is split evenly.
    """
    if transpose_kernel:
        return -((span - 1) // 2)
    return (-(size - period) % (2 * period) + 1) // 2


def _wrap_circular(y: jax.Array, periods: list[int], shifts: list[int]) -> jax.Array:
    """Fold a full transposed-conv output onto a periodic grid: entry ``m`` of spatial axis
    ``i`` is added to position ``(m + shifts[i]) % periods[i]``."""
    for axis, (period, shift) in enumerate(zip(periods, shifts), start=1):
        left = shift % period
        pads = [(0, 0)] * y.ndim
        pads[axis] = (left, -(left + y.shape[axis]) % period)
        y = jnp.pad(y, pads)
        y = y.reshape(y.shape[:axis] + (-1, period) + y.shape[axis + 1 :]).sum(axis=axis)
    return y


class ConvTranspose(Module):
    """Transposed convolution (the gradient of `Conv` with respect to its input).

    Args:
        in_features: channels of the input (its last axis).
        out_features: channels of the output.
        kernel_size: an int (1-D) or one int per spatial axis.
        strides: an int or one per spatial axis (``None`` means 1); upsamples by this factor.
        padding: ``"SAME"``, ``"VALID"``, ``"CIRCULAR"``, an int, or per-axis ints or pairs.
        kernel_dilation: dilation of the kernel (``None`` means 1).
        use_bias: whether to add a bias.
        mask: optional array of the kernel's shape multiplied into the kernel.
        dtype: computation dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``kernel`` and ``bias``.
        precision: ``jax.lax.Precision`` for the convolution.
        kernel_init: initializer of ``kernel``, shape ``kernel_size + (in_features,
            out_features)`` (the last two swapped when ``transpose_kernel``).
        bias_init: initializer of ``bias``, shape ``(out_features,)``.
        transpose_kernel: flip the kernel spatially and swap its feature axes, giving the
            exact gradient of a `Conv` that uses this kernel.
        promote_dtype: brings ``(inputs, kernel, bias)`` to one dtype, called with
            ``dtype=dtype`` (see `promote_dtype`: integer inputs become float32).
        preferred_element_type: accumulation/result dtype for the convolution.
        rngs: random streams; ``rngs.params()`` initializes the parameters.
        kernel_metadata: metadata for the ``kernel`` Param.
        bias_metadata: metadata for the ``bias`` Param.

    Raises:
        ValueError: for a bad ``kernel_size``, ``strides``, dilation, padding or mask, and
            for an input of the wrong rank or channel count.
        TypeError: for a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import ConvTranspose
        >>> up = ConvTranspose(8, 3, kernel_size=(3, 3), strides=2, rngs=Rngs(0))
        >>> up(jnp.ones((2, 8, 8, 8))).shape
        (2, 16, 16, 3)
    """

    def __init__(
        self,
        in_features: Size,
        out_features: Size,
        kernel_size: Sizes,
        strides: Sizes | None = None,
        *,
        padding: TransposePaddingLike = "SAME",
        kernel_dilation: Sizes | None = None,
        use_bias: bool = True,
        mask: jax.Array | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = _DEFAULT_KERNEL_INIT,
        bias_init: Initializer = initializers.zeros,
        transpose_kernel: bool = False,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        preferred_element_type: Dtype | None = None,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _EMPTY,
        bias_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.in_features = check_positive_int("ConvTranspose", "in_features", in_features)
        self.out_features = check_positive_int("ConvTranspose", "out_features", out_features)
        self.kernel_size = _kernel_size("ConvTranspose", kernel_size)
        rank = len(self.kernel_size)
        self.strides = frozen(strides)
        self.padding = _canonical_padding(padding)
        self.kernel_dilation = frozen(kernel_dilation)
        _per_axis("ConvTranspose", "strides", self.strides, rank)
        _per_axis("ConvTranspose", "kernel_dilation", self.kernel_dilation, rank)
        if _padding("ConvTranspose", self.padding, rank) in ("CAUSAL", "SAME_LOWER"):
            raise _bad_padding("ConvTranspose", padding, rank)
        self.use_bias = use_bias
        self.mask = mask
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.kernel_init = kernel_init
        self.bias_init = bias_init
        self.transpose_kernel = transpose_kernel
        self.promote_dtype = promote_dtype
        self.preferred_element_type = preferred_element_type
        self.kernel_metadata = metadata(kernel_metadata)
        self.bias_metadata = metadata(bias_metadata)
        features = (out_features, in_features) if transpose_kernel else (in_features, out_features)
        kernel_shape = self.kernel_size + features
        _check_mask("ConvTranspose", mask, kernel_shape)
        window: tuple[None, ...] = (None,) * len(self.kernel_size)
        channels = (CONV_OUT, CONV_IN) if transpose_kernel else (CONV_IN, CONV_OUT)
        self.kernel = named_param(
            kernel_init(rngs.params(), kernel_shape, param_dtype),
            self.kernel_metadata,
            (*window, *channels),
        )
        self.bias: Param | None = None
        if use_bias:
            bias_value = bias_init(rngs.params(), (out_features,), param_dtype)
            self.bias = named_param(bias_value, self.bias_metadata, (CONV_OUT,))

    def __call__(self, inputs: jax.Array) -> jax.Array:
        """Apply the transposed convolution to ``(batch..., *spatial, in_features)``."""
        rank = len(self.kernel_size)
        inputs = as_input("ConvTranspose", inputs)
        check_last_axis("ConvTranspose", inputs, self.in_features, "in_features")
        flat, batch_shape = _flatten_batch("ConvTranspose", inputs, rank)
        strides = _per_axis("ConvTranspose", "strides", self.strides, rank)
        dilation = _per_axis("ConvTranspose", "kernel_dilation", self.kernel_dilation, rank)
        padding = _padding("ConvTranspose", self.padding, rank)
        kernel = self.kernel.value
        if self.mask is not None:
            kernel = kernel * self.mask
        bias = None if self.bias is None else self.bias.value
        flat, kernel, bias = self.promote_dtype((flat, kernel, bias), dtype=self.dtype)
        y = jax.lax.conv_transpose(
            flat,
            kernel,
            strides,
            "VALID" if padding == "CIRCULAR" else padding,
            rhs_dilation=dilation,
            transpose_kernel=self.transpose_kernel,
            precision=self.precision,
            preferred_element_type=self.preferred_element_type,
        )
        if padding == "CIRCULAR":
            y = self._fold_circular(y, flat.shape[1:-1], strides, dilation)
        y = _add_bias(y, bias)
        return y.reshape(batch_shape + y.shape[1:])

    def _fold_circular(
        self, y: jax.Array, in_sizes: tuple[int, ...], strides: tuple, dilation: tuple
    ) -> jax.Array:
        """Periodic boundary: fold the full output onto ``in_size * stride`` per axis."""
        periods = [size * stride for size, stride in zip(in_sizes, strides)]
        spans = [(k - 1) * d + 1 for k, d in zip(self.kernel_size, dilation)]
        shifts = [
            _circular_shift(size, period, span, self.transpose_kernel)
            for size, period, span in zip(y.shape[1:-1], periods, spans)
        ]
        return _wrap_circular(y, periods, shifts)
