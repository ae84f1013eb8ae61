"""Which files of a run directory each part may write, checked before anything starts.

The run owns ``config.yaml``, ``metrics.png``, the lock file, the checkpoint folder
(``checkpoint.dir``) and ``metrics.jsonl`` (the ``jsonl`` logger's, read back on a resume).
A logger (or callback) writes the files it declares, ``files()`` (paths relative to the run
directory), or else those its config names in an argument such as ``file`` or ``dir``; each
must be a plain relative path inside the run directory, not hidden (temporary files are), not
one the run owns, and not one another part writes: ``loggers: [csv, csv]`` would write every
row twice, a ``csv`` logger's ``file: config.yaml`` would overwrite the resolved config. Each
is refused at its place in the config before the run directory is touched.

Example:
    >>> from nnx_plugins import ConfigError
    >>> from nnx_plugins.training._assembly import assemble
    >>> from nnx_plugins.training._config import load_train_config
    >>> config = load_train_config({
    ...     "model": {"type": "Linear", "in_features": 64, "out_features": 10},
    ...     "data": {"type": "digits", "layout": "flat"},
    ...     "loggers": ["jsonl", {"type": "csv", "file": "config.yaml"}]})
    >>> try:
    ...     assemble(config)
    ... except ConfigError as error:
    ...     print(error.problems[0])
    <dict>: loggers[1].file: 'config.yaml' is the resolved config, which the run writes itself; a logger writes files of its own: choose another name.
"""

from __future__ import annotations

import pathlib
from typing import Any

from .._text import format_path
from ..config._build import located
from ..config._errors import ConfigError
from ..registry._errors import PluginError
from ._run_dir import LOCK_NAME
from .loggers._jsonl import FILE as JSONL_FILE

__all__ = ["check_logger_files", "owned_by_the_run"]

_PATH_ARGUMENTS = ("file", "dir", "path", "filename", "folder", "logdir", "log_dir", "directory")


_RUN_FILES = {
    "config.yaml": "the resolved config",
    "metrics.png": "the plot of the run",
    LOCK_NAME: "the run's lock file",
    JSONL_FILE: "the jsonl logger's log, which the run reads back on a resume",
}


def owned_by_the_run(config: Any) -> dict[str, str]:
    """The names at the top of the run directory the run itself writes, and what each is.

    Raises:
        ConfigError: ``checkpoint.dir`` is one of the run's own files.
    """
    checkpoints = pathlib.PurePath(config.sections["checkpoint"].dir).parts[0]
    names = {
        **_RUN_FILES,
        **{f".{k}.tmp": f"the temporary file of {v}" for k, v in _RUN_FILES.items()},
    }
    clash = next((v for k, v in names.items() if k.casefold() == checkpoints.casefold()), None)
    if clash is not None:
        raise _error(
            config,
            ("checkpoint", "dir"),
            f"{checkpoints!r} is {clash}, which the run writes itself; the checkpoint folder "
            "needs a name of its own, e.g. 'checkpoints'.",
        )
    return {**_RUN_FILES, checkpoints: "the checkpoint folder (checkpoint.dir)"}


def _names_a_path(argument: str) -> bool:
    return argument in _PATH_ARGUMENTS or argument.endswith(("_file", "_dir", "_path"))


def _declared(parts: Any, obj: Any, arguments: dict[str, Any]) -> list[tuple[str, str | None]]:
    """``(path, argument)`` of each file ``obj`` writes (argument: the config key naming it)."""
    files = parts.call(obj, "files")
    if files is not None:
        with parts.label(obj).calling("files()"):
            named = {v: k for k, v in arguments.items() if isinstance(v, str)}
            return [(str(path), named.get(str(path))) for path in list(files)]
    return [(v, k) for k, v in arguments.items() if isinstance(v, str) and _names_a_path(k)]


def _problem(path: str, kind: str, owned: dict[str, str]) -> str | None:
    pure = pathlib.PurePosixPath(path.replace("\\", "/"))
    parts = pure.parts
    if not path.strip() or pure.is_absolute() or not parts or ".." in parts or "." == path:
        return (
            f"{path!r} is not a path inside the run directory; a {kind} writes files of its "
            "own there: give a plain relative name such as 'metrics.csv'."
        )
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        return f"{path!r} holds a control character; give a plain file name."
    if any(len(part.encode("utf-8", "surrogatepass")) > 255 for part in parts):
        return f"{path[:40]!r}... is a name longer than a file system takes (255 bytes)."
    if any(part.startswith(".") for part in parts):
        return (
            f"{path!r} is hidden (a leading '.'): the run's temporary and lock files are; give "
            "a name that does not start with '.'."
        )
    top = parts[0].casefold()
    what = next((v for k, v in owned.items() if k.casefold() == top), None)
    if what is not None:
        return (
            f"{path!r} is {what}, which the run writes itself; a {kind} writes files of its "
            "own: choose another name."
        )
    return None


def _overlap(a: str, b: str) -> bool:
    a, b = a.casefold().rstrip("/"), b.casefold().rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def check_logger_files(config: Any, parts: Any) -> None:
    """Refuse a logger or callback writing outside the run directory, over a file the run
    owns, or over a file another part writes (see the module docstring).

    Raises:
        ConfigError: at the argument naming the file (or at the part, when it declares its
            files with ``files()``).
    """
    owned = owned_by_the_run(config)
    taken: list[tuple[str, tuple[Any, ...], str]] = []
    for section, kind in (("loggers", "logger"), ("callbacks", "callback")):
        listed = config.sections[section].parts
        objects = parts.loggers if section == "loggers" else parts.callbacks
        for index, (obj, part) in enumerate(zip(objects, listed)):
            try:
                files = _declared(parts, obj, part.arguments)
            except PluginError as error:
                raise _error(config, (section, index), str(error)) from None
            for path, argument in files:
                where = (section, index, argument) if argument else (section, index)
                allowed = dict(owned)
                if kind == "logger" and part.type == "jsonl":
                    allowed.pop(JSONL_FILE)
                problem = _problem(path, kind, allowed)
                if problem is None:
                    other = next((t for t in taken if _overlap(t[0], path)), None)
                    if other is not None:
                        problem = (
                            f"{path!r} is written by {format_path(other[1][:2])} "
                            f"({other[2]}) already: two parts writing one file would mix "
                            "their records; give each its own file, or list the part once."
                        )
                if problem is not None:
                    raise _error(config, where, problem)
                taken.append((path, where, part.type))


def _error(config: Any, path: tuple[Any, ...], message: str) -> ConfigError:
    return ConfigError([located(config).problem(path, message)])
