"""nnx_plugins: the plugin registry, validated model configs and the ``nnx`` command.

Names are resolved lazily (module ``__getattr__``), so ``import nnx_plugins`` imports neither
jax nor pydantic nor any plugin; the first use of a name imports what it needs.

Example:
    >>> import nnx_plugins
    >>> model = nnx_plugins.build({"type": "Linear", "in_features": 2, "out_features": 3})
    >>> type(model).__name__, nnx_plugins.to_config(model)["out_features"]
    ('Linear', 3)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    # errors
    "PluginInfo": "._errors",
    "PluginError": "._errors",
    "PluginLoadError": "._errors",
    "PluginNameError": "._errors",
    "NameCollisionError": "._errors",
    "UnknownNameError": "._errors",
    "PluginSettingsError": "._errors",
    "PluginWarning": "._errors",
    # hooks
    "hookimpl": "._hookspecs",
    "hookspec": "._hookspecs",
    # registry
    "Settings": "._discovery",
    "Registry": "._registry",
    "Provider": "._registry",
    "default_registry": "._registry",
    "set_default_registry": "._registry",
    "get_layer": "._lookup",
    "get_variable_type": "._lookup",
    "load_variable_types": "._lookup",
    # configs
    "ConfigError": "._config_errors",
    "Problem": "._config_errors",
    "Config": "._config",
    "load_config": "._config",
    "validate_config": "._config",
    "build": "._config",
    "to_config": "._config",
    "register_section": "._config_sections",
    "config_schema": "._config_schema",
    "layer_spec": "._config_fields",
    "LayerSpec": "._config_fields",
    # containers
    "Residual": "._containers",
    "Parallel": "._containers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'nnx_plugins' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from ._config import Config, build, load_config, to_config, validate_config
    from ._config_errors import ConfigError, Problem
    from ._config_fields import LayerSpec, layer_spec
    from ._config_schema import config_schema
    from ._config_sections import register_section
    from ._containers import Parallel, Residual
    from ._discovery import Settings
    from ._errors import (
        NameCollisionError,
        PluginError,
        PluginInfo,
        PluginLoadError,
        PluginNameError,
        PluginSettingsError,
        PluginWarning,
        UnknownNameError,
    )
    from ._hookspecs import hookimpl, hookspec
    from ._lookup import get_layer, get_variable_type, load_variable_types
    from ._registry import Provider, Registry, default_registry, set_default_registry
