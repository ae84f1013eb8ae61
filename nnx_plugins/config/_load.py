"""Reading and validating configs: `load_config` returns a `Config`, or one `ConfigError` listing
every problem with its ``file:line:col``. Nothing is built here (see `_build`).

The stages: read the file within the limits (`_source`, `_limits`), merge its includes and
apply the overrides (`_compose`), resolve ``${...}`` (`_interpolate`), then validate every
section (`_walk`, `_sections`) and fill in the defaults.

Example:
    >>> from nnx_plugins import load_config
    >>> config = load_config({"model": {
    ...     "type": "Sequential",
    ...     "layers": [{"type": "Linear", "in_features": 4, "out_features": 8},
    ...                {"type": "relu"},
    ...                {"type": "Linear", "in_features": 8, "out_features": 2}]}})
    >>> [layer["type"] for layer in config.model["layers"]]
    ['Linear', 'relu', 'Linear']
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic
import yaml

from .._text import close_matches, suggest
from ..registry._registry import Registry, default_registry
from ._compose import INCLUDE, compose, held
from ._errors import ConfigError, Problem
from ._interpolate import escape, interpolate
from ._limits import Budget, ConfigLimits
from ._sections import RESERVED, PluginsSection, registered_sections
from ._source import Source
from ._walk import Walker, describe

__all__ = ["Config", "load_config"]


@dataclasses.dataclass(frozen=True)
class Config:
    """A validated config.

    Attributes:
        model: the normalized ``model`` section (every default filled in, names for dtypes,
            initializers and activations); ``to_config(build(config)) == config.model``.
        sections: the other top-level sections, as objects of their pydantic models (see
            `register_section` and the ``nnx.config_sections`` entry points).
        prefer: ``plugins.prefer`` (name -> distribution) used to resolve collisions.
        source: the file name, or ``"<dict>"``.
        files: every file read: the config, then its includes (not compared: two equal
            configs may come from different files).
    """

    model: dict[str, Any]
    sections: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    prefer: Mapping[str, str] = dataclasses.field(default_factory=dict)
    source: str = "<dict>"
    files: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    _source: Source | None = dataclasses.field(default=None, compare=False, repr=False)

    def problem(self, path: tuple[Any, ...], message: str) -> Problem:
        """A `Problem` at ``path`` located where that value was written (``file:line:col``),
        for a check that needs more than the config (a file it names, the devices).

        Example:
            >>> from nnx_plugins import load_config
            >>> config = load_config({"model": {"type": "relu"}})
            >>> str(config.problem(("model", "type"), "not today"))
            '<dict>: model.type: not today'
        """
        if self._source is None:
            return Problem(tuple(path), message, self.source)
        return self._source.problem(tuple(path), message)

    def from_override(self, path: tuple[Any, ...]) -> bool:
        """Whether the value at ``path`` was given as a ``KEY=VALUE`` override (a relative
        path given so is relative to the current directory, not to the config file).

        Example:
            >>> from nnx_plugins import load_config
            >>> config = load_config({"model": {"type": "relu"}}, overrides=["train.steps=3"])
            >>> config.from_override(("train", "steps")), config.from_override(("model", "type"))
            (True, False)
        """
        if self._source is None:
            return False
        return self._source.file_of(tuple(path)).startswith("<override")

    def to_dict(self) -> dict[str, Any]:
        """The whole resolved config as plain data that `load_config` reads back to an equal
        `Config`: registered sections dumped to JSON types, and a literal ``${`` in a string
        written ``\\${`` (so it is not taken for an interpolation).

        Example:
            >>> from nnx_plugins import load_config
            >>> load_config({"model": {"type": "relu"}}).to_dict()
            {'model': {'type': 'relu'}}
        """
        data: dict[str, Any] = {"model": self.model}
        if self.prefer:
            data["plugins"] = {"prefer": dict(self.prefer)}
        for name, value in self.sections.items():
            data[name] = (
                value.model_dump(mode="json") if isinstance(value, pydantic.BaseModel) else value
            )
        return _escaped(data)

    def to_yaml(self) -> str:
        """`to_dict` as YAML: what ``nnx config show`` prints and ``nnx train`` saves.

        Example:
            >>> from nnx_plugins import load_config
            >>> print(load_config({"model": {"type": "Dropout", "rate": 0.5}}).to_yaml())
            model:
              type: Dropout
              rate: 0.5
              broadcast_dims: []
              deterministic: false
              rng_collection: dropout
            <BLANKLINE>
        """
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {key: _escaped(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(item) for item in value]
    return value


def _section_problems(
    walker: Walker, name: str, model: type[pydantic.BaseModel], value: Any
) -> Any:
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as error:
        for item in error.errors(include_url=False):
            where = (name, *item["loc"])
            if item["type"] == "extra_forbidden":
                fields = [f.alias or n for n, f in model.model_fields.items()]
                walker.add(
                    where,
                    f"unknown key {item['loc'][-1]!r}.{suggest(item['loc'][-1], fields)}",
                    at_key=True,
                )
            else:
                walker.add(where, f"{item['msg']} (got {describe(item.get('input'))}).")
    return None


def _validate(
    source: Source, registry: Registry, unresolved: frozenset[Any], files: Sequence[str] = ()
) -> Config:
    """Validate the composed ``source``; a value whose interpolation failed (``unresolved``
    paths) is already reported, so what validation says about it is left out."""
    data = source.data
    walker = Walker(source, registry)
    if not isinstance(data, Mapping):  # (not a config: its type and size, never its content)
        got = "an empty file" if data is None and not source.problems else held(data, source)
        raise ConfigError(
            [source.problem((), f"expected a mapping with a 'model' section, got {got}.")]
        )
    models = registered_sections(registry)
    known = [*RESERVED, *models]
    sections: dict[str, Any] = {}
    plugins = _section_problems(walker, "plugins", PluginsSection, data.get("plugins", {}))
    for key, value in data.items():
        if key in RESERVED:
            continue
        model = models.get(key) if isinstance(key, str) else None
        if model is not None:
            sections[key] = _section_problems(walker, key, model, value)
        else:
            close = suggest(key, [*known, INCLUDE])
            walker.add(
                (key,),
                f"unknown section {key!r}.{close} Known sections: {', '.join(sorted(known))}.",
                at_key=True,
            )
    if "model" not in data:
        walker.add((), "missing the 'model' section describing the layers.")
        raise ConfigError(_in_order(walker.problems, source, unresolved, known))
    walker.prefer = dict(plugins.prefer) if plugins is not None else {}
    normalized = walker.node(data["model"], ("model",))
    if walker.problems or source.problems or normalized is None:
        raise ConfigError(_in_order(walker.problems, source, unresolved, known))
    return Config(normalized, sections, walker.prefer, source.name, tuple(files), source)


def _foreign_files(source: Source, known: Sequence[str]) -> dict[str, list[Problem]]:
    """Included files that are no config: a top-level key that is no section and close to
    none (``apiVersion`` of a Kubernetes secret). Their problems are replaced by one each that
    shows nothing of their content (names and values may be secrets)."""
    found: dict[str, list[tuple[int, int]]] = {}
    for key in source.data:
        origin = source.file_of((key,))
        if key in known or origin == source.name or origin.startswith("<override"):
            continue
        if not close_matches(key, [*known, INCLUDE]):
            found.setdefault(origin, []).append(source.keys.get((key,)) or (0, 0))
    replaced = {}
    for name, places in found.items():
        lines = ", ".join(str(line) for line, _ in sorted(places)[:10])
        line, column = min(places)
        message = (
            f"not a config file: the top-level key{'s' * (len(places) > 1)} at line{'s' * (len(places) > 1)} "
            f"{lines} {'are' if len(places) > 1 else 'is'} no config section (nor close to one), so "
            "nothing of this file is shown or used. Include only config files (sections: "
            f"{', '.join(sorted(known))})."
        )
        replaced[name] = [Problem((), message, name, line or None, column or None)]
    return replaced


def _in_order(
    problems: list[Problem], source: Source, unresolved: frozenset[Any], known: Sequence[str]
) -> list[Problem]:
    """The reader's and validation's problems by file (the config first, then includes, then
    overrides), line and column; none about a value whose interpolation failed, and one
    problem for an included file that is no config (`_foreign_files`)."""
    problems = [
        *source.problems,
        *(p for p in problems if not any(p.path[: len(u)] == u for u in unresolved)),
    ]
    if isinstance(source.data, Mapping):
        foreign = _foreign_files(source, known)
        problems = [p for p in problems if p.source not in foreign]
        problems += [p for replaced in foreign.values() for p in replaced]
    files = {name: rank for rank, name in enumerate(dict.fromkeys(source.files.values()), 1)}
    files[source.name] = 0
    return sorted(
        problems,
        key=lambda p: (
            files.get(p.source, len(files)),
            p.line is None,
            p.line or 0,
            p.column or 0,
        ),
    )


def load_config(
    config: Any,
    *,
    overrides: Sequence[str] = (),
    registry: Registry | None = None,
    limits: ConfigLimits | None = None,
) -> Config:
    """Read, compose and validate a config: a YAML/JSON file path, or a mapping.

    A top-level ``include: [base.yaml, ...]`` merges other files under it, ``overrides``
    (``"train.epochs=5"``, ``"model.layers[1].out_features=64"``) are applied next, then every
    ``${dotted.path}`` is resolved; the result is validated as one config, each problem located
    in the file (or override) it came from.

    Args:
        config: ``"model.yaml"``, ``"model.json"``, a `pathlib.Path`, or a dict with a ``model``
            section (its includes are relative to the current directory).
        overrides: ``KEY=VALUE`` strings; KEY is a dotted path with list indices, VALUE is read
            as YAML. A later override of the same key wins.
        registry: where layer names resolve; `default_registry()` when omitted.
        limits: bounds on bytes, nesting, values and files read; `ConfigLimits.from_env()`
            (the defaults, or the ``NNX_CONFIG_MAX_*`` variables) when omitted.

    Returns:
        The validated `Config`. Nothing is built.

    Raises:
        ConfigError: listing every problem with its ``file:line:col`` and path.

    Example:
        >>> from nnx_plugins import ConfigError, load_config
        >>> try:
        ...     load_config({"model": {"type": "Linear", "in_feature": 2, "out_features": 3}})
        ... except ConfigError as error:
        ...     print(error.problems[0].message)
        unknown key 'in_feature' for Linear. Did you mean 'in_features'? Valid keys: ...
        >>> load_config({"model": {"type": "Linear", "in_features": 2, "out_features": 3}},
        ...             overrides=["model.out_features=8"]).model["out_features"]
        8
    """
    if isinstance(config, Config):
        if not overrides:
            return config
        config = config.to_dict()
    if not isinstance(config, (Mapping, str, os.PathLike, Source)):
        raise TypeError(
            f"load_config expects a file path or a mapping, got {type(config).__name__}."
        )
    if isinstance(overrides, str):
        raise TypeError(
            f"load_config(overrides=...) takes a list of KEY=VALUE strings, got the string "
            f"{overrides!r}; write overrides=[{overrides!r}]."
        )
    name = "<dict>" if isinstance(config, Mapping) else str(config)
    budget = Budget(limits or ConfigLimits.from_env(), name)
    try:
        source = compose(config, list(overrides), budget)
        unresolved = interpolate(source, budget)
        return _validate(source, registry or default_registry(), unresolved, budget.paths)
    except RecursionError:  # (only with a max_depth raised past what Python's stack holds)
        message = (
            f"the config is nested too deeply for Python's recursion limit "
            f"({sys.getrecursionlimit()}) under max_depth={budget.limits.max_depth}; lower "
            "NNX_CONFIG_MAX_DEPTH (or ConfigLimits(max_depth=...)) or flatten the config."
        )
        raise ConfigError([Problem((), message, name)]) from None
