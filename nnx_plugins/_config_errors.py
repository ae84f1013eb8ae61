"""`ConfigError`: every problem of a config at once, each with its file location and path.

Example:
    >>> from nnx_plugins import ConfigError, Problem
    >>> error = ConfigError([Problem(("model", "layers", 3, "out_features"), "expected an int",
    ...                              source="model.yaml", line=12, column=7)])
    >>> print(error)
    1 problem in model.yaml:
      model.yaml:12:7: model.layers[3].out_features: expected an int
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable, Sequence

__all__ = ["Problem", "ConfigError", "format_path", "suggest"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def format_path(path: Sequence[str | int]) -> str:
    """Render a config path the way users write it.

    Example:
        >>> from nnx_plugins._config_errors import format_path
        >>> format_path(("model", "layers", 3, "kernel_init", "type"))
        'model.layers[3].kernel_init.type'
        >>> format_path(("model", "branches", "a b"))
        "model.branches['a b']"
        >>> format_path(())
        '<root>'
    """
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        elif isinstance(key, str) and _IDENTIFIER.match(key):
            text += f".{key}" if text else key
        else:
            text += f"[{key!r}]"
    return text or "<root>"


def suggest(word: object, options: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest options, or ``""``.

    Example:
        >>> from nnx_plugins._config_errors import suggest
        >>> suggest("out_feature", ["out_features", "use_bias"])
        " Did you mean 'out_features'?"
    """
    word = str(word)
    scored = sorted(
        ((difflib.SequenceMatcher(None, word, o).ratio(), o) for o in options), reverse=True
    )
    best = scored[0][0] if scored else 0.0
    close = [o for r, o in scored[:3] if r >= 0.6 and r >= best - 0.1]
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a config.

    Attributes:
        path: keys from the top of the config, e.g. ``("model", "layers", 3, "out_features")``.
        message: what is wrong and how to fix it.
        source: the file name (``"<dict>"`` for a Python mapping).
        line, column: 1-based position in ``source`` when known.
    """

    path: tuple[str | int, ...]
    message: str
    source: str = "<dict>"
    line: int | None = None
    column: int | None = None

    @property
    def location(self) -> str:
        """``file:line:col`` (or just the source when the position is unknown)."""
        if self.line is None:
            return self.source
        return f"{self.source}:{self.line}:{self.column}"

    def __str__(self) -> str:
        return f"{self.location}: {format_path(self.path)}: {self.message}"


class ConfigError(ValueError):
    """A config is invalid; ``.problems`` lists every problem found, in document order.

    Raises of this type never leave a partially built model behind.
    """

    def __init__(self, problems: Sequence[Problem]):
        if not problems:
            raise ValueError("ConfigError needs at least one Problem.")
        self.problems = tuple(problems)
        count = len(self.problems)
        sources = sorted({p.source for p in self.problems})
        header = f"{count} problem{'s' if count > 1 else ''} in {', '.join(sources)}:"
        super().__init__("\n  ".join([header, *map(str, self.problems)]))
