"""`PReLU`: a leaky ReLU whose negative slope is a learned parameter."""

from collections.abc import Mapping
from numbers import Real
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, Param

from ._checks import Dtype, as_input, metadata, promote_dtype

__all__ = ["PReLU"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class PReLU(Module):
    """Parametric ReLU: ``x`` where ``x >= 0``, else ``negative_slope * x``.

    ``negative_slope`` is a scalar `Param` (trained like any weight), started at
    ``negative_slope_init``. It draws no random keys, so it takes no ``rngs``.

    Args:
        negative_slope_init: the starting slope for negative inputs.
        dtype: computation dtype; ``None`` computes in the input's dtype.
        param_dtype: dtype of ``negative_slope``.
        negative_slope_metadata: metadata for the ``negative_slope`` Param.

    Raises:
        TypeError: ``negative_slope_init`` is not a real number; at call time, a non-floating
            input.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import PReLU
        >>> act = PReLU(0.25)
        >>> act.negative_slope.value
        Array(0.25, dtype=float32)
        >>> act(jnp.array([-4.0, 2.0]))
        Array([-1.,  2.], dtype=float32)
    """

    def __init__(
        self,
        negative_slope_init: float = 0.01,
        *,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        negative_slope_metadata: Mapping[str, Any] = _EMPTY,
    ):
        if isinstance(negative_slope_init, bool) or not isinstance(negative_slope_init, Real):
            raise TypeError(
                f"PReLU negative_slope_init must be a real number, got "
                f"{negative_slope_init!r}. Pass e.g. PReLU(0.01)."
            )
        self.negative_slope_init = float(negative_slope_init)
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.negative_slope_metadata = metadata(negative_slope_metadata)
        value = jnp.asarray(self.negative_slope_init, dtype=param_dtype)
        self.negative_slope = Param(value, **self.negative_slope_metadata)

    def __call__(self, inputs: jax.Array) -> jax.Array:
        """Apply the activation elementwise to a floating-point ``inputs``."""
        inputs = as_input("PReLU", inputs)
        slope = self.negative_slope.value
        if self.dtype is None:
            slope = jnp.asarray(slope, inputs.dtype)
        else:
            inputs, slope = promote_dtype((inputs, slope), dtype=self.dtype)
        return jnp.where(inputs >= 0, inputs, slope * inputs)
