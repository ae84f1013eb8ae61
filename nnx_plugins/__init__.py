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
    "build": "._config",
    "to_config": "._config",
    "register_section": "._config_sections",
    "config_schema": "._config_schema",
    "layer_spec": "._config_fields",
    "LayerSpec": "._config_fields",
    # containers
    "Residual": "._containers",
    "Parallel": "._containers",
    # training and checkpoints
    "save": "._checkpoint",
    "load": "._checkpoint_load",
    "read_manifest": "._checkpoint_manifest",
    "CheckpointError": "._checkpoint",
    "train": "._train",
    "evaluate": "._train",
    "TrainResult": "._train",
    "load_train_config": "._train_config",
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
    from ._checkpoint import CheckpointError as CheckpointError
    from ._checkpoint import save as save
    from ._checkpoint_load import load as load
    from ._checkpoint_manifest import read_manifest as read_manifest
    from ._config import Config as Config
    from ._config import build as build
    from ._config import load_config as load_config
    from ._config import to_config as to_config
    from ._config_errors import ConfigError as ConfigError
    from ._config_errors import Problem as Problem
    from ._config_fields import LayerSpec as LayerSpec
    from ._config_fields import layer_spec as layer_spec
    from ._config_schema import config_schema as config_schema
    from ._config_sections import register_section as register_section
    from ._containers import Parallel as Parallel
    from ._containers import Residual as Residual
    from ._discovery import Settings as Settings
    from ._errors import NameCollisionError as NameCollisionError
    from ._errors import PluginError as PluginError
    from ._errors import PluginInfo as PluginInfo
    from ._errors import PluginLoadError as PluginLoadError
    from ._errors import PluginNameError as PluginNameError
    from ._errors import PluginSettingsError as PluginSettingsError
    from ._errors import PluginWarning as PluginWarning
    from ._errors import UnknownNameError as UnknownNameError
    from ._hookspecs import hookimpl as hookimpl
    from ._hookspecs import hookspec as hookspec
    from ._lookup import get_layer as get_layer
    from ._lookup import get_variable_type as get_variable_type
    from ._lookup import load_variable_types as load_variable_types
    from ._registry import Provider as Provider
    from ._registry import Registry as Registry
    from ._registry import default_registry as default_registry
    from ._registry import set_default_registry as set_default_registry
    from ._train import TrainResult as TrainResult
    from ._train import evaluate as evaluate
    from ._train import train as train
    from ._train_config import load_train_config as load_train_config
