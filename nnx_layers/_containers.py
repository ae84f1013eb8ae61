"""Composition: `Sequential`, `Residual`, `Parallel` (and `Flatten`).

Any Module whose ``__init__`` takes Modules (annotated as ``Module``, ``list[Module]`` or
``dict[str, Module]``) can be described in a config the same way as these.
"""

import inspect
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp

from nnx_core import Module

__all__ = ["Sequential", "Residual", "Parallel", "Flatten"]


class Sequential(Module):
    """Apply ``layers`` one after another, each to the previous one's output.

    Layers may be Modules or plain callables such as activations. A layer that returns a
    tuple passes its items as positional arguments to the next one (a dict: keyword
    arguments). The first layer receives every argument of the call, and ``rngs=`` reaches
    every layer whose call takes ``rngs``.

    Args:
        *layers: the callables to chain, kept in ``self.layers`` (a plain list).

    Raises:
        TypeError: if a layer is not callable.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear, Sequential, relu
        >>> model = Sequential(Linear(3, 8, rngs=Rngs(0)), relu, Linear(8, 2, rngs=Rngs(1)))
        >>> len(model.layers)
        3
        >>> model(jnp.ones((5, 3))).shape
        (5, 2)
    """

    def __init__(self, *layers: Callable[..., Any]):
        for index, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(
                    f"Sequential layers must be callable (Modules or functions), got "
                    f"{type(layer).__name__} {layer!r} at position {index}. Pass the layer "
                    f"itself, e.g. Sequential(Linear(...), relu)."
                )
        self.layers = list(layers)

    def __call__(self, *args: Any, rngs: Any = None, **kwargs: Any) -> Any:
        """Run the chain; ``args``/``kwargs`` go to the first layer.

        A tuple output becomes the next layer's positional arguments, a dict output its
        keyword arguments. ``rngs``, if given, is passed to every layer whose call accepts an
        ``rngs`` keyword (e.g. `Dropout`). With no layers, the call returns its single
        argument (or the tuple of them, or the keyword dict).
        """
        if not self.layers:
            if args:
                return args[0] if len(args) == 1 else args
            return kwargs or None
        output: Any = None
        for index, layer in enumerate(self.layers):
            if index > 0:
                args, kwargs = _as_arguments(output)
            if rngs is not None and _accepts_rngs(layer):
                kwargs = {**kwargs, "rngs": rngs}
            output = layer(*args, **kwargs)
        return output


def _as_arguments(output: Any) -> tuple[tuple, dict]:
    if isinstance(output, tuple):
        return output, {}
    if isinstance(output, dict):
        return (), output
    return (output,), {}


def _accepts_rngs(layer: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(layer).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False
    return "rngs" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


class Flatten(Module):
    """Reshape ``(batch, ...)`` to ``(batch, -1)``, keeping the leading axis.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_layers import Flatten
        >>> Flatten()(jnp.ones((2, 3, 4, 5))).shape
        (2, 60)

    Raises:
        ValueError: for a scalar input (there is no batch axis to keep).
    """

    def __init__(self) -> None:
        pass

    def __call__(self, x: jax.Array) -> jax.Array:
        """Flatten every axis but the first."""
        x = jnp.asarray(x)
        if x.ndim == 0:
            raise ValueError(
                "Flatten expects an input with a leading batch axis, got a scalar. "
                "Reshape it first, e.g. x.reshape(1, -1)."
            )
        return x.reshape(x.shape[0], -1)


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
        >>> from nnx_layers import Residual
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
        >>> from nnx_layers import Parallel
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
