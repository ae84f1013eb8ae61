"""The plugin exceptions and warning: every one carries the distribution it concerns.

Example:
    >>> from nnx_plugins import PluginError, PluginInfo
    >>> error = PluginError("broken", plugin=PluginInfo("acme-layers", "0.1.0"))
    >>> str(error.plugin)
    'acme-layers 0.1.0'
"""

from __future__ import annotations

import dataclasses

from .._errors import NnxError

__all__ = [
    "PluginInfo",
    "PluginError",
    "PluginLoadError",
    "PluginNameError",
    "NameCollisionError",
    "UnknownNameError",
    "PluginSettingsError",
    "PluginWarning",
]


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """A distribution (an installed package) that provides names.

    Example:
        >>> from nnx_plugins import PluginInfo
        >>> PluginInfo("acme-layers", "0.1.0")
        PluginInfo(distribution='acme-layers', version='0.1.0')
    """

    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}"


class PluginError(NnxError):
    """Base of every plugin error; ``.plugin`` is the distribution concerned (or ``None``).

    Example:
        >>> from nnx_plugins import PluginError, PluginLoadError
        >>> issubclass(PluginLoadError, PluginError)
        True
    """

    def __init__(self, message: str, *, plugin: PluginInfo | None = None):
        super().__init__(message)
        self.plugin = plugin


class PluginLoadError(PluginError):
    """A plugin's module could not be imported, or its object or hooks were invalid."""


class PluginNameError(PluginError):
    """A distribution provides a name that breaks the naming rules (e.g. not namespaced)."""


class NameCollisionError(PluginError):
    """Two distributions provide the same name; ``.providers`` lists them all."""

    def __init__(self, message: str, *, providers: tuple[PluginInfo, ...]):
        super().__init__(message, plugin=providers[0] if providers else None)
        self.providers = providers


class UnknownNameError(PluginError):
    """No installed distribution provides the name; ``.suggestions`` holds close matches."""

    def __init__(self, message: str, *, suggestions: tuple[str, ...] = ()):
        super().__init__(message, plugin=None)
        self.suggestions = suggestions


class PluginSettingsError(PluginError):
    """An ``NNX_*`` environment variable or a ``plugins:`` config section is malformed."""


class PluginWarning(UserWarning):
    """Emitted once per distribution whose plugin failed to load (outside strict mode)."""
