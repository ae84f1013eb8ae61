"""What every command group shares: the console, tables, the registry, error and warning lines.

Plugin problems are printed as the command's own lines, never as raw Python warnings:

Example:
    >>> from nnx_plugins import PluginInfo, PluginLoadError
    >>> from nnx_plugins.cli._output import fail, problem_text
    >>> fail("no such file")
    1
    >>> error = PluginLoadError("acme 1.0 failed to import acme.x: SystemExit: 3.",
    ...                         plugin=PluginInfo("acme", "1.0"), fix="Reinstall acme.")
    >>> print(problem_text("warning", error))
    nnx: warning: acme 1.0 failed to import acme.x: SystemExit: 3.
      fix: Reinstall acme.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from .._errors import NnxWarning
from ..registry._errors import PluginError, PluginWarning
from ..registry._registry import Registry, default_registry

__all__ = [
    "keep_stderr",
    "report",
    "console",
    "table",
    "registry",
    "fail",
    "problem_text",
    "plugin_warnings_as_lines",
    "add_command",
]


_SPARE_STDERR: list[int] = []  # a duplicate of file descriptor 2, taken when `main` starts


def keep_stderr() -> None:
    """Take a duplicate of file descriptor 2, once per process: `report` falls back to it when
    a pack closed ``sys.stderr`` (or file descriptor 2) while it was imported."""
    if not _SPARE_STDERR:
        with contextlib.suppress(OSError):
            _SPARE_STDERR.append(os.dup(2))


def report(text: str) -> None:
    """Write ``text`` and a newline on stderr: ``sys.stderr`` when it works, else the duplicate
    of file descriptor 2 that `keep_stderr` took, so that no error of the command is lost.

    Example:
        >>> from nnx_plugins.cli._output import report
        >>> report("nnx: error: shown on stderr")
    """
    try:
        if sys.stderr is None or sys.stderr.closed:
            raise ValueError("closed")
        print(text, file=sys.stderr, flush=True)
        return
    except (ValueError, OSError, AttributeError):
        pass
    data = (text + "\n").encode("utf-8", "backslashreplace")
    for fd in _SPARE_STDERR:
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(fd, data) :]


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


def problem_text(level: str, error: PluginError) -> str:
    """``nnx: <level>: <what happened>`` and, when known, an indented ``fix:`` line."""
    text = f"nnx: {level}: {error.message}"
    return f"{text}\n  fix: {error.fix}" if error.fix else text


#: plugin errors already printed as warnings by this command (their fix is not repeated)
_WARNED: list[PluginError] = []


def fail(problem: str | PluginError) -> int:
    """Print ``nnx: error: ...`` on stderr (with the fix of a plugin error); return 1.

    A plugin error already shown as a warning is not followed by its fix a second time.
    """
    if isinstance(problem, PluginError):
        warned = any(problem is error for error in _WARNED)
        report(f"nnx: error: {problem.message}" if warned else problem_text("error", problem))
    else:
        report(f"nnx: error: {problem}")
    return 1


@contextlib.contextmanager
def plugin_warnings_as_lines() -> Iterator[None]:
    """Inside the block, plugin warnings (and nnx's own, `NnxWarning`) print as ``nnx:
    warning: ...`` lines (no source line).

    They always show (once per distribution, as the registry emits them), whatever the Python
    warning filters say: ``NNX_STRICT_PLUGINS=1`` is how they become errors. nnx's own
    warnings (`NnxWarning`) print as ``nnx: warning: ...`` too; other warnings keep Python's
    format.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("default", PluginWarning)
        warnings.simplefilter("default", NnxWarning)
        python_format = warnings.showwarning

        def show(message: Any, category: Any, *where: Any, **more: Any) -> None:
            if isinstance(message, PluginWarning) and message.error is not None:
                _WARNED.append(message.error)
                report(problem_text("warning", message.error))
            elif isinstance(message, NnxWarning):  # (e.g. the compile cache's: one line)
                report(f"nnx: warning: {message}")
            else:
                python_format(message, category, *where, **more)

        warnings.showwarning = show
        try:
            yield
        finally:
            _WARNED.clear()


def add_command(
    subparsers: Any, name: str, handler: Callable[[argparse.Namespace], int], help_text: str
) -> argparse.ArgumentParser:
    """A subcommand parser whose ``handler(args) -> int`` runs it."""
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(handler=handler)
    return parser


def add_compile_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--no-compile-cache``: compile every program, keeping nothing on disk (by default the
    compiled programs are kept in nnx's cache folder, ``NNX_CACHE_DIR``, for the next run)."""
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="compile every program and keep none on disk (default: keep them in the cache "
        "folder, $NNX_CACHE_DIR or ~/.cache/nnx, and load those compiled before)",
    )
