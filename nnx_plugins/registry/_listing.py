"""What ``nnx layers list`` and ``nnx variables list`` show: every offer of a name, and its status.

Reads metadata and the registry's state only (nothing is imported), so in a fresh process the
status says what the metadata and the ``NNX_*`` switches decide; in a process that already
looked names up, it also says which loaded and which failed.

Example:
    >>> from nnx_plugins import Registry, Settings
    >>> from nnx_plugins.registry._listing import offers
    >>> rows = offers(Registry(settings=Settings(autoload=False)), "layer")
    >>> [(r.name, r.status) for r in rows if r.name in ("Linear", "acme.GatedDense")]
    [('Linear', 'available'), ('acme.GatedDense', 'disabled by NNX_DISABLE_PLUGIN_AUTOLOAD')]
"""

from __future__ import annotations

import dataclasses

from ._discovery import canonical_distribution, check_name
from ._errors import PluginInfo
from ._providers import Provider
from ._registry import Registry

__all__ = ["Offer", "offers"]


@dataclasses.dataclass(frozen=True)
class Offer:
    """One distribution's offer of one name, as listed.

    ``status`` is one of ``available`` (enabled, not imported yet), ``loaded``,
    ``failed: <why>``, ``collision: ...`` (several distributions offer the name),
    ``preferred by NNX_PREFER`` / ``not preferred (NNX_PREFER)``, ``disabled ...`` (switched
    off by ``NNX_PLUGINS`` or ``NNX_DISABLE_PLUGIN_AUTOLOAD``) or ``rejected: <why>`` (the
    name breaks the naming rules and is ignored).
    """

    name: str
    plugin: PluginInfo
    target: str
    status: str


def _status(registry: Registry, provider: Provider, rivals: int) -> str:
    if provider.error is not None:
        return f"failed: {provider.error.message}"
    if rivals > 1:
        wanted = registry.settings.prefer.get(provider.name)
        if wanted is None:
            return "collision: choose one with NNX_PREFER"
        mine = canonical_distribution(provider.plugin.distribution) == wanted
        return "preferred by NNX_PREFER" if mine else "not preferred (NNX_PREFER)"
    return "loaded" if provider.loaded else "available"


def _rejected(problem: str) -> str:
    return "rejected: " + ("no namespace" if "without a namespace" in problem else "invalid name")


def offers(registry: Registry, kind: str) -> list[Offer]:
    """Every offer of a ``kind`` name (``layer``, ``variable``, ``section``), sorted by name.

    Includes the names of disabled distributions and the names the naming rules reject, so a
    listing says why a name is not usable; names that hook plugins add appear once loaded.
    """
    rows = []
    for name in registry.names(kind):
        found = registry.providers(kind, name)
        rows += [Offer(name, p.plugin, p.target, _status(registry, p, len(found))) for p in found]
    for record in registry.distributions():
        for entry in record.entries:
            if entry.kind != kind:
                continue
            problem = check_name(kind, entry.name, entry.plugin)
            if record.disabled:
                why = record.disabled
                status = why if why.startswith("disabled") else f"disabled: {why}"
                rows.append(Offer(entry.name, entry.plugin, entry.target, status))
            elif problem:
                rows.append(Offer(entry.name, entry.plugin, entry.target, _rejected(problem)))
    return sorted(rows, key=lambda row: (row.name, canonical_distribution(row.plugin.distribution)))
