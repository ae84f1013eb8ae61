"""How much a config may hold: bytes read, nesting depth, values, files. Nothing unbounded.

Every file, include and override of one `load_config` call draws from one `Budget`; going
over a limit is a `ConfigError` that names the limit and how to raise it, raised before the
excess is read or expanded. The defaults come from `ConfigLimits` and can be changed with the
``NNX_CONFIG_MAX_*`` environment variables or ``load_config(..., limits=ConfigLimits(...))``.

Example:
    >>> from nnx_plugins import ConfigError, ConfigLimits
    >>> from nnx_plugins.config._limits import Budget
    >>> limits = ConfigLimits(max_nodes=3)
    >>> budget = Budget(limits, "m.yaml")
    >>> budget.add_nodes(3, ())
    >>> try:
    ...     budget.add_nodes(1, ("model", "layers"))
    ... except ConfigError as error:
    ...     print(error.problems[0].message)
    the config holds more than max_nodes=3 values (aliases, includes and interpolations expanded). Raise the limit with NNX_CONFIG_MAX_NODES=N or load_config(..., limits=ConfigLimits(max_nodes=N)).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from .._text import format_path
from ._errors import ConfigError, Problem

__all__ = ["ConfigLimits", "Budget"]

_ENV = {
    "max_bytes": "NNX_CONFIG_MAX_BYTES",
    "max_depth": "NNX_CONFIG_MAX_DEPTH",
    "max_nodes": "NNX_CONFIG_MAX_NODES",
    "max_files": "NNX_CONFIG_MAX_FILES",
}


@dataclasses.dataclass(frozen=True)
class ConfigLimits:
    """The bounds of one config read (a file with its includes and overrides).

    Attributes:
        max_bytes: bytes read from all files and overrides together, and characters produced
            by string interpolation (default 1 MiB).
        max_depth: nesting of mappings and lists, and length of a chain of interpolations
            (default 100).
        max_nodes: values in the composed config, counting every expansion of a YAML alias,
            every included file and every interpolated copy (default 100,000).
        max_files: files read, the config itself and every include (default 32).

    Example:
        >>> from nnx_plugins import ConfigLimits
        >>> ConfigLimits.from_env({"NNX_CONFIG_MAX_DEPTH": "20"}).max_depth
        20
        >>> ConfigLimits().max_bytes
        1048576
    """

    max_bytes: int = 1 << 20
    max_depth: int = 100
    max_nodes: int = 100_000
    max_files: int = 32

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"ConfigLimits({field.name}=...) must be a positive integer, got {value!r}."
                )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ConfigLimits:
        """The defaults, changed by ``NNX_CONFIG_MAX_BYTES``, ``_DEPTH``, ``_NODES``, ``_FILES``.

        Raises:
            ConfigError: a variable is set to something other than a positive integer.
        """
        env = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for name, variable in _ENV.items():
            raw = env.get(variable, "").strip().replace("_", "")
            if not raw:
                continue
            if not raw.isdigit() or int(raw) < 1:
                message = (
                    f"{variable}={env[variable]!r} is not a positive integer; set it to a "
                    f"number such as {getattr(cls(), name)} (the default), or unset it."
                )
                raise ConfigError([Problem((), message, "environment")])
            values[name] = int(raw)
        return cls(**values)


def _how_to_raise(limit: str) -> str:
    return (
        f"Raise the limit with {_ENV[limit]}=N or load_config(..., limits=ConfigLimits({limit}=N))."
    )


class Budget:
    """What one config read has used so far; every method raises once a limit is passed."""

    def __init__(self, limits: ConfigLimits, name: str):
        self.limits, self.name = limits, name
        self.nbytes = self.nodes = self.files = self.text = 0
        self.paths: list[str] = []  # the files read, in order

    def fail(
        self,
        limit: str,
        what: str,
        *,
        source: str | None = None,
        path: Any = (),
        position: tuple[int, int] | None = None,
    ) -> None:
        """Raise the `ConfigError` for passing ``limit``: ``what`` happened, how to raise it."""
        value = getattr(self.limits, limit)
        message = f"{what.format(limit=f'{limit}={value:,}')} {_how_to_raise(limit)}"
        line, column = position or (None, None)
        raise ConfigError([Problem(tuple(path), message, source or self.name, line, column)])

    def add_bytes(self, count: int, source: str) -> None:
        """Count ``count`` bytes about to be read from ``source``."""
        self.nbytes += count
        if self.nbytes > self.limits.max_bytes:
            self.fail(
                "max_bytes",
                f"the config is larger than {{limit}} bytes ({self.nbytes:,} bytes with its "
                "includes and overrides); nothing was parsed.",
                source=source,
            )

    def add_text(
        self, count: int, path: Any, source: str, position: tuple[int, int] | None = None
    ) -> None:
        """Count ``count`` characters produced by string interpolation."""
        self.text += count
        if self.text > self.limits.max_bytes:
            self.fail(
                "max_bytes",
                "string interpolation produces more than {limit} characters.",
                source=source,
                path=path,
                position=position,
            )

    def add_nodes(
        self,
        count: int,
        path: Any,
        source: str | None = None,
        position: tuple[int, int] | None = None,
    ) -> None:
        """Count ``count`` values added to the config at ``path`` (written at ``position``)."""
        self.nodes += count
        if self.nodes > self.limits.max_nodes:
            self.fail(
                "max_nodes",
                "the config holds more than {limit} values (aliases, includes and "
                "interpolations expanded).",
                source=source,
                path=path,
                position=position,
            )

    def check_depth(
        self,
        depth: int,
        path: Any,
        source: str | None = None,
        position: tuple[int, int] | None = None,
    ) -> None:
        """Refuse nesting (or a chain of references) deeper than the limit.

        The error is located at ``position`` and names the first keys of ``path``.
        """
        if depth > self.limits.max_depth:
            shown = format_path(tuple(path)[:4]) + (" ..." if len(path) > 4 else "")
            self.fail(
                "max_depth",
                f"the config is nested deeper than {{limit}} levels (here inside {shown}); "
                "mappings, lists and chains of interpolations count.",
                source=source,
                position=position,
            )

    def add_file(self, source: str) -> None:
        """Count one more file read."""
        self.files += 1
        self.paths.append(source)
        if self.files > self.limits.max_files:
            self.fail(
                "max_files",
                "the config reads more than {limit} files (itself and its includes).",
                source=source,
            )
