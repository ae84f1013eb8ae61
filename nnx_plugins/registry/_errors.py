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
    "IN_PROCESS",
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
        return f"{self.distribution} {self.version}" if self.version else self.distribution


#: the provider of names registered from Python (`register_layer`, `register_variable_kind`)
IN_PROCESS = PluginInfo("in-process", "")


class PluginError(NnxError):
    """Base of every plugin error; ``.plugin`` is the distribution concerned (or ``None``).

    ``.message`` says what happened and ``.fix`` (possibly empty) how to get past it; the
    error's text is both.

    Example:
        >>> from nnx_plugins import PluginError, PluginInfo, PluginLoadError
        >>> issubclass(PluginLoadError, PluginError)
        True
        >>> error = PluginLoadError("a failed.", plugin=PluginInfo("a", "1"), fix="Reinstall a.")
        >>> str(error), error.message, error.fix
        ('a failed. Reinstall a.', 'a failed.', 'Reinstall a.')
    """

    def __init__(self, message: str, *, plugin: PluginInfo | None = None, fix: str = ""):
        super().__init__(f"{message} {fix}" if fix else message)
        self.plugin = plugin
        self.message = message
        self.fix = fix


class PluginLoadError(PluginError):
    """A plugin's module could not be imported, or its object or hooks were invalid."""


class PluginNameError(PluginError):
    """A distribution provides a name that breaks the naming rules (e.g. not namespaced)."""


class NameCollisionError(PluginError):
    """Two distributions provide the same name; ``.providers`` lists them all."""

    def __init__(self, message: str, *, providers: tuple[PluginInfo, ...], fix: str = ""):
        super().__init__(message, plugin=providers[0] if providers else None, fix=fix)
        self.providers = providers


class UnknownNameError(PluginError):
    """No installed distribution provides the name; ``.suggestions`` holds close matches."""

    def __init__(self, message: str, *, suggestions: tuple[str, ...] = ()):
        super().__init__(message, plugin=None)
        self.suggestions = suggestions


class PluginSettingsError(PluginError):
    """An ``NNX_*`` environment variable or a ``plugins:`` config section is malformed."""


class PluginWarning(UserWarning):
    """Emitted once per distribution whose plugin failed to load (outside strict mode).

    ``.error`` is the `PluginError` it reports (``None`` when made from a plain message).

    Example:
        >>> from nnx_plugins import PluginInfo, PluginLoadError, PluginWarning
        >>> warning = PluginWarning(PluginLoadError("a 1 failed.", plugin=PluginInfo("a", "1")))
        >>> str(warning), warning.error.plugin.distribution
        ('nnx plugin a 1 failed.', 'a')
    """

    def __init__(self, error: PluginError | str):
        self.error = error if isinstance(error, PluginError) else None
        super().__init__(f"nnx plugin {error}" if self.error is not None else error)
