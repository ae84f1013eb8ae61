"""`PReLU`: a leaky ReLU whose negative slope is a learned parameter."""

from collections.abc import Mapping
from numbers import Real
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Param

from ._checks import Dtype, PromoteDtypeFn, as_input, metadata, promote_dtype
from .initializers import Constant, constant

__all__ = ["PReLU"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DEFAULT_SLOPE = constant(0.01)


class PReLU(Module):
    """Parametric ReLU: ``x`` where ``x >= 0``, else ``negative_slope * x``.

    ``negative_slope`` is a scalar `Param` (trained like any weight), started at
    ``negative_slope_init``. It draws no random keys, so it takes no ``rngs``.

    ``negative_slope_init`` is a number (as in flax.nnx) or the equivalent constant
    initializer; the layer stores it as ``initializers.constant(value)``, which is how a config
    spells it: ``{type: PReLU, negative_slope_init: {type: constant, value: 0.25}}`` (a
    ``*_init`` argument is an initializer in configs).

    Args:
        negative_slope_init: the starting slope for negative inputs: a number or an
            ``initializers.constant``.
        dtype: computation dtype; ``None`` computes in the input's dtype.
        param_dtype: dtype of ``negative_slope``.
        promote_dtype: brings ``(inputs, negative_slope)`` to ``dtype`` when it is set (see
            `promote_dtype`: an integer input then becomes float).
        negative_slope_metadata: metadata for the ``negative_slope`` Param.

    Raises:
        TypeError: ``negative_slope_init`` is neither a real number nor a constant
            initializer; at call time, a non-numeric input, or an integer input with
            ``dtype=None`` (flax.nnx would truncate the slope to an integer).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import PReLU
        >>> act = PReLU(0.25)
        >>> act.negative_slope.value, act.negative_slope_init
        (Array(0.25, dtype=float32), Constant(value=0.25))
        >>> act(jnp.array([-4.0, 2.0]))
        Array([-1.,  2.], dtype=float32)
    """

    def __init__(
        self,
        negative_slope_init: float | Constant = _DEFAULT_SLOPE,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        negative_slope_metadata: Mapping[str, Any] = _EMPTY,
    ):
        init = negative_slope_init
        if isinstance(init, Real) and not isinstance(init, bool):
            init = constant(float(init))
        if not isinstance(init, Constant):
            raise TypeError(
                f"PReLU negative_slope_init must be a number or initializers.constant(value), "
                f"got {negative_slope_init!r}. Pass e.g. PReLU(0.01)."
            )
        self.negative_slope_init = init
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.promote_dtype = promote_dtype
        self.negative_slope_metadata = metadata(negative_slope_metadata)
        value = jnp.asarray(init.value, dtype=param_dtype)
        self.negative_slope = Param(value, **self.negative_slope_metadata)

    def __call__(self, inputs: jax.Array) -> jax.Array:
        """Apply the activation elementwise to ``inputs``.

        With ``dtype=None`` the computation stays in the input's dtype, which must then be
        floating; with ``dtype`` set, the input and the slope are promoted to it.
        """
        inputs = as_input("PReLU", inputs)
        slope = self.negative_slope.value
        if self.dtype is not None:
            inputs, slope = self.promote_dtype((inputs, slope), dtype=self.dtype)
        elif jnp.issubdtype(inputs.dtype, jnp.inexact):
            slope = jnp.asarray(slope, inputs.dtype)
        else:
            raise TypeError(
                f"PReLU with dtype=None computes in the input's dtype, got dtype "
                f"{inputs.dtype} (shape {inputs.shape}), which would truncate the slope "
                f"{float(self.negative_slope_init.value)} to an integer. Build "
                f"PReLU(..., dtype=jnp.float32) or cast the input to a floating dtype."
            )
        return jnp.where(inputs >= 0, inputs, slope * inputs)
