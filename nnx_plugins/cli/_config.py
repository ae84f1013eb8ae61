"""``nnx config validate FILE...``, ``nnx config schema`` and ``nnx build FILE [--summary]``.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> build_parser().parse_args(["build", "m.yaml", "--summary"]).summary
    True
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..config._errors import ConfigError
from ._output import add_command, console, fail, table

__all__ = ["add_commands"]


def _config_validate(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: the listing commands stay light)

    status = 0
    screen = console()
    for path in args.files:
        try:
            config = load_config(path)
        except ConfigError as error:
            print(str(error), file=sys.stderr)
            status = 1
            continue
        screen.print(f"{path}: ok ({config.model['type']})")
    return status


def _config_schema(args: argparse.Namespace) -> int:
    from ..config._schema import config_schema  # (here: the listing commands stay light)

    text = json.dumps(config_schema(), indent=2)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except OSError as error:
            return fail(f"cannot write {args.output}: {error}")
    else:
        print(text)
    return 0


def _human(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _build(args: argparse.Namespace) -> int:
    from ..config._summary import summarize  # (here: the listing commands stay light)

    try:
        summary = summarize(args.file)
    except ConfigError as error:
        print(str(error), file=sys.stderr)
        return 1
    screen = console()
    if args.summary:
        rows = [
            (
                layer.path,
                layer.type,
                ", ".join(f"{v.name} {v.shape} {v.dtype} [{v.kind}]" for v in layer.variables),
                f"{layer.count:,}",
                _human(layer.nbytes),
            )
            for layer in summary.layers
        ]
        screen.print(
            table(
                f"{args.file} (built abstractly, nothing allocated)",
                ("Layer", "Type", "Variables", "Count", "Bytes"),
                rows,
            )
        )
        kinds = [(kind, f"{c:,}", _human(b)) for kind, (c, b) in sorted(summary.by_kind.items())]
        screen.print(table("per Variable kind", ("Kind", "Count", "Bytes"), kinds))
    screen.print(
        f"total: {summary.total_count:,} values, {_human(summary.total_bytes)} "
        f"({summary.total_bytes:,} bytes)"
    )
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``config validate``, ``config schema`` and ``build``."""
    config = subparsers.add_parser(
        "config", help="validate configs, print the schema"
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = add_command(config, "validate", _config_validate, "validate config files")
    validate.add_argument("files", nargs="+", metavar="FILE")
    schema = add_command(config, "schema", _config_schema, "print the JSON Schema of config files")
    schema.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    build = add_command(subparsers, "build", _build, "build a config abstractly (no allocation)")
    build.add_argument("file", metavar="FILE")
    build.add_argument(
        "--summary",
        action="store_true",
        help="shapes, counts and bytes per layer and per Variable kind",
    )
