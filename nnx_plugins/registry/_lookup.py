"""Name lookups on the default registry, for users who never touch a `Registry` directly.

Example:
    >>> from nnx_plugins import get_layer, get_variable_type
    >>> get_layer("Linear").__name__, get_variable_type("Param").__name__
    ('Linear', 'Param')
"""

from __future__ import annotations

from typing import Any

from ._registry import default_registry

__all__ = ["get_layer", "get_variable_type", "load_variable_types"]


def get_layer(name: str) -> Any:
    """Return the layer class or activation function registered as ``name``.

    Raises:
        UnknownNameError: nothing provides ``name``.
        NameCollisionError: several distributions provide it (see ``NNX_PREFER``).
        PluginLoadError: its plugin failed to load.
    """
    return default_registry().get("layer", name)


def get_variable_type(name: str) -> type:
    """Return the Variable kind registered as ``name`` (and register it in the core's table).

    Raises:
        UnknownNameError: nothing provides ``name``.
        NameCollisionError: several distributions provide it (see ``NNX_PREFER``).
        PluginLoadError: its plugin failed to load.
    """
    return default_registry().get("variable", name)


def load_variable_types() -> dict[str, type]:
    """Load every Variable kind of the enabled plugins into the core's name table.

    Call it before string filters or checkpoints name plugin kinds. Failed plugins are warned
    about (or raised in strict mode) and skipped.

    Example:
        >>> from nnx_plugins import load_variable_types
        >>> load_variable_types()["Param"].__name__
        'Param'
    """
    return default_registry().load_kind("variable")
