"""Composition: `Sequential` and `Flatten`."""

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module

__all__ = ["Sequential", "Flatten"]


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
