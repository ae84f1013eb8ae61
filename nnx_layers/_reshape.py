"""`Reshape`: reshape every axis but the leading batch axis."""

import math
from collections.abc import Sequence
from numbers import Integral

import jax
import jax.numpy as jnp

from nnx_core import Module

__all__ = ["Reshape"]


def _target_shape(shape: object) -> tuple[int, ...]:
    """Check ``shape`` (positive ints and at most one -1) and return it as a tuple."""
    if (
        not isinstance(shape, (tuple, list))
        or any(isinstance(d, bool) or not isinstance(d, Integral) for d in shape)
        or any(d < 1 and d != -1 for d in shape)
    ):
        raise ValueError(
            f"Reshape shape must be a sequence of positive ints (one may be -1), got "
            f"{shape!r}. Pass the shape of one example without the batch axis, e.g. "
            f"Reshape((8, 8))."
        )
    if list(shape).count(-1) > 1:
        raise ValueError(
            f"Reshape shape may contain -1 at most once, got {tuple(shape)}. Give every size "
            f"but one, e.g. Reshape((-1, 8))."
        )
    return tuple(int(d) for d in shape)


class Reshape(Module):
    """Reshape ``(batch, ...)`` to ``(batch, *shape)``, keeping the leading axis.

    ``shape`` describes one example; one entry may be ``-1``, inferred from the example's size.
    `Flatten` is ``Reshape((-1,))``.

    Args:
        shape: the shape of each example, e.g. ``(8, 8)`` or ``(-1, 64)``.

    Raises:
        ValueError: at construction, for a shape that is not positive ints with at most one
            ``-1``; at call time, for a scalar input or an example whose size does not fit.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import Reshape
        >>> Reshape((8, 8))(jnp.ones((2, 64))).shape
        (2, 8, 8)
        >>> Reshape((4, -1))(jnp.ones((3, 2, 8, 2))).shape
        (3, 4, 8)
    """

    def __init__(self, shape: Sequence[int]):
        self.shape = _target_shape(shape)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Reshape every axis of ``x`` but the first to ``self.shape``."""
        x = jnp.asarray(x)
        if x.ndim == 0:
            raise ValueError(
                f"Reshape{self.shape} expects an input with a leading batch axis, got a scalar. "
                f"Reshape it first, e.g. x.reshape(1, -1)."
            )
        size = math.prod(x.shape[1:])
        known = math.prod(d for d in self.shape if d != -1)
        fits = size % known == 0 if -1 in self.shape else size == known
        if not fits:
            need = f"a multiple of {known}" if -1 in self.shape else f"{known}"
            raise ValueError(
                f"Reshape{self.shape} cannot reshape an input of shape {x.shape}: each example "
                f"has {size} entries, the target needs {need}. Pass a shape whose sizes "
                f"multiply to {size} (e.g. Reshape(({size},))), or check the input."
            )
        return x.reshape(x.shape[:1] + self.shape)
