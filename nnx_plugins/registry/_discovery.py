"""Reading entry points from package metadata, without importing any plugin code.

The groups read: ``nnx.layers``, ``nnx.variables``, ``nnx.config_sections`` and the run parts
``nnx.tasks``, ``nnx.datasets``, ``nnx.metrics``, ``nnx.loggers``, ``nnx.callbacks``,
``nnx.tokenizers``, the checkpoint converters ``nnx.converters`` (``name = "module:attr"``), and ``nnx.plugins`` (pluggy plugin modules). The ``NNX_*`` environment switches decide which
distributions are enabled.

Example:
    >>> from nnx_plugins.registry._discovery import Settings
    >>> s = Settings.from_env({"NNX_PLUGINS": "acme-layers", "NNX_PREFER": "acme.X=acme_layers"})
    >>> sorted(s.allowlist), s.prefer
    (['acme-layers'], {'acme.X': 'acme-layers'})
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as metadata
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import PluginInfo, PluginSettingsError

__all__ = [
    "GROUPS",
    "RUN_PARTS",
    "BUILTIN_DISTRIBUTION",
    "Settings",
    "EntryRecord",
    "DistributionRecord",
    "canonical_distribution",
    "check_name",
    "discover",
]

#: entry-point group per kind of name
GROUPS = {
    "layer": "nnx.layers",
    "variable": "nnx.variables",
    "section": "nnx.config_sections",
    "task": "nnx.tasks",
    "dataset": "nnx.datasets",
    "metric": "nnx.metrics",
    "logger": "nnx.loggers",
    "callback": "nnx.callbacks",
    "tokenizer": "nnx.tokenizers",
    "converter": "nnx.converters",
    "plugin": "nnx.plugins",
}
#: the kinds of name a run is made of besides its model (docs/design/runs.md)
RUN_PARTS = ("task", "dataset", "metric", "logger", "callback", "tokenizer")
#: the distribution that owns unqualified names
BUILTIN_DISTRIBUTION = "nnx-jax"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
_UNQUALIFIED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_QUALIFIED = re.compile(r"[a-z][a-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")


def canonical_distribution(name: str) -> str:
    """Normalize a distribution name the way pip does (``Acme_Layers`` -> ``acme-layers``).

    Example:
        >>> from nnx_plugins.registry._discovery import canonical_distribution
        >>> canonical_distribution("Acme_Layers")
        'acme-layers'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def _flag(environ: Mapping[str, str], key: str) -> bool:
    raw = environ.get(key, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise PluginSettingsError(
        f"{key}={environ[key]!r} is not a boolean; set it to 1 or 0 (or unset it)."
    )


def parse_prefer(raw: str | Mapping[str, str], *, source: str = "NNX_PREFER") -> dict[str, str]:
    """Parse ``"acme.X=dist,acme.Y=other"`` (or a mapping) into ``{name: distribution}``.

    Example:
        >>> from nnx_plugins.registry._discovery import parse_prefer
        >>> parse_prefer("acme.X = acme_layers, b.Y=b")
        {'acme.X': 'acme-layers', 'b.Y': 'b'}

    Raises:
        PluginSettingsError: an item is not ``name=distribution``.
    """
    if isinstance(raw, Mapping):
        pairs = list(raw.items())
    else:
        pairs = []
        for item in filter(None, (part.strip() for part in raw.split(","))):
            name, sep, dist = item.partition("=")
            if not sep or not name.strip() or not dist.strip():
                raise PluginSettingsError(
                    f"{source}: {item!r} is not of the form name=distribution, "
                    "e.g. NNX_PREFER='acme.GatedDense=acme-layers'."
                )
            pairs.append((name, dist))
    return {str(n).strip(): canonical_distribution(str(d).strip()) for n, d in pairs}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The plugin switches, usually read from the environment by `Settings.from_env`.

    Attributes:
        autoload: load third-party distributions (``NNX_DISABLE_PLUGIN_AUTOLOAD=1`` turns it off).
        allowlist: if set, only these third-party distributions are enabled (``NNX_PLUGINS``).
        strict: failures raise instead of warning (``NNX_STRICT_PLUGINS=1``).
        prefer: which distribution provides a name several provide (``NNX_PREFER``).
    """

    autoload: bool = True
    allowlist: frozenset[str] | None = None
    strict: bool = False
    prefer: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``NNX_DISABLE_PLUGIN_AUTOLOAD``, ``NNX_PLUGINS``, ``NNX_STRICT_PLUGINS``, ``NNX_PREFER``.

        Raises:
            PluginSettingsError: a variable holds a malformed value.
        """
        env = os.environ if environ is None else environ
        raw_allow = env.get("NNX_PLUGINS")
        allow = None
        if raw_allow is not None:
            allow = frozenset(
                canonical_distribution(p.strip()) for p in raw_allow.split(",") if p.strip()
            )
        return cls(
            autoload=not _flag(env, "NNX_DISABLE_PLUGIN_AUTOLOAD"),
            allowlist=allow,
            strict=_flag(env, "NNX_STRICT_PLUGINS"),
            prefer=parse_prefer(env.get("NNX_PREFER", "")),
        )

    def disabled_reason(self, distribution: str) -> str:
        """Why ``distribution`` is disabled, or ``""`` if it is enabled (built-ins always are)."""
        if canonical_distribution(distribution) == BUILTIN_DISTRIBUTION:
            return ""
        if not self.autoload:
            return "disabled by NNX_DISABLE_PLUGIN_AUTOLOAD"
        if (
            self.allowlist is not None
            and canonical_distribution(distribution) not in self.allowlist
        ):
            return "not in NNX_PLUGINS"
        return ""


@dataclasses.dataclass(frozen=True)
class EntryRecord:
    """One name a distribution declares: ``kind`` is a key of `GROUPS` (``layer``, ``task``, ...)."""

    kind: str
    name: str
    target: str
    plugin: PluginInfo
    entry_point: Any = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class DistributionRecord:
    """A distribution with at least one ``nnx.*`` entry point, enabled or not."""

    plugin: PluginInfo
    entries: tuple[EntryRecord, ...]
    disabled: str = ""

    @property
    def canonical(self) -> str:
        return canonical_distribution(self.plugin.distribution)


def check_name(kind: str, name: str, plugin: PluginInfo) -> str:
    """Return why ``name`` breaks the naming rules for ``plugin`` (``""`` if it is fine).

    Unqualified names (``Linear``) belong to the built-in ``nnx`` distribution; every other
    distribution uses a lowercase namespace (``acme.GatedDense``).

    Example:
        >>> from nnx_plugins import PluginInfo
        >>> from nnx_plugins.registry._discovery import check_name
        >>> check_name("layer", "acme.GatedDense", PluginInfo("acme-layers", "0.1.0"))
        ''
        >>> check_name("layer", "Dense", PluginInfo("acme-layers", "0.1.0"))[:40]
        "acme-layers 0.1.0 provides layer 'Dense'"
    """
    if kind == "plugin":
        return ""
    builtin = canonical_distribution(plugin.distribution) == BUILTIN_DISTRIBUTION
    if _QUALIFIED.match(name) or (builtin and _UNQUALIFIED.match(name)):
        return ""
    if _UNQUALIFIED.match(name):
        return (
            f"{plugin} provides {kind} {name!r} without a namespace; unqualified names belong "
            f"to the built-ins. Rename it to e.g. 'mypack.{name}'."
        )
    return (
        f"{plugin} provides {kind} {name!r}, which is not a valid name; use "
        "'namespace.Name' with a lowercase namespace, e.g. 'acme.GatedDense'."
    )


def _records_of(dist: Any) -> tuple[EntryRecord, ...]:
    kinds = {group: kind for kind, group in GROUPS.items()}
    found = [ep for ep in dist.entry_points if ep.group in kinds]
    if not found:  # (most distributions: their METADATA is not parsed, 2-3 ms each)
        return ()
    name = dist.metadata["Name"] or "?"
    plugin = PluginInfo(name, dist.version or "?")
    return tuple(EntryRecord(kinds[ep.group], ep.name, ep.value, plugin, ep) for ep in found)


def discover(
    settings: Settings, distributions: Iterable[Any] | None = None
) -> list[DistributionRecord]:
    """Return every distribution declaring ``nnx.*`` entry points, sorted by name.

    Reads metadata only. The first distribution of a given name on ``sys.path`` wins, as in
    `importlib.metadata.entry_points`.

    Example:
        >>> from nnx_plugins.registry._discovery import Settings, discover
        >>> any(r.plugin.distribution == "nnx-jax" for r in discover(Settings()))
        True
    """
    seen: dict[str, DistributionRecord] = {}
    for dist in metadata.distributions() if distributions is None else distributions:
        entries = _records_of(dist)
        if not entries:
            continue
        key = canonical_distribution(entries[0].plugin.distribution)
        if key not in seen:
            reason = settings.disabled_reason(key)
            seen[key] = DistributionRecord(entries[0].plugin, entries, reason)
    return sorted(seen.values(), key=lambda r: r.canonical)
