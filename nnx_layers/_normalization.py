"""Normalization layers: `BatchNorm`, `LayerNorm` and `RMSNorm`.

Statistics are computed in at least float32 (``float32`` for ``bfloat16``/``float16`` inputs);
the output dtype is ``dtype`` if given, else the promotion of the input and the parameters
(see `nnx_layers._norm_stats`).
"""

from collections.abc import Mapping, Sequence
from numbers import Real
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import BatchStat, Module, Param, Rngs

from . import initializers
from ._axis_names import EMBED, named_param
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
from ._constraints import NonNegative, Rate, Size
from ._norm_stats import (
    affine_params,
    check_epsilon,
    mean_square,
    moments,
    normalize,
    param_value,
)
from .initializers import Initializer

__all__ = ["BatchNorm", "LayerNorm", "RMSNorm"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _check_momentum(momentum: Any) -> float:
    if isinstance(momentum, bool) or not isinstance(momentum, Real) or not 0 <= momentum <= 1:
        raise ValueError(
            f"BatchNorm momentum must be a number in [0, 1] (the weight of the running "
            f"averages), got {momentum!r}. Pass e.g. momentum=0.99."
        )
    return float(momentum)


class BatchNorm(Module):
    """Batch normalization with running averages ``mean`` and ``var`` (BatchStat).

    In training mode (``use_running_average=False``) the layer normalizes with the batch
    statistics over every axis but ``axis`` and updates ``mean``/``var`` as
    ``momentum * running + (1 - momentum) * batch``; in eval mode it normalizes with the
    running averages. ``model.train()``/``model.eval()`` switch ``use_running_average``.

    Args:
        num_features: size of the feature axis.
        use_running_average: normalize with the running averages instead of batch statistics.
        axis: the feature axis (or axes).
        momentum: decay of the running averages.
        epsilon: added to the variance before the square root.
        dtype: output dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``scale`` and ``bias`` (``mean``/``var`` are always float32).
        use_bias: whether to add the learned ``bias``.
        use_scale: whether to multiply by the learned ``scale``.
        bias_init: initializer of ``bias``.
        scale_init: initializer of ``scale``.
        axis_name: a named axis (``vmap``/``shard_map``/``pmap``) to average statistics over.
        axis_index_groups: device groups for ``axis_name`` (see ``jax.lax.pmean``).
        use_fast_variance: compute the variance as ``E[x^2] - E[x]^2`` (one pass).
        promote_dtype: brings ``(x, mean, var, scale, bias)`` to one dtype before normalizing,
            called with ``dtype=dtype`` (see `promote_dtype`; integer inputs become
            float32). The statistics are computed in at least float32 either way.
        rngs: random streams; ``rngs.params()`` initializes ``scale``/``bias``.
        bias_metadata: metadata for the ``bias`` Param.
        scale_metadata: metadata for the ``scale`` Param.

    Raises:
        ValueError: for a ``momentum`` outside ``[0, 1]`` or a negative ``epsilon``; for an
            input whose feature axis is not ``num_features`` wide.
        TypeError: for a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import BatchNorm
        >>> bn = BatchNorm(3, rngs=Rngs(0))
        >>> y = bn(jnp.array([[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]]))
        >>> y.round(3)
        Array([[-1., -1., -1.],
               [ 1.,  1.,  1.]], dtype=float32)
        >>> bn.mean.value
        Array([0.01, 0.02, 0.03], dtype=float32)
    """

    def __init__(
        self,
        num_features: Size,
        *,
        use_running_average: bool | None = False,
        axis: int | Sequence[int] = -1,
        momentum: Rate = 0.99,
        epsilon: NonNegative = 1e-5,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_bias: bool = True,
        use_scale: bool = True,
        bias_init: Initializer = initializers.zeros,
        scale_init: Initializer = initializers.ones,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _EMPTY,
        scale_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.num_features = check_positive_int("BatchNorm", "num_features", num_features)
        self.use_running_average = use_running_average
        self.axis = frozen(axis)
        self.momentum = _check_momentum(momentum)
        self.epsilon = check_epsilon("BatchNorm", epsilon)
        self.dtype = dtype
        self.param_dtype = check_param_dtype("BatchNorm", "param_dtype", param_dtype)
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.bias_init = bias_init
        self.scale_init = scale_init
        self.axis_name = axis_name
        self.axis_index_groups = frozen(axis_index_groups)
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype
        self.bias_metadata = metadata(bias_metadata)
        self.scale_metadata = metadata(scale_metadata)
        shape = (num_features,)
        self.mean = BatchStat(jnp.zeros(shape, jnp.float32), sharding_names=(EMBED,))
        self.var = BatchStat(jnp.ones(shape, jnp.float32), sharding_names=(EMBED,))
        self.scale, self.bias = affine_params(
            self, rngs, shape, use_bias=use_bias, use_scale=use_scale
        )

    def __call__(
        self,
        x: jax.Array,
        use_running_average: bool | None = None,
        *,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        """Normalize ``x``; ``use_running_average`` overrides the attribute for this call.

        ``mask`` (broadcastable to ``x``, boolean) excludes entries from the batch statistics.
        """
        if use_running_average is None:
            use_running_average = self.use_running_average
        if use_running_average is None:
            raise ValueError(
                "BatchNorm has use_running_average=None and none was passed to the call. "
                "Pass use_running_average=True/False to the call, or call model.train() / "
                "model.eval() first."
            )
        x = as_input("BatchNorm", x)
        feature_axes = canonical_axes("BatchNorm", self.axis, x.ndim)
        check_feature_size("BatchNorm", x, feature_axes, self.num_features)
        reduction_axes = tuple(a for a in range(x.ndim) if a not in feature_axes)
        x, mean, var, scale, bias = self.promote_dtype(
            (x, self.mean.value, self.var.value, param_value(self.scale), param_value(self.bias)),
            dtype=self.dtype,
        )
        if not use_running_average:
            mean, var = moments(x, reduction_axes, module=self, mask=mask)
            self._update_running(mean, var)
        return normalize(
            x, mean, var, scale=scale, bias=bias, module=self, axes=(reduction_axes, feature_axes)
        )

    def _update_running(self, mean: jax.Array, var: jax.Array) -> None:
        running_mean, running_var = self.mean.value, self.var.value
        new_mean = self.momentum * running_mean + (1 - self.momentum) * mean.reshape(-1)
        new_var = self.momentum * running_var + (1 - self.momentum) * var.reshape(-1)
        self.mean.value = new_mean.astype(running_mean.dtype)
        self.var.value = new_var.astype(running_var.dtype)

    def set_view(self, use_running_average: bool | None = None) -> None:
        """Set ``use_running_average`` (for ``nnx.view``; None leaves it).

        Example:
            >>> from nnx_core import Rngs
            >>> from nnx_layers import BatchNorm
            >>> bn = BatchNorm(3, rngs=Rngs(0))
            >>> bn.set_view(use_running_average=True)
            >>> bn.use_running_average
            True
        """
        if use_running_average is not None:
            self.use_running_average = use_running_average


class LayerNorm(Module):
    """Layer normalization: normalize each example over ``reduction_axes``.

    Args:
        num_features: number of features over ``feature_axes`` (the product of their sizes).
        epsilon: added to the variance before the square root.
        dtype: output dtype; ``None`` promotes the input and the parameters together.
        param_dtype: dtype of ``scale`` and ``bias``.
        use_bias: whether to add the learned ``bias``.
        use_scale: whether to multiply by the learned ``scale``.
        bias_init: initializer of ``bias``.
        scale_init: initializer of ``scale``.
        reduction_axes: axes the mean and variance are computed over.
        feature_axes: axes ``scale``/``bias`` vary over.
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
        ValueError: for an input whose feature axes do not hold ``num_features`` features.
        TypeError: for a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import LayerNorm
        >>> ln = LayerNorm(4, rngs=Rngs(0))
        >>> ln(jnp.array([[1.0, 1.0, 3.0, 3.0]])).round(3)
        Array([[-1., -1.,  1.,  1.]], dtype=float32)
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
        reduction_axes: int | Sequence[int] = -1,
        feature_axes: int | Sequence[int] = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        bias_metadata: Mapping[str, Any] = _EMPTY,
        scale_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.num_features = check_positive_int("LayerNorm", "num_features", num_features)
        self.epsilon = check_epsilon("LayerNorm", epsilon)
        self.dtype = dtype
        self.param_dtype = check_param_dtype("LayerNorm", "param_dtype", param_dtype)
        self.use_bias = use_bias
        self.use_scale = use_scale
        self.bias_init = bias_init
        self.scale_init = scale_init
        self.reduction_axes = frozen(reduction_axes)
        self.feature_axes = frozen(feature_axes)
        self.axis_name = axis_name
        self.axis_index_groups = frozen(axis_index_groups)
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype
        self.bias_metadata = metadata(bias_metadata)
        self.scale_metadata = metadata(scale_metadata)
        shape = (num_features,)
        self.scale, self.bias = affine_params(
            self, rngs, shape, use_bias=use_bias, use_scale=use_scale
        )

    def __call__(self, x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
        """Normalize ``x``; ``mask`` excludes entries from the statistics."""
        x = as_input("LayerNorm", x)
        reduction_axes = canonical_axes("LayerNorm", self.reduction_axes, x.ndim)
        feature_axes = canonical_axes("LayerNorm", self.feature_axes, x.ndim)
        check_feature_size("LayerNorm", x, feature_axes, self.num_features)
        x, scale, bias = self.promote_dtype(
            (x, param_value(self.scale), param_value(self.bias)), dtype=self.dtype
        )
        mean, var = moments(x, reduction_axes, module=self, mask=mask)
        return normalize(
            x, mean, var, scale=scale, bias=bias, module=self, axes=(reduction_axes, feature_axes)
        )


class RMSNorm(Module):
    """Root-mean-square normalization: ``x * rsqrt(mean(x**2) + epsilon) * scale``.

    Args:
        num_features: number of features over ``feature_axes``.
        epsilon: added to the mean square before the square root.
        dtype: output dtype; ``None`` promotes the input and ``scale`` together.
        param_dtype: dtype of ``scale``.
        use_scale: whether to multiply by the learned ``scale``.
        scale_init: initializer of ``scale``.
        reduction_axes: axes the mean square is computed over.
        feature_axes: axes ``scale`` varies over.
        axis_name: a named axis to average statistics over.
        axis_index_groups: device groups for ``axis_name``.
        use_fast_variance: accepted for signature compatibility (RMSNorm has one formula).
        promote_dtype: brings ``(x, scale)`` to one dtype before normalizing,
            called with ``dtype=dtype`` (see `promote_dtype`; integer inputs become
            float32). The statistics are computed in at least float32 either way.
        rngs: random streams; ``rngs.params()`` initializes ``scale``.
        scale_metadata: metadata for the ``scale`` Param.

    Raises:
        ValueError: for an input whose feature axes do not hold ``num_features`` features.
        TypeError: for a non-numeric input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import RMSNorm
        >>> y = RMSNorm(2, epsilon=0.0, rngs=Rngs(0))(jnp.array([[3.0, 4.0]]))
        >>> [round(v, 4) for v in y[0].tolist()]
        [0.8485, 1.1314]
    """

    def __init__(
        self,
        num_features: Size,
        *,
        epsilon: NonNegative = 1e-6,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        use_scale: bool = True,
        scale_init: Initializer = initializers.ones,
        reduction_axes: int | Sequence[int] = -1,
        feature_axes: int | Sequence[int] = -1,
        axis_name: str | None = None,
        axis_index_groups: Any = None,
        use_fast_variance: bool = True,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        rngs: Rngs,
        scale_metadata: Mapping[str, Any] = _EMPTY,
    ):
        self.num_features = check_positive_int("RMSNorm", "num_features", num_features)
        self.epsilon = check_epsilon("RMSNorm", epsilon)
        self.dtype = dtype
        self.param_dtype = check_param_dtype("RMSNorm", "param_dtype", param_dtype)
        self.use_scale = use_scale
        self.scale_init = scale_init
        self.reduction_axes = frozen(reduction_axes)
        self.feature_axes = frozen(feature_axes)
        self.axis_name = axis_name
        self.axis_index_groups = frozen(axis_index_groups)
        self.use_fast_variance = use_fast_variance
        self.promote_dtype = promote_dtype
        self.scale_metadata = metadata(scale_metadata)
        self.scale: Param | None = None
        if use_scale:
            value = scale_init(rngs.params(), (num_features,), param_dtype)
            self.scale = named_param(value, self.scale_metadata, (EMBED,))

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Normalize ``x``; ``mask`` excludes entries from the mean square."""
        x = as_input("RMSNorm", x)
        reduction_axes = canonical_axes("RMSNorm", self.reduction_axes, x.ndim)
        feature_axes = canonical_axes("RMSNorm", self.feature_axes, x.ndim)
        check_feature_size("RMSNorm", x, feature_axes, self.num_features)
        x, scale = self.promote_dtype((x, param_value(self.scale)), dtype=self.dtype)
        mean_sq = mean_square(x, reduction_axes, module=self, mask=mask)
        return normalize(
            x,
            None,
            mean_sq,
            scale=scale,
            bias=None,
            module=self,
            axes=(reduction_axes, feature_axes),
        )
