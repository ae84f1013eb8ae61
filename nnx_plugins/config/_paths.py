"""Config paths as users write them, read back: ``model.layers[1].out_features``.

The grammar is what `nnx_plugins._text.format_path` writes: names joined by dots, list indices
in brackets (``[1]``, ``[-1]`` for the last item; ``.1`` also works), and any other key quoted
in brackets (``plugins.prefer['acme.GatedDense']``). Overrides (``KEY=VALUE``) and
interpolations (``${KEY}``) both use it.

Example:
    >>> from nnx_plugins.config._paths import parse_path, path_prefix
    >>> parse_path("model.layers[1].out_features")
    ('model', 'layers', 1, 'out_features')
    >>> parse_path("plugins.prefer['acme.GatedDense']")
    ('plugins', 'prefer', 'acme.GatedDense')
    >>> path_prefix("optimizer.learning_rate.peak_value=3e-3")  # (keys, columns, end)
    (('optimizer', 'learning_rate', 'peak_value'), [1, 11, 25], 34)
"""

from __future__ import annotations

import ast
import re
from typing import Any

__all__ = ["PathSyntaxError", "parse_path", "path_prefix"]

_NAME = r"[A-Za-z_][A-Za-z0-9_\-]*"
_TOKEN = re.compile(
    rf"""
    (?P<dot>\.)?
    (?:
        (?P<name>{_NAME})
      | (?P<number>\d+)
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*(?P<quoted>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*\]
    )
    """,
    re.VERBOSE,
)


class PathSyntaxError(ValueError):
    """A path that does not follow the grammar; ``column`` is 1-based."""

    def __init__(self, message: str, column: int):
        super().__init__(message)
        self.column = column


def path_prefix(
    text: str, *, max_keys: int | None = None
) -> tuple[tuple[Any, ...], list[int], int]:
    """Read the path at the start of ``text`` (reading stops after ``max_keys + 1`` keys,
    so that the caller can refuse a path longer than ``max_keys`` without reading all of it).

    Returns:
        ``(path, columns, end)``: the keys, the 1-based column where each key starts, and the
        offset of the first character after the path.

    Raises:
        PathSyntaxError: ``text`` does not start with a path.
    """
    keys: list[Any] = []
    columns: list[int] = []
    offset = 0
    while offset < len(text) and (max_keys is None or len(keys) <= max_keys):
        match = _TOKEN.match(text, offset)
        if match is None:
            break
        dotted = match["dot"] is not None
        if match["name"] is not None or match["number"] is not None:
            if dotted != bool(keys) or (match["number"] is not None and not keys):
                break  # the first name stands alone, the others follow a dot
            key: Any = match["name"] if match["name"] is not None else int(match["number"])
        elif dotted:  # a bracket follows a key directly, never a dot
            break
        elif match["index"] is not None:
            key = int(match["index"])
        else:
            key = ast.literal_eval(match["quoted"])
        keys.append(key)
        columns.append(match.start() + 1 + int(dotted))
        offset = match.end()
    if not keys:
        raise PathSyntaxError(
            f"expected a key path such as model.layers[0].out_features at {text[:20]!r}",
            offset + 1,
        )
    return tuple(keys), columns, offset


def parse_path(text: str) -> tuple[Any, ...]:
    """The keys of the path ``text`` (the inverse of `format_path`).

    Raises:
        PathSyntaxError: ``text`` is not a path (with the column where it stops being one).

    Example:
        >>> from nnx_plugins.config._paths import parse_path
        >>> parse_path("model.layers[-1]")
        ('model', 'layers', -1)
    """
    keys, _, end = path_prefix(text)
    if end != len(text):
        raise PathSyntaxError(
            f"unexpected {text[end:][:20]!r} after the path {text[:end]!r}", end + 1
        )
    return keys
