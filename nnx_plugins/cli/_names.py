"""``nnx layers list [PATTERN]`` and ``nnx variables list`` (metadata only), ``nnx layers show``.

A listing shows every offer of a name with a status that means something without importing
anything: ``available``, ``collision: ...``, ``disabled ...`` or ``rejected: ...`` (and
``loaded`` / ``failed: ...`` for what this process already looked up).

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> build_parser().parse_args(["layers", "list", "acme.*"]).pattern
    'acme.*'
"""

from __future__ import annotations

import argparse
import fnmatch
import json
from typing import Any

from ..registry._errors import PluginError
from ..registry._listing import offers
from ._output import add_command, console, fail, registry, table

__all__ = ["add_commands", "names_table"]


def _matches(name: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern.lower() in name.lower()


def names_table(kind: str, pattern: str | None, title: str) -> Any:
    rows = [
        (offer.name, offer.plugin, offer.target, offer.status)
        for offer in offers(registry(), kind)
        if _matches(offer.name, pattern)
    ]
    return rows, table(title, ("Name", "Provided by", "Target", "Status"), rows)


def _layers_list(args: argparse.Namespace) -> int:
    rows, listing = names_table("layer", args.pattern, "nnx layers (and activations)")
    screen = console()
    screen.print(listing)
    hooks = [
        f"{r.name} ({r.plugin})"
        for r, status in registry().hook_plugins()
        if status == "not loaded"
    ]
    if hooks:
        screen.print(
            f"Not loaded pluggy plugins may add more names: {', '.join(hooks)}. "
            "Run `nnx plugins check` to load them."
        )
    if args.pattern and not rows:
        return fail(f"no layer name matches {args.pattern!r}.")
    return 0


def _layers_show(args: argparse.Namespace) -> int:
    # (imported here: pydantic must not load for the listing commands of this module)
    from ..config._fields import layer_spec  # (here: listing must not import pydantic)
    from ..config._types import to_json  # (here: listing must not import pydantic)

    found = registry()
    try:
        provider = found.resolve("layer", args.name)
        obj = found.get("layer", args.name)
        spec = layer_spec(args.name, obj, registry=found)
    except PluginError as error:
        return fail(error)
    except TypeError as error:  # a custom config_model that is not a pydantic model
        return fail(str(error))
    screen = console()
    what = "activation function" if spec.is_activation else "layer"
    doc = (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
    screen.print(f"{args.name}: {what} {provider.target} from {provider.plugin}")
    if doc:
        screen.print(doc)
    rows = []
    for name, field in spec.model.model_fields.items():
        if name == "type_":
            continue
        default = "(required)" if field.is_required() else json.dumps(to_json(field.default))
        described = spec.field(field.alias or name)
        kind = described.kind if described is not None else "custom"
        rows.append((field.alias or name, kind, default))
    screen.print(table("config fields", ("Field", "Kind", "Default"), rows))
    return 0


def _variables_list(args: argparse.Namespace) -> int:
    _, listing = names_table("variable", None, "nnx Variable kinds")
    console().print(listing)
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``layers list``, ``layers show`` and ``variables list``."""
    layers = subparsers.add_parser("layers", help="layer and activation names").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    listing = add_command(layers, "list", _layers_list, "list layer names (metadata only)")
    listing.add_argument("pattern", nargs="?", help="substring or glob, e.g. 'acme.*'")
    show = add_command(layers, "show", _layers_show, "show a layer's provider and config fields")
    show.add_argument("name")
    variables = subparsers.add_parser("variables", help="Variable kind names").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    add_command(variables, "list", _variables_list, "list Variable kind names (metadata only)")
