"""Initializer outputs that carry Variable metadata: ``VariableMetadata`` and ``with_metadata``.

An initializer wrapped by :func:`with_metadata` returns its array boxed with metadata; a
Variable built from the box unwraps it and takes the metadata, so a layer written as
``Param(kernel_init(key, shape, dtype))`` gains e.g. ``sharding_names`` without knowing it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class VariableMetadata(Generic[A]):
    """A value plus the metadata a Variable built from it should have.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> boxed = nnx.VariableMetadata(jnp.ones(2), {"sharding_names": ("embed",)})
        >>> p = nnx.Param(boxed)
        >>> p.shape, p.sharding_names
        ((2,), ('embed',))
    """

    raw_value: A
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def with_metadata(initializer: F, /, **metadata: Any) -> F:
    """Wrap ``initializer`` so that the Variables built from its outputs carry ``metadata``.

    Args:
        initializer: any function returning an array, e.g. ``nnx_layers.initializers.zeros``.
        **metadata: the metadata entries (``sharding_names=("in", "out")``, ...).

    Returns:
        A function with the same arguments returning a :class:`VariableMetadata`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> init = nnx.with_metadata(lambda key, shape, dtype: jnp.zeros(shape, dtype), note="x")
        >>> nnx.Param(init(jax.random.key(0), (2, 3), jnp.float32)).metadata
        {'note': 'x'}

    Raises:
        TypeError: ``initializer`` is not callable.
    """
    if not callable(initializer):
        raise TypeError(
            f"with_metadata expects an initializer function, got {initializer!r}. Pass the "
            "function itself, e.g. with_metadata(initializers.lecun_normal(), ...)."
        )

    @functools.wraps(initializer)
    def wrapper(*args: Any, **kwargs: Any) -> VariableMetadata[Any]:
        return VariableMetadata(initializer(*args, **kwargs), dict(metadata))

    return wrapper  # type: ignore[return-value]
