"""Containers for non-sequential models, built from named sub-layer configs.

`Residual` adds a shortcut around a block; `Parallel` runs named branches on one input and
combines their outputs. Any Module whose ``__init__`` takes Modules (annotated as ``Module``,
``list[Module]`` or ``dict[str, Module]``) works the same way in a config; these two are the
built-in ones.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins import build
    >>> model = build({"type": "Parallel", "branches": {
    ...     "a": {"type": "Linear", "in_features": 3, "out_features": 2},
    ...     "b": {"type": "Linear", "in_features": 3, "out_features": 5}}})
    >>> model(jnp.ones((4, 3))).shape
    (4, 7)
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp

from nnx_core import Module

__all__ = ["Residual", "Parallel"]

_COMBINE = ("concat", "sum", "dict")


class Residual(Module):
    """``y = block(x) + shortcut(x)``, with the identity as the default shortcut.

    Args:
        block: the main path.
        shortcut: a projection for the skip path when shapes differ (``None``: identity).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear
        >>> from nnx_plugins import Residual
        >>> block = Residual(Linear(4, 4, rngs=Rngs(0)))
        >>> block(jnp.ones((2, 4))).shape
        (2, 4)
    """

    def __init__(self, block: Module, *, shortcut: Module | None = None):
        self.block = block
        self.shortcut = shortcut

    def __call__(self, x: jax.Array) -> jax.Array:
        skip = x if self.shortcut is None else self.shortcut(x)
        out = self.block(x)
        if jnp.shape(out) != jnp.shape(skip):
            raise ValueError(
                f"Residual: the block returns shape {jnp.shape(out)} but the shortcut gives "
                f"{jnp.shape(skip)}. Give a `shortcut` layer that maps the input to {jnp.shape(out)}."
            )
        return out + skip


class Parallel(Module):
    """Apply named ``branches`` to one input and combine the outputs.

    Args:
        branches: name -> layer; run in name order.
        combine: ``"concat"`` along ``axis``, ``"sum"``, or ``"dict"`` (return ``{name: output}``).
        axis: the concatenation axis.

    Raises:
        ValueError: ``combine`` is not one of the above, or ``branches`` is empty.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear
        >>> from nnx_plugins import Parallel
        >>> p = Parallel({"x": Linear(3, 2, rngs=Rngs(0))}, combine="dict")
        >>> {k: v.shape for k, v in p(jnp.ones((1, 3))).items()}
        {'x': (1, 2)}
    """

    def __init__(
        self,
        branches: dict[str, Module],
        *,
        combine: Literal["concat", "sum", "dict"] = "concat",
        axis: int = -1,
    ):
        if combine not in _COMBINE:
            raise ValueError(f"Parallel combine must be one of {_COMBINE}, got {combine!r}.")
        if not branches:
            raise ValueError("Parallel needs at least one branch, got an empty mapping.")
        self.branches = dict(branches)
        self.combine = combine
        self.axis = axis

    def __call__(self, x: jax.Array) -> Any:
        outputs = {name: self.branches[name](x) for name in sorted(self.branches)}
        if self.combine == "dict":
            return outputs
        if self.combine == "sum":
            return sum(outputs.values())
        return jnp.concatenate(list(outputs.values()), axis=self.axis)
