"""The ``nnx`` console script's entry point: it loads the command (`nnx_plugins.cli._main`)
and runs it. A Ctrl-C while those modules load (the first few tenths of a second) is one line
and exit 130, as everywhere else, not a traceback of the import it interrupted.

Example:
    >>> from nnx_plugins.cli import _entry
    >>> _entry._command().__module__
    'nnx_plugins.cli._main'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["run"]


def _command() -> Callable[[], None]:
    from ._main import run  # (the command and what it imports: rich, argparse, ...)

    return run


def run() -> None:
    """The ``nnx`` console script: `nnx_plugins.cli._main.run`, loaded here."""
    try:
        command = _command()
    except KeyboardInterrupt:
        sys.stderr.write("nnx: interrupted.\n")
        sys.stderr.flush()
        os._exit(130)  # (a module was half imported: nothing of it may run at exit)
        return
    command()
