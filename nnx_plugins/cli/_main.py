"""The ``nnx`` command: the parser of every command group, and `main`.

One module per command group adds its subcommands (``add_commands``): `_plugins`, `_names`
(layers and Variable kinds), `_run_parts` (tasks, datasets, metrics, loggers, callbacks),
`_config` (validate, schema, build), `_train` (train, eval), `_generate` (generate) and
`_predict` (predict), `_export` (export jax, export hf).
Listing commands read package metadata only: they import neither jax nor pydantic nor any
plugin, so each group imports heavy modules inside its handlers.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> build_parser().parse_args(["layers", "list", "Lin*"]).pattern
    'Lin*'
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.metadata
import os
import platform
import signal
import sys
from collections.abc import Sequence
from typing import Any

from .._text import os_problem, suggest
from ..registry._errors import PluginError
from . import _config, _export, _generate, _import, _names, _plugins, _predict, _run_parts, _train
from ._config import usage_error
from ._output import fail, keep_stderr, plugin_warnings_as_lines, registry, report

__all__ = ["main", "build_parser", "version_text"]

_GROUPS = (_plugins, _names, _run_parts, _config, _train, _generate, _import, _predict, _export)


def build_parser() -> argparse.ArgumentParser:
    """The ``nnx`` argument parser with every command group."""
    parser = argparse.ArgumentParser(prog="nnx", description="nnx: plugins, layers and configs.")
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the versions of nnx, jax and Python"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in _GROUPS:
        group.add_commands(commands)
    return parser


def version_text() -> str:
    """What ``nnx --version`` prints: nnx's version and those of what it runs on, read from
    package metadata (nothing is imported, so it is as fast as the listing commands).

    Example:
        >>> from nnx_plugins.cli._main import version_text
        >>> version_text().split()[:2]
        ['nnx', '0.1.0']
    """
    found = {}
    for name in ("nnx-jax", "jax", "jaxlib"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return (
        f"nnx {found['nnx-jax']} (distribution nnx-jax; jax {found['jax']}, jaxlib "
        f"{found['jaxlib']}, Python {platform.python_version()})"
    )


class _Version(argparse.Action):
    """``--version``: print `version_text` and exit 0 (computed only when asked)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_text())
        parser.exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nnx`` command; return the exit status (0 ok, 1 bad input, 2 usage).

    Plugin problems print as ``nnx: warning: ...`` / ``nnx: error: ...`` lines naming the
    distribution, its version, the cause and a fix; never as a traceback.
    """
    keep_stderr()  # (before any pack is imported: its errors are still seen if one closes it)
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
    except KeyboardInterrupt:  # (while the commands' modules load: nothing started yet)
        report("nnx: interrupted.")
        return 130
    if extra and isinstance(getattr(args, "overrides", None), list):
        options = [i for i, word in enumerate(extra) if word.startswith("-")]
        if options:
            return usage_error(_command(args), unknown_option(extra, options[0]))
        args.overrides += extra  # (KEY=VALUE after the options; the command checks each)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    out = sys.stdout = _Stdout(sys.stdout)  # type: ignore[assignment]
    with plugin_warnings_as_lines():
        try:
            return int(args.handler(args))
        except PluginError as error:
            return fail(error)
        except KeyboardInterrupt:  # (`nnx train` says more itself: its checkpoints, --resume)
            report("nnx: interrupted.")
            return 130
        except OSError as error:
            if out.failed is None:
                raise
            return _output_lost(error, out.stream)
        finally:
            sys.stdout = out.stream


class _Stdout:
    """``sys.stdout`` while a command runs: the same stream, remembering whether writing to it
    failed (a full disk, a pipe closed by its reader), so that such an `OSError` is said as the
    output's in one line; a closed stdout (None) fails every write as EBADF."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.failed = stream, None

    def write(self, text: str) -> int:
        return self._call("write", text)

    def flush(self) -> None:
        self._call("flush")

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def _call(self, name: str, *args: Any) -> Any:
        try:
            if self.stream is None:
                raise OSError(errno.EBADF, "stdout is closed")
            return getattr(self.stream, name)(*args)
        except (OSError, ValueError) as error:  # (ValueError: a closed file object)
            self.failed = error
            if isinstance(error, ValueError):
                raise OSError(errno.EBADF, str(error)) from error
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _output_lost(error: BaseException, stream: Any) -> int:
    """Say in one line that the command's output could not be written on stdout (silently for
    a pipe its reader closed, as ``nnx layers list | head -1`` expects): 1. The file descriptor
    of ``stream`` is pointed at /dev/null, so that the interpreter's last flush says nothing
    more."""
    if not isinstance(error, BrokenPipeError):
        problem = os_problem(error) if isinstance(error, OSError) else str(error)
        report(f"nnx: error: cannot write the output on stdout: {problem}.")
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stream.fileno()  # (none for a stream in memory: then nothing is flushed at exit)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    return 1


def _command(args: argparse.Namespace) -> str:
    words = [args.command, getattr(args, "action", None)]
    return " ".join(w for w in words if isinstance(w, str)) + " FILE [KEY=VALUE...] [options]"


def unknown_option(extra: Sequence[str], index: int) -> str:
    """The message for an unknown ``--option`` among the arguments of a command that takes
    ``KEY=VALUE`` overrides: config values are set as overrides, so show the one meant.

    Example:
        >>> from nnx_plugins.cli._main import unknown_option
        >>> print(unknown_option(["--batch-size", "64"], 0))
        unknown option --batch-size. A value of the config is set as KEY=VALUE after the file: write train.batch_size=64.
    """
    option = extra[index]
    name, equals, value = option.lstrip("-").partition("=")
    following = extra[index + 1] if index + 1 < len(extra) else ""
    if not equals:
        value = following if following and not following.startswith("-") else "VALUE"
    name = name.replace("-", "_")
    keys = _config_keys()
    exact = [key for key in keys if key.rsplit(".", 1)[-1] == name]
    head = f"unknown option {option.partition('=')[0][:40]}."
    if len(exact) == 1:
        return f"{head} A value of the config is set as KEY=VALUE after the file: write {exact[0]}={value[:40]}."
    close = suggest(name, keys, key="last")
    return (
        f"{head} Options are listed by --help; a value of the config is set as KEY=VALUE after "
        f"the file, e.g. train.steps=5.{close}"
    )


def _config_keys() -> list[str]:
    """``section.field`` for every field of every registered config section."""
    from ..config._sections import registered_sections  # (here: only a mistake needs them)

    try:
        sections = registered_sections(registry())
    except PluginError:
        return []
    return [
        f"{section}.{field.alias or name}"
        for section, model in sections.items()
        for name, field in model.model_fields.items()
    ]


def run() -> None:
    """The ``nnx`` console script: `main`, then exit with its status. A run stopped by Ctrl-C
    or SIGTERM ends at once (``os._exit``, its output flushed): stopped while XLA compiled,
    the interpreter's teardown beside XLA's threads crashed the process (a segmentation
    fault after the stop message, in 3 of 4 stops). Its files are closed already. Once the
    command is done, Ctrl-C and SIGTERM are ignored: its output is whole and said, and a stop
    would only end the interpreter's teardown with a signal's status instead of the command's."""
    status = main()
    try:  # (the last lines, still buffered)
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError) as error:
        lost = _output_lost(error, sys.stdout)
        status = status or lost
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):  # (ValueError: not the main thread)
            signal.signal(signum, signal.SIG_IGN)
    if status in (130, 128 + signal.SIGTERM):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":  # pragma: no cover
    run()
