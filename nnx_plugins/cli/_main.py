"""The ``nnx`` command: the parser of every command group, and `main`.

One module per command group adds its subcommands (``add_commands``): `_plugins`, `_names`
(layers and Variable kinds), `_run_parts` (tasks, datasets, metrics, loggers, callbacks),
`_config` (validate, schema, build) and `_train` (train, eval).
Listing commands read package metadata only: they import neither jax nor pydantic nor any
plugin, so each group imports heavy modules inside its handlers.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> build_parser().parse_args(["layers", "list", "Lin*"]).pattern
    'Lin*'
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..registry._errors import PluginError
from . import _config, _names, _plugins, _run_parts, _train
from ._output import fail, plugin_warnings_as_lines

__all__ = ["main", "build_parser"]

_GROUPS = (_plugins, _names, _run_parts, _config, _train)


def build_parser() -> argparse.ArgumentParser:
    """The ``nnx`` argument parser with every command group."""
    parser = argparse.ArgumentParser(prog="nnx", description="nnx: plugins, layers and configs.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in _GROUPS:
        group.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nnx`` command; return the exit status (0 ok, 1 bad input, 2 usage).

    Plugin problems print as ``nnx: warning: ...`` / ``nnx: error: ...`` lines naming the
    distribution, its version, the cause and a fix; never as a traceback.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "overrides", None), list):
        args.overrides += extra  # (KEY=VALUE after the options; the command checks each)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    with plugin_warnings_as_lines():
        try:
            return int(args.handler(args))
        except PluginError as error:
            return fail(error)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
