"""The ``nnx`` command: plugins, layers, Variable kinds, configs and abstract builds.

Listing commands read package metadata only: they import neither jax nor any plugin. Other
tools add subcommands through `COMMAND_MODULES`: each listed module, when it exists, defines
``add_commands(subparsers)`` and registers parsers whose ``handler`` default is a function
``handler(args) -> int``. Such a module must import heavy things inside its handlers.

Example:
    >>> from nnx_plugins._cli import main
    >>> main(["layers", "list", "Lin*"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

#: modules that add subcommands (e.g. ``train``, ``eval``) via ``add_commands(subparsers)``
COMMAND_MODULES = ("nnx_plugins._train_cli",)


def _console(stream: Any = None) -> Any:
    from rich.console import Console

    stream = sys.stdout if stream is None else stream
    width = None if stream.isatty() else 160
    return Console(file=stream, width=width, highlight=False, markup=False)


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    return table


def _registry() -> Any:
    from ._registry import default_registry

    return default_registry()


def _fail(message: str) -> int:
    print(f"nnx: error: {message}", file=sys.stderr)
    return 1


# -- plugins ---------------------------------------------------------------------------------
def _plugins_list(args: argparse.Namespace) -> int:
    registry = _registry()
    rows = []
    for record in registry.distributions():
        count = {
            k: sum(e.kind == k for e in record.entries) for k in ("layer", "variable", "plugin")
        }
        hooks = ", ".join(e.name for e in record.entries if e.kind == "plugin") or "-"
        rows.append(
            (
                record.plugin.distribution,
                record.plugin.version,
                count["layer"],
                count["variable"],
                hooks,
                record.disabled or "enabled",
            )
        )
    columns = ("Distribution", "Version", "Layers", "Variable kinds", "Hook plugins", "Status")
    _console().print(_table("nnx plugins", columns, rows))
    return 0


def _plugins_check(args: argparse.Namespace) -> int:
    import warnings

    from ._errors import PluginError

    registry = _registry()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            failures = registry.load_all()
        except PluginError as error:  # strict mode
            return _fail(str(error))
    collisions = []
    for kind in ("layer", "variable"):
        for name in registry.names(kind):
            offers = registry.providers(kind, name)
            if len(offers) > 1:
                try:
                    registry.resolve(kind, name)
                except PluginError as error:
                    collisions.append(error)
    console = _console()
    rows = []
    for record in registry.distributions():
        mine = [f for f in failures if f.plugin == record.plugin]
        status = record.disabled or ("FAILED" if mine else "ok")
        rows.append((record.plugin.distribution, record.plugin.version, status))
    console.print(_table("nnx plugins check", ("Distribution", "Version", "Status"), rows))
    for problem in [*failures, *collisions]:
        print(f"nnx: {type(problem).__name__}: {problem}", file=sys.stderr)
    return 1 if failures or collisions else 0


# -- layers and variables --------------------------------------------------------------------
def _matches(name: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern.lower() in name.lower()


def _names_table(kind: str, pattern: str | None, title: str) -> Any:
    registry = _registry()
    rows = []
    for name in registry.names(kind):
        if not _matches(name, pattern):
            continue
        offers = registry.providers(kind, name)
        if len(offers) > 1:
            who = " and ".join(str(p.plugin) for p in offers)
            rows.append((name, who, ", ".join(p.target for p in offers), "collision"))
        else:
            rows.append((name, offers[0].plugin, offers[0].target, offers[0].status))
    return rows, _table(title, ("Name", "Provided by", "Target", "Status"), rows)


def _layers_list(args: argparse.Namespace) -> int:
    rows, table = _names_table("layer", args.pattern, "nnx layers (and activations)")
    console = _console()
    console.print(table)
    hooks = [
        f"{r.name} ({r.plugin})"
        for r, status in _registry().hook_plugins()
        if status == "not loaded"
    ]
    if hooks:
        console.print(
            f"Not loaded pluggy plugins may add more names: {', '.join(hooks)}. "
            "Run `nnx plugins check` to load them."
        )
    if args.pattern and not rows:
        return _fail(f"no layer name matches {args.pattern!r}.")
    return 0


def _layers_show(args: argparse.Namespace) -> int:
    from ._config_fields import layer_spec
    from ._config_types import to_json
    from ._errors import PluginError

    registry = _registry()
    try:
        provider = registry.resolve("layer", args.name)
        obj = registry.get("layer", args.name)
        spec = layer_spec(args.name, obj, registry=registry)
    except (PluginError, TypeError) as error:
        return _fail(str(error))
    console = _console()
    what = "activation function" if spec.is_activation else "layer"
    doc = (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
    console.print(f"{args.name}: {what} {provider.target} from {provider.plugin}")
    if doc:
        console.print(doc)
    rows = []
    for name, field in spec.model.model_fields.items():
        if name == "type_":
            continue
        default = "(required)" if field.is_required() else json.dumps(to_json(field.default))
        described = spec.field(field.alias or name)
        kind = described.kind if described is not None else "custom"
        rows.append((field.alias or name, kind, default))
    console.print(_table("config fields", ("Field", "Kind", "Default"), rows))
    return 0


def _variables_list(args: argparse.Namespace) -> int:
    _, table = _names_table("variable", None, "nnx Variable kinds")
    _console().print(table)
    return 0


# -- configs and builds ----------------------------------------------------------------------
def _config_validate(args: argparse.Namespace) -> int:
    from ._config import load_config
    from ._config_errors import ConfigError

    status = 0
    console = _console()
    for path in args.files:
        try:
            config = load_config(path)
        except ConfigError as error:
            print(str(error), file=sys.stderr)
            status = 1
            continue
        console.print(f"{path}: ok ({config.model['type']})")
    return status


def _config_schema(args: argparse.Namespace) -> int:
    from ._config_schema import config_schema

    text = json.dumps(config_schema(), indent=2)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except OSError as error:
            return _fail(f"cannot write {args.output}: {error}")
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
    from ._config_errors import ConfigError
    from ._summary import summarize

    try:
        summary = summarize(args.file)
    except ConfigError as error:
        print(str(error), file=sys.stderr)
        return 1
    console = _console()
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
        console.print(
            _table(
                f"{args.file} (built abstractly, nothing allocated)",
                ("Layer", "Type", "Variables", "Count", "Bytes"),
                rows,
            )
        )
        kinds = [(kind, f"{c:,}", _human(b)) for kind, (c, b) in sorted(summary.by_kind.items())]
        console.print(_table("per Variable kind", ("Kind", "Count", "Bytes"), kinds))
    console.print(
        f"total: {summary.total_count:,} values, {_human(summary.total_bytes)} "
        f"({summary.total_bytes:,} bytes)"
    )
    return 0


# -- the parser ------------------------------------------------------------------------------
def _add(
    subparsers: Any, name: str, handler: Callable[[argparse.Namespace], int], help_text: str
) -> Any:
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(handler=handler)
    return parser


def _extensions(subparsers: Any) -> None:
    for module_name in COMMAND_MODULES:
        if importlib.util.find_spec(module_name) is not None:
            importlib.import_module(module_name).add_commands(subparsers)


def build_parser() -> argparse.ArgumentParser:
    """The ``nnx`` argument parser, including commands added by `COMMAND_MODULES`."""
    parser = argparse.ArgumentParser(prog="nnx", description="nnx: plugins, layers and configs.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    plugins = commands.add_parser("plugins", help="installed layer packs").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    _add(plugins, "list", _plugins_list, "list distributions with nnx entry points (metadata only)")
    _add(plugins, "check", _plugins_check, "import every plugin; report failures and collisions")

    layers = commands.add_parser("layers", help="layer and activation names").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    listing = _add(layers, "list", _layers_list, "list layer names (metadata only)")
    listing.add_argument("pattern", nargs="?", help="substring or glob, e.g. 'acme.*'")
    show = _add(layers, "show", _layers_show, "show a layer's provider and config fields")
    show.add_argument("name")

    variables = commands.add_parser("variables", help="Variable kind names").add_subparsers(
        dest="action", metavar="ACTION", required=True
    )
    _add(variables, "list", _variables_list, "list Variable kind names (metadata only)")

    config = commands.add_parser(
        "config", help="validate configs, print the schema"
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = _add(config, "validate", _config_validate, "validate config files")
    validate.add_argument("files", nargs="+", metavar="FILE")
    schema = _add(config, "schema", _config_schema, "print the JSON Schema of config files")
    schema.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    build = _add(commands, "build", _build, "build a config abstractly (no allocation)")
    build.add_argument("file", metavar="FILE")
    build.add_argument(
        "--summary",
        action="store_true",
        help="shapes, counts and bytes per layer and per Variable kind",
    )
    _extensions(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nnx`` command; return the exit status (0 ok, 1 bad input, 2 usage)."""
    from ._errors import PluginError

    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except PluginError as error:
        return _fail(str(error))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
