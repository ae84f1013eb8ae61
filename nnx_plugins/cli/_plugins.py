"""``nnx plugins list`` (package metadata only) and ``nnx plugins check`` (imports every plugin).

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> build_parser().parse_args(["plugins", "check"]).action
    'check'
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from ..registry._discovery import RUN_PARTS
from ..registry._errors import PluginError
from ._output import add_command, console, fail, problem_text, registry, report, table

__all__ = ["add_commands"]


def _list(args: argparse.Namespace) -> int:
    rows = []
    for record in registry().distributions():
        count = {
            k: sum(e.kind == k for e in record.entries)
            for k in ("layer", "variable", "section", "plugin")
        }
        parts = sum(e.kind in RUN_PARTS for e in record.entries)
        hooks = ", ".join(e.name for e in record.entries if e.kind == "plugin") or "-"
        rows.append(
            (
                record.plugin.distribution,
                record.plugin.version,
                count["layer"],
                count["variable"],
                count["section"],
                parts,
                hooks,
                record.disabled or "enabled",
            )
        )
    columns = (
        "Distribution",
        "Version",
        "Layers",
        "Variable kinds",
        "Config sections",
        "Run parts",
        "Hook plugins",
        "Status",
    )
    console().print(table("nnx plugins", columns, rows))
    return 0


def _collisions(found: Any) -> list[PluginError]:
    collisions = []
    for kind in ("layer", "variable", "section"):
        for name in found.names(kind):
            if len(found.providers(kind, name)) > 1:
                try:
                    found.resolve(kind, name)
                except PluginError as error:
                    collisions.append(error)
    return collisions


def _check(args: argparse.Namespace) -> int:
    found = registry()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            failures = found.load_all()
        except PluginError as error:  # strict mode
            return fail(error)
    collisions = _collisions(found)
    rows = []
    for record in found.distributions():
        mine = [f for f in failures if f.plugin == record.plugin]
        status = record.disabled or ("FAILED" if mine else "ok")
        rows.append((record.plugin.distribution, record.plugin.version, status))
    console().print(table("nnx plugins check", ("Distribution", "Version", "Status"), rows))
    for problem in [*failures, *collisions]:
        report(problem_text("error", problem))
    return 1 if failures or collisions else 0


def add_commands(subparsers: Any) -> None:
    """Register ``plugins list`` and ``plugins check``."""
    plugins = subparsers.add_parser("plugins", help="installed layer packs").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    add_command(plugins, "list", _list, "list distributions with nnx entry points (metadata only)")
    add_command(plugins, "check", _check, "import every plugin; report failures and collisions")
