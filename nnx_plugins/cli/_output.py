"""What every command group shares: the console, tables, the registry, error lines.

Example:
    >>> from nnx_plugins.cli._output import fail
    >>> fail("no such file")
    1
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from ..registry._registry import Registry, default_registry

__all__ = ["console", "table", "registry", "fail", "add_command"]


def console(stream: Any = None) -> Console:
    """A console on ``stream`` (stdout), 160 columns wide when it is not a terminal."""
    stream = sys.stdout if stream is None else stream
    width = None if stream.isatty() else 160
    return Console(file=stream, width=width, highlight=False, markup=False)


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A table whose cells are ``str(cell)``."""
    out = Table(title=title, title_justify="left")
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(*(str(cell) for cell in row))
    return out


def registry() -> Registry:
    """The process-wide plugin registry."""
    return default_registry()


def fail(message: str) -> int:
    """Print ``nnx: error: message`` on stderr; return the exit status 1."""
    print(f"nnx: error: {message}", file=sys.stderr)
    return 1


def add_command(
    subparsers: Any, name: str, handler: Callable[[argparse.Namespace], int], help_text: str
) -> argparse.ArgumentParser:
    """A subcommand parser whose ``handler(args) -> int`` runs it."""
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(handler=handler)
    return parser
