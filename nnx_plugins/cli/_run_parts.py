"""``nnx tasks|datasets|metrics|loggers|callbacks list [PATTERN]`` (metadata only) and ``show NAME``.

The run parts are listed exactly as layers are (`_names`): every offer of a name with a status
that means something without importing anything; ``show`` loads the part and prints its config
fields (its ``__init__`` arguments) with their kinds and defaults.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> args = build_parser().parse_args(["tasks", "show", "regression"])
    >>> args.kind, args.name
    ('task', 'regression')
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..registry._discovery import GROUPS, RUN_PARTS
from ..registry._errors import PluginError
from ._names import names_table
from ._output import add_command, console, fail, registry, table

__all__ = ["add_commands"]


def _list(args: argparse.Namespace) -> int:
    rows, listing = names_table(args.kind, args.pattern, f"nnx {args.kind}s ({GROUPS[args.kind]})")
    console().print(listing)
    if args.pattern and not rows:
        return fail(f"no {args.kind} name matches {args.pattern!r}.")
    return 0


def _show(args: argparse.Namespace) -> int:
    from ..config._fields import layer_spec  # (here: listing must not import pydantic)
    from ..config._types import to_json  # (here: listing must not import pydantic)

    found = registry()
    try:
        provider = found.resolve(args.kind, args.name)
        obj = found.get(args.kind, args.name)
        spec = layer_spec(args.name, obj, registry=found)
    except PluginError as error:
        return fail(error)
    screen = console()
    doc = (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
    screen.print(f"{args.name}: {args.kind} {provider.target} from {provider.plugin}")
    if doc:
        screen.print(doc)
    rows = []
    for field in spec.fields:
        if field.kind == "opaque":
            continue
        model_field = spec.model.model_fields[f"f_{field.name}"]
        default = (
            "(required)" if model_field.is_required() else json.dumps(to_json(model_field.default))
        )
        rows.append((field.name, field.kind, default))
    screen.print(table("config fields", ("Field", "Kind", "Default"), rows))
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``list`` and ``show`` for every kind of run part."""
    for kind in RUN_PARTS:
        group = subparsers.add_parser(f"{kind}s", help=f"{kind} names ({GROUPS[kind]})")
        actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
        listing = add_command(actions, "list", _list, f"list {kind} names (metadata only)")
        listing.add_argument("pattern", nargs="?", help="substring or glob, e.g. 'acme.*'")
        listing.set_defaults(kind=kind)
        show = add_command(actions, "show", _show, f"show a {kind}'s provider and config fields")
        show.add_argument("name")
        show.set_defaults(kind=kind)
