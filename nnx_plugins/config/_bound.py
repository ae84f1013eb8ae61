"""`BoundFunction`: a function layer with keyword arguments from a config.

``{type: leaky_relu, negative_slope: 0.2}`` builds ``BoundFunction(leaky_relu, negative_slope=0.2)``.
Unlike ``functools.partial`` it is equal to (and hashes like) any other binding of the same
function to the same arguments, so two builds of one config give equal GraphDefs and a jitted
function does not retrace; `to_config` reads ``function`` and ``arguments`` back.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_layers import leaky_relu
    >>> from nnx_plugins.config._bound import BoundFunction
    >>> f = BoundFunction(leaky_relu, {"negative_slope": 0.5})
    >>> f(jnp.array([-2.0, 2.0]))
    Array([-1.,  2.], dtype=float32)
    >>> f == BoundFunction(leaky_relu, {"negative_slope": 0.5}), f
    (True, leaky_relu(negative_slope=0.5))
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ._types import tuplify

__all__ = ["BoundFunction"]


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return tuplify(value)


class BoundFunction:
    """``function(x, *args, **arguments, **kwargs)``: equal and hashable by value.

    Attributes:
        function: the registered function.
        arguments: its keyword arguments (lists stored as tuples).
    """

    __slots__ = ("function", "arguments", "_key", "__weakref__")  # (jax caches by weakref)

    def __init__(self, function: Callable[..., Any], arguments: Mapping[str, Any]):
        self.function = function
        self.arguments = {name: tuplify(value) for name, value in arguments.items()}
        self._key = (function, _hashable(self.arguments))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **{**self.arguments, **kwargs})

    @property
    def __signature__(self) -> inspect.Signature:
        """The function's signature without the bound parameters (e.g. for ``rngs`` checks)."""
        signature = inspect.signature(self.function)
        kept = [p for n, p in signature.parameters.items() if n not in self.arguments]
        return signature.replace(parameters=kept)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoundFunction) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        name = getattr(self.function, "__name__", repr(self.function))
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"{name}({arguments})"

    def __reduce__(self) -> tuple[Any, ...]:
        return BoundFunction, (self.function, self.arguments)
