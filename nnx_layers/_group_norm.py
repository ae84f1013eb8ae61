"""Per-example normalization over groups of channels: `GroupNorm` and `InstanceNorm`.

Both normalize each example on its own (no running statistics, the same in training and
evaluation); they differ in which features share statistics: a group of channels
(`GroupNorm`) or a single channel (`InstanceNorm`).
"""

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Rngs

from . import initializers
from ._checks import (
    Dtype,
    PromoteDtypeFn,
    as_input,
    canonical_axes,
    check_feature_size,
    check_param_dtype,
    check_positive_int,
    frozen,
    metadata,
    promote_dtype,
)
from ._constraints import NonNegative, Size
from ._norm_stats import affine_params, check_epsilon, moments, normalize, param_value
from .initializers import Initializer

__all__ = ["GroupNorm", "InstanceNorm"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _group_layout(
    num_features: int, num_groups: int | None, group_size: int | None
) -> tuple[int, int]:
    """Resolve ``(num_groups, group_size)`` from either (or both, if they agree)."""
    if num_groups is None and group_size is None:
        raise ValueError(
            f"GroupNorm needs num_groups or group_size, got neither for {num_features} "
            f"features. Pass e.g. num_groups=32 or group_size=16."
        )
    if group_size is not None:
        group_size = check_positive_int("GroupNorm", "group_size", group_size)
        if num_features % group_size:
            raise ValueError(
                f"GroupNorm group_size={group_size} does not divide num_features="
                f"{num_features}. Pass a group_size that divides it, or num_groups instead."
            )
        derived = num_features // group_size
        if num_groups is not None and num_groups != derived:
            raise ValueError(
                f"GroupNorm got num_groups={num_groups!r} and group_size={group_size}, which "
                f"disagree for num_features={num_features} ({num_features} // {group_size} = "
                f"{derived} groups). Pass num_groups=None with group_size (num_groups defaults "
                f"to 32), or only one of them."
            )
        return derived, group_size
    num_groups = check_positive_int("GroupNorm", "num_groups", num_groups)
    if num_features % num_groups:
        raise ValueError(
            f"GroupNorm num_groups={num_groups} does not divide num_features={num_features}. "
            f"Pass a number of groups that divides the features, e.g. num_groups="
            f"{_largest_divisor(num_features, num_groups)}."
        )
    return num_groups, num_features // num_groups


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


class GroupNorm(Module):
    """Group normalization: normalize each example over groups of channels.

    The last axis holds ``num_features`` channels, split into ``num_groups`` groups of
    ``group_size`` consecutive channels. Each group of each example is normalized with the mean
    and variance over ``reduction_axes`` (by default every axis but the leading batch axis)
    and its channels, then ``scale`` and ``bias`` (one per channel) are applied. ``num_groups=1``
    is a LayerNorm over all non-batch axes; ``num_groups=num_features`` is an InstanceNorm.

    Args:
        num_features: number of channels (the size of the last axis).
        num_groups: number of groups; pass ``None`` to give ``group_size`` instead.
        group_size: channels per group (``num_features // num_groups`` when omitted). If both
            are given they must agree. Both are stored as given; ``group_layout`` holds the
            resolved ``(num_groups, group_size)``.
        epsilon: added to the variance before the square root.
        dtype: output dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``scale`` and ``bias``.
        use_bias: whether to add the learned ``bias``.
        use_scale: whether to multiply by the learned ``scale``.
        bias_init: initializer of ``bias``.
        scale_init: initializer of ``scale``.
        reduction_axes: axes the statistics are computed over, besides the channels of a
            group; must include the last axis. ``None``: every axis but the first.
        axis_name: a named axis (``vmap``/``shard_map``) to average statistics over.
        axis_index_groups: device groups for ``axis_name``.
        use_fast_variance: compute the variance as ``E[x^2] - E[x]^2`` (one pass).
        promote_dtype: brings ``(x, scale, bias)`` to one dtype before normalizing,
            called with ``dtype=dtype`` (see `promote_dtype`; integer inputs become
            float32). The statistics are computed in at least float32 either way.
        rngs: random streams; ``rngs.params()`` initializes ``scale``/``bias``.
        bias_metadata: metadata for the ``bias`` Param.
        scale_metadata: metadata for the ``scale`` Param.

    Raises:
        ValueError: at construction, if neither ``num_groups`` nor ``group_size`` is given,
            they disagree, or they do not divide ``num_features``; at call time, for an input
            whose last axis is not ``num_features`` wide or ``reduction_axes`` without it.
        TypeError: for a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import GroupNorm
        >>> gn = GroupNorm(4, num_groups=2, rngs=Rngs(0))
        >>> gn.group_layout  # (num_groups, group_size)
        (2, 2)
        >>> gn(jnp.array([[[0.0, 2.0, 5.0, 5.0], [2.0, 0.0, 7.0, 7.0]]])).round(3)
        Array([[[-1.,  1., -1., -1.],
                [ 1., -1.,  1.,  1.]]], dtype=float32)
    """

    def __init__(
        self,
        num_features: Size,
        num_groups: Size | None = 32,
        group_size: Size | None = None,
        *,
        epsilon: NonNegative = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros,
        scale_init: Initializer = initializers.ones,
        reduction_axes: int | Sequence[int] | None = None,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _EMPTY,
        scale_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.num_features = check_positive_int("GroupNorm", "num_features", num_features)
        _group_layout(num_features, num_groups, group_size)  # raises for a bad layout
        self.num_groups = num_groups
        self.group_size = group_size
        self.epsilon = check_epsilon("GroupNorm", epsilon)
        self.dtype = dtype
        self.param_dtype = check_param_dtype("GroupNorm", "param_dtype", param_dtype)
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.bias_init = bias_init
        self.scale_init = scale_init
        self.reduction_axes = frozen(reduction_axes)
        self.axis_name = axis_name
        self.axis_index_groups = frozen(axis_index_groups)
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype
        self.bias_metadata = metadata(bias_metadata)
        self.scale_metadata = metadata(scale_metadata)
        self.scale, self.bias = affine_params(
            self, rngs, (num_features,), use_bias=use_bias, use_scale=use_scale
        )

    @property
    def group_layout(self) -> tuple[int, int]:
        """``(num_groups, group_size)`` resolved from whichever of the two was given."""
        return _group_layout(self.num_features, self.num_groups, self.group_size)

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        """Normalize ``x`` (channels last); ``mask`` excludes entries from the statistics."""
        x = as_input("GroupNorm", x)
        last = x.ndim - 1
        check_feature_size("GroupNorm", x, (last,), self.num_features)
        axes = self._reduction_axes(x.ndim)
        x, scale, bias = self.promote_dtype(
            (x, param_value(self.scale), param_value(self.bias)), dtype=self.dtype
        )
        # Work on (..., num_groups, group_size): the channels of a group are one more axis.
        group_shape = x.shape[:-1] + self.group_layout
        grouped = x.reshape(group_shape)
        if mask is not None:
            mask = jnp.broadcast_to(mask, x.shape).reshape(group_shape)
        grouped_axes = tuple(a for a in axes if a != last) + (last + 1,)
        mean, var = moments(grouped, grouped_axes, module=self, mask=mask)
        y = normalize(
            grouped,
            mean,
            var,
            scale=scale,
            bias=bias,
            module=self,
            axes=(grouped_axes, (last, last + 1)),
        )
        return y.reshape(x.shape)

    def _reduction_axes(self, ndim: int) -> tuple[int, ...]:
        if self.reduction_axes is None:
            return tuple(range(1, ndim - 1)) + (ndim - 1,)
        axes = canonical_axes("GroupNorm", self.reduction_axes, ndim)
        if ndim - 1 not in axes:
            raise ValueError(
                f"GroupNorm reduction_axes must include the channel axis (the last, -1), got "
                f"{self.reduction_axes} for an input with {ndim} dimensions. Add -1 to them, "
                f"or pass reduction_axes=None (every axis but the batch axis)."
            )
        return axes


class InstanceNorm(Module):
    """Instance normalization: normalize each channel of each example on its own.

    The statistics are computed over every axis but the leading batch axis and
    ``feature_axes``; ``scale`` and ``bias`` vary over ``feature_axes``.

    Args:
        num_features: number of features over ``feature_axes`` (the product of their sizes).
        epsilon: added to the variance before the square root.
        dtype: output dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``scale`` and ``bias``.
        use_bias: whether to add the learned ``bias``.
        use_scale: whether to multiply by the learned ``scale``.
        bias_init: initializer of ``bias``.
        scale_init: initializer of ``scale``.
        feature_axes: the channel axis (or axes); never the leading batch axis.
        axis_name: a named axis to average statistics over.
        axis_index_groups: device groups for ``axis_name``.
        use_fast_variance: compute the variance as ``E[x^2] - E[x]^2``.
        promote_dtype: brings ``(x, scale, bias)`` to one dtype before normalizing,
            called with ``dtype=dtype`` (see `promote_dtype`; integer inputs become
            float32). The statistics are computed in at least float32 either way.
        rngs: random streams; ``rngs.params()`` initializes ``scale``/``bias``.
        bias_metadata: metadata for the ``bias`` Param.
        scale_metadata: metadata for the ``scale`` Param.

    Raises:
        ValueError: for ``feature_axes`` that include the leading axis, or an input whose
            feature axes do not hold ``num_features`` features.
        TypeError: for a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import InstanceNorm
        >>> x = jnp.array([[[1.0, 10.0], [3.0, 30.0]]])  # (batch, length, channels)
        >>> InstanceNorm(2, rngs=Rngs(0))(x).round(3)
        Array([[[-1., -1.],
                [ 1.,  1.]]], dtype=float32)
    """

    def __init__(
        self,
        num_features: Size,
        *,
        epsilon: NonNegative = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros,
        scale_init: Initializer = initializers.ones,
        feature_axes: int | Sequence[int] = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _EMPTY,
        scale_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.num_features = check_positive_int("InstanceNorm", "num_features", num_features)
        self.epsilon = check_epsilon("InstanceNorm", epsilon)
        self.dtype = dtype
        self.param_dtype = check_param_dtype("InstanceNorm", "param_dtype", param_dtype)
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.bias_init = bias_init
        self.scale_init = scale_init
        self.feature_axes = frozen(feature_axes)
        self.axis_name = axis_name
        self.axis_index_groups = frozen(axis_index_groups)
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype
        self.bias_metadata = metadata(bias_metadata)
        self.scale_metadata = metadata(scale_metadata)
        self.scale, self.bias = affine_params(
            self, rngs, (num_features,), use_bias=use_bias, use_scale=use_scale
        )

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        """Normalize ``x``; ``mask`` excludes entries from the statistics."""
        x = as_input("InstanceNorm", x)
        feature_axes = canonical_axes("InstanceNorm", self.feature_axes, x.ndim)
        if 0 in feature_axes:
            raise ValueError(
                f"InstanceNorm feature_axes {self.feature_axes} include the leading axis of an "
                f"input with shape {x.shape}; that axis is the batch axis. Give the input a "
                f"batch axis, e.g. x[None], or choose other feature_axes."
            )
        check_feature_size("InstanceNorm", x, feature_axes, self.num_features)
        reduction_axes = tuple(a for a in range(1, x.ndim) if a not in feature_axes)
        x, scale, bias = self.promote_dtype(
            (x, param_value(self.scale), param_value(self.bias)), dtype=self.dtype
        )
        mean, var = moments(x, reduction_axes, module=self, mask=mask)
        return normalize(
            x, mean, var, scale=scale, bias=bias, module=self, axes=(reduction_axes, feature_axes)
        )
