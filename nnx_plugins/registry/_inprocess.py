"""Registering layers and Variable kinds from Python, for notebooks and scripts.

The names follow the rules of entry points (namespaced, checked objects, no silent collisions,
config models derived from ``__init__``), but a mistake raises at once instead of warning.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins import build, register_layer
    >>> @register_layer("docs.double")
    ... def double(x):
    ...     return 2 * x
    >>> build({"type": "docs.double"})(jnp.ones(2))
    Array([2., 2.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ._registry import Registry, default_registry

__all__ = ["register_layer", "register_variable_kind"]

T = TypeVar("T")


def register_layer(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a `nnx_core.Module` subclass or an activation function as ``name``.

    The layer is then usable by name like one a pack publishes: `get_layer`, config files,
    `to_config`, ``nnx_plugins.config_schema()``. Its config model is derived from its
    ``__init__`` signature (minus ``rngs``) unless it has a pydantic ``config_model``.
    Defining the same ``module:Qualname`` again (a re-run notebook cell) replaces it.

    Args:
        name: a namespaced name, ``'my.Block'``: unqualified names belong to the built-ins.
        registry: where to register; the default registry when omitted.

    Returns:
        A decorator that registers its argument and returns it unchanged.

    Raises:
        PluginNameError: ``name`` is not namespaced.
        NameCollisionError: an installed distribution (or an earlier registration of another
            object) already provides ``name``.
        PluginLoadError: the object is neither a Module subclass nor a callable, or its
            ``config_model`` is not a pydantic model.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Module, Param, Rngs
        >>> from nnx_plugins import build, register_layer, to_config
        >>> @register_layer("docs.Scale")
        ... class Scale(Module):
        ...     def __init__(self, features: int, *, value: float = 1.0, rngs: Rngs):
        ...         self.features, self.value = features, value
        ...         self.scale = Param(jnp.full((features,), value))
        ...     def __call__(self, x):
        ...         return x * self.scale
        >>> layer = build({"type": "docs.Scale", "features": 3, "value": 2.0})
        >>> layer(jnp.ones((1, 3))).tolist(), to_config(layer)
        ([[2.0, 2.0, 2.0]], {'type': 'docs.Scale', 'features': 3, 'value': 2.0})
    """

    return _registering("layer", name, registry)


def register_variable_kind(name: str, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Decorator: register a `nnx_core.Variable` subclass as the kind ``name``.

    The kind enters the core's table at once, so string filters, summaries and checkpoints
    know it by ``name``; `get_variable_type` finds it too.

    Args:
        name: the kind's namespaced name, ``'my.Kind'``.
        registry: the registry to add it to (by default, the process-wide one).

    Returns:
        The decorator: it registers the class and gives it back.

    Raises:
        PluginNameError: ``name`` has no lowercase namespace.
        NameCollisionError: ``name`` is taken, by an installed distribution or by another
            class registered earlier.
        PluginLoadError: the object is not a Variable subclass, or the class already has
            another explicit name in the core's table.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core
        >>> from nnx_plugins import register_variable_kind
        >>> @register_variable_kind("docs.Ema")
        ... class Ema(nnx_core.Variable):
        ...     pass
        >>> class Model(nnx_core.Module):
        ...     def __init__(self):
        ...         self.w = nnx_core.Param(jnp.ones(2))
        ...         self.avg = Ema(jnp.zeros(2))
        >>> list(nnx_core.state(Model(), "docs.Ema").flat_state()[0][0])
        ['avg']
    """

    return _registering("variable", name, registry)


def _registering(kind: str, name: str, registry: Registry | None) -> Callable[[T], T]:
    def decorate(obj: T) -> T:
        result: T = (registry or default_registry()).add(kind, name, obj)
        return result

    return decorate
