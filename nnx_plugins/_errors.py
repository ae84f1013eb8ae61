"""`NnxError`: the one root of nnx_plugins' errors (plugins, configs, checkpoints, data).

Catch it to handle anything the registry, a config, a checkpoint or a dataset can refuse:

Example:
    >>> import nnx_plugins
    >>> from nnx_plugins import NnxError
    >>> try:
    ...     nnx_plugins.load_config({"model": {"type": "Linaer"}})
    ... except NnxError as error:
    ...     print(type(error).__name__)
    ConfigError
    >>> [issubclass(nnx_plugins.__getattr__(name), NnxError)
    ...  for name in ("PluginError", "ConfigError", "CheckpointError", "DataError")]
    [True, True, True, True]
"""

from __future__ import annotations

__all__ = ["NnxError", "NnxWarning"]


class NnxError(Exception):
    """Base class of every error nnx_plugins raises on purpose: a bad plugin, config,
    checkpoint or dataset. Its message says what, where, what was received and how to fix it."""


class NnxWarning(UserWarning):
    """Base class of nnx_plugins' own warnings (e.g. a sharding rule that names nothing); the
    ``nnx`` command prints them as ``nnx: warning: ...`` lines."""
