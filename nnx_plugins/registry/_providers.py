"""What the registry holds per name: a `Provider` (one distribution's offer of one name).

Example:
    >>> from nnx_plugins import PluginInfo, Provider
    >>> offer = Provider("layer", "acme.GatedDense", PluginInfo("acme-layers", "0.1.0"),
    ...                  "acme_layers.dense:GatedDense")
    >>> offer.status
    'not loaded'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._discovery import EntryRecord
from ._errors import PluginError, PluginInfo

__all__ = ["NOUN", "Provider", "HookPlugin", "target_of", "top_package", "same_package"]

#: how messages call each kind of name
NOUN = {
    "layer": "layer",
    "variable": "Variable kind",
    "section": "config section",
    "task": "task",
    "dataset": "dataset",
    "metric": "metric",
    "logger": "logger",
    "callback": "callback",
    "tokenizer": "tokenizer",
    "converter": "converter",
}


@dataclasses.dataclass
class Provider:
    """One distribution's offer of one name; ``obj`` is set once loaded, ``error`` if that failed."""

    kind: str
    name: str
    plugin: PluginInfo
    target: str
    entry_point: Any = None
    obj: Any = None
    loaded: bool = False
    error: PluginError | None = None

    @property
    def status(self) -> str:
        """``"loaded"``, ``"not loaded"`` or ``"failed: <cause>"``."""
        if self.error is not None:
            return f"failed: {self.error}"
        return "loaded" if self.loaded else "not loaded"


@dataclasses.dataclass
class HookPlugin:
    """A module of the ``nnx.plugins`` group: imported and run once, on demand."""

    record: EntryRecord
    loaded: bool = False
    error: PluginError | None = None
    names: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def target_of(obj: Any, name: str) -> str:
    """``module:Qualname`` of an object registered by a hook or in-process."""
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', name)}"


def top_package(target: str) -> str:
    """The top-level package of ``module:attr`` (``acme_layers`` of ``acme_layers.dense:X``)."""
    return target.partition(":")[0].partition(".")[0]


def same_package(provider: Provider, obj: Any) -> bool:
    """Whether ``provider``'s target lives in the top-level package that defines ``obj``."""
    top = str(getattr(obj, "__module__", "") or "").partition(".")[0]
    return bool(top) and top_package(provider.target) == top
