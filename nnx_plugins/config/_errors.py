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
from collections.abc import Sequence

from .._errors import NnxError
from .._text import format_path

__all__ = ["Problem", "ConfigError"]


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


class ConfigError(NnxError, ValueError):
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
