"""Reading and validating configs: `load_config` returns a `Config`, or one `ConfigError` listing
every problem with its ``file:line:col``. Nothing is built here (see `_build`).

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
from collections.abc import Mapping
from typing import Any

import pydantic

from .._text import suggest
from ..registry._registry import Registry, default_registry
from ._errors import ConfigError
from ._sections import RESERVED, PluginsSection, registered_sections
from ._source import Source, source_from
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
    """

    model: dict[str, Any]
    sections: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    prefer: Mapping[str, str] = dataclasses.field(default_factory=dict)
    source: str = "<dict>"

    def to_dict(self) -> dict[str, Any]:
        """The whole config as plain data (registered sections dumped to JSON types)."""
        data: dict[str, Any] = {"model": self.model}
        if self.prefer:
            data["plugins"] = {"prefer": dict(self.prefer)}
        for name, value in self.sections.items():
            data[name] = (
                value.model_dump(mode="json") if isinstance(value, pydantic.BaseModel) else value
            )
        return data


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


def _validate(source: Source, registry: Registry) -> Config:
    data = source.data
    walker = Walker(source, registry)
    if not isinstance(data, Mapping):
        walker.add((), f"expected a mapping with a 'model' section, got {describe(data)}.")
        raise ConfigError(walker.problems)
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
            close = suggest(key, [k for k in known if k not in data])
            walker.add(
                (key,),
                f"unknown section {key!r}.{close} Known sections: {', '.join(sorted(known))}.",
                at_key=True,
            )
    if "model" not in data:
        walker.add((), "missing the 'model' section describing the layers.")
        raise ConfigError(walker.problems)
    walker.prefer = dict(plugins.prefer) if plugins is not None else {}
    normalized = walker.node(data["model"], ("model",))
    if walker.problems or normalized is None:
        problems = sorted(
            walker.problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0)
        )
        raise ConfigError(problems)
    return Config(normalized, sections, walker.prefer, source.name)


def load_config(config: Any, *, registry: Registry | None = None) -> Config:
    """Read and validate a config: a YAML/JSON file path, or a mapping.

    Args:
        config: ``"model.yaml"``, ``"model.json"``, a `pathlib.Path`, or a dict with a ``model``
            section.
        registry: where layer names resolve; `default_registry()` when omitted.

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
    """
    if isinstance(config, Config):
        return config
    if not isinstance(config, (Mapping, str, os.PathLike, Source)):
        raise TypeError(
            f"load_config expects a file path or a mapping, got {type(config).__name__}."
        )
    return _validate(source_from(config), registry or default_registry())
