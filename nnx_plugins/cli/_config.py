"""``nnx config validate FILE... [KEY=VALUE...]``, ``nnx config show FILE [KEY=VALUE...]``,
``nnx config schema`` and ``nnx build FILE [KEY=VALUE...] [--summary]``.

An argument holding ``=`` that is not an existing file is an override (``train.epochs=5``),
applied to every FILE; overrides may also follow the options.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> build_parser().parse_args(["build", "m.yaml", "--summary"]).summary
    True
    >>> from nnx_plugins.cli._config import split_arguments
    >>> split_arguments(["m.yaml", "train.epochs=5", "model.layers[0].out_features=64"])
    (['m.yaml'], ['train.epochs=5', 'model.layers[0].out_features=64'])
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..config._errors import ConfigError
from ._output import add_command, console, fail, table

__all__ = ["add_commands", "split_arguments", "usage_error", "one_file"]


def split_arguments(arguments: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split positional arguments into files and ``KEY=VALUE`` overrides (in their order)."""
    files, overrides = [], []
    for argument in arguments:
        is_override = "=" in argument and not os.path.exists(argument)
        (overrides if is_override else files).append(argument)
    return files, overrides


def usage_error(command: str, message: str) -> int:
    """Print a usage error of ``nnx COMMAND`` on stderr; return the exit status 2."""
    print(f"usage: nnx {command}\nnnx: error: {message}", file=sys.stderr)
    return 2


def one_file(args: argparse.Namespace, usage: str) -> tuple[str, list[str]] | None:
    """``(FILE, overrides)`` of a command taking one file; ``None`` after a usage error."""
    files, overrides = split_arguments([args.file, *args.overrides])
    if len(files) == 1:
        return files[0], overrides
    usage_error(usage, f"give one config FILE, then KEY=VALUE overrides; got files {files}.")
    return None


def _config_validate(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: the listing commands stay light)

    files, overrides = split_arguments([*args.files, *args.overrides])
    if not files:
        return usage_error(
            "config validate FILE... [KEY=VALUE...]", "give at least one config FILE."
        )
    status = 0
    screen = console()
    for path in files:
        try:
            config = load_config(path, overrides=overrides)
        except ConfigError as error:
            print(str(error), file=sys.stderr)
            status = 1
            continue
        screen.print(f"{path}: ok ({config.model['type']})")
    return status


def _config_show(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: the listing commands stay light)

    given = one_file(args, "config show FILE [KEY=VALUE...]")
    if given is None:
        return 2
    try:
        config = load_config(given[0], overrides=given[1])
    except ConfigError as error:
        print(str(error), file=sys.stderr)
        return 1
    print(config.to_yaml(), end="")
    return 0


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
    from ..config._load import load_config  # (here: the listing commands stay light)
    from ..config._summary import summarize  # (here: the listing commands stay light)

    given = one_file(args, "build FILE [KEY=VALUE...] [--summary]")
    if given is None:
        return 2
    try:
        summary = summarize(load_config(given[0], overrides=given[1]))
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


_OVERRIDE_HELP = (
    "set a value by path, e.g. train.epochs=5 or model.layers[1].out_features=64 (VALUE is YAML)"
)


def add_commands(subparsers: Any) -> None:
    """Register ``config validate``, ``config show``, ``config schema`` and ``build``."""
    config = subparsers.add_parser(
        "config", help="validate configs, show the resolved config, print the schema"
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = add_command(config, "validate", _config_validate, "validate config files")
    validate.add_argument(
        "files", nargs="+", metavar="FILE [KEY=VALUE]", help="config files, then overrides"
    )
    validate.set_defaults(overrides=[])
    show = add_command(
        config,
        "show",
        _config_show,
        "print the resolved config (includes merged, overrides and ${...} applied, defaults "
        "filled in) as YAML",
    )
    show.add_argument("file", metavar="FILE")
    show.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDE_HELP)
    schema = add_command(config, "schema", _config_schema, "print the JSON Schema of config files")
    schema.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    build = add_command(subparsers, "build", _build, "build a config abstractly (no allocation)")
    build.add_argument("file", metavar="FILE")
    build.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDE_HELP)
    build.add_argument(
        "--summary",
        action="store_true",
        help="shapes, counts and bytes per layer and per Variable kind",
    )
