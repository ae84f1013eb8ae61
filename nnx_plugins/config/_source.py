"""Reading a config from YAML, JSON or a mapping, remembering where every key and value was.

YAML is read with PyYAML's safe loader (no tags that construct Python objects). Positions are
1-based ``(line, column)`` pairs.

Example:
    >>> from nnx_plugins.config._source import read_source
    >>> src = read_source("model:\\n  type: Linear\\n  in_features: 2\\n", name="m.yaml")
    >>> src.data
    {'model': {'type': 'Linear', 'in_features': 2}}
    >>> src.value_position(("model", "in_features"))
    (3, 16)
    >>> src.key_position(("model", "in_features"))
    (3, 3)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import yaml

from ._errors import ConfigError, Problem

__all__ = ["Source", "read_source", "source_from"]

Path = tuple[Any, ...]
Position = tuple[int, int]
_MAX_DEPTH = 200
_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


@dataclasses.dataclass
class Source:
    """Parsed config data with the position of every value and key."""

    name: str
    data: Any
    values: dict[Path, Position] = dataclasses.field(default_factory=dict)
    keys: dict[Path, Position] = dataclasses.field(default_factory=dict)

    def value_position(self, path: Path) -> Position | None:
        """Position of the value at ``path``, or of its nearest located ancestor."""
        for end in range(len(path), -1, -1):
            found = self.values.get(tuple(path[:end]))
            if found is not None:
                return found
        return None

    def key_position(self, path: Path) -> Position | None:
        """Position of the key that ends ``path`` (falls back to `value_position`)."""
        return self.keys.get(tuple(path)) or self.value_position(path)

    def problem(self, path: Path, message: str, *, at_key: bool = False) -> Problem:
        """A `Problem` at ``path`` located in this source."""
        position = self.key_position(path) if at_key else self.value_position(path)
        line, column = position if position else (None, None)
        return Problem(tuple(path), message, self.name, line, column)


def _mark(node: yaml.Node) -> Position:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Builder:
    """Builds plain data from a composed YAML node tree, recording positions."""

    def __init__(self, loader: yaml.SafeLoader, source: Source):
        self.loader, self.source = loader, source
        self.duplicates: list[Problem] = []

    def build(self, node: yaml.Node, path: Path) -> Any:
        if len(path) > _MAX_DEPTH:
            raise ConfigError([self.source.problem(path, "the config is nested too deeply.")])
        self.source.values[path] = _mark(node)
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
            raise ConfigError(
                [
                    self.source.problem(
                        path, f"unsupported YAML tag {node.tag!r}: configs hold plain data only."
                    )
                ]
            )
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.loader.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    key = str(key)
                if key in result:
                    self.source.keys[(*path, key)] = _mark(key_node)
                    self.duplicates.append(
                        self.source.problem(
                            (*path, key),
                            f"duplicate key {key!r}; only one may be given.",
                            at_key=True,
                        )
                    )
                self.source.keys[(*path, key)] = _mark(key_node)
                result[key] = self.build(value_node, (*path, key))
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node, deep=True)


def _parse_yaml(text: str, source: Source) -> None:
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        builder = _Builder(loader, source)
        source.data = None if node is None else builder.build(node, ())
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = f"{error.context + '; ' if error.context else ''}{error.problem}"
        raise ConfigError(
            [Problem((), f"invalid YAML: {what}", source.name, line, column)]
        ) from None
    except yaml.YAMLError as error:
        problem = str(error).split("\n")[0]
        offset = getattr(error, "position", None)
        line = column = None
        if isinstance(offset, int):
            line = text.count("\n", 0, offset) + 1
            column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise ConfigError(
            [Problem((), f"invalid YAML: {problem}", source.name, line, column)]
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    if builder.duplicates:
        raise ConfigError(builder.duplicates)


def _parse_json(text: str, source: Source) -> None:
    try:
        source.data = json.loads(text)
    except json.JSONDecodeError as error:
        problem = Problem((), f"invalid JSON: {error.msg}", source.name, error.lineno, error.colno)
        raise ConfigError([problem]) from None
    try:  # JSON is YAML for our purposes; borrow the YAML positions when the parse agrees
        located = Source(source.name, None)
        _parse_yaml(text, located)
        if located.data == source.data:
            source.values, source.keys = located.values, located.keys
    except ConfigError:
        pass


def read_source(text: str, *, name: str = "<string>", syntax: str = "yaml") -> Source:
    """Parse ``text`` as ``syntax`` (``"yaml"`` or ``"json"``) into a located `Source`.

    Raises:
        ConfigError: the text is not valid YAML/JSON (with the position of the error).
    """
    source = Source(name, None)
    (_parse_json if syntax == "json" else _parse_yaml)(text, source)
    return source


def source_from(config: Any) -> Source:
    """Return a `Source` for a path (``.yaml``, ``.yml``, ``.json``) or an in-memory mapping.

    Raises:
        ConfigError: the file is missing, unreadable or not valid YAML/JSON.
    """
    if isinstance(config, Source):
        return config
    if isinstance(config, Mapping):
        return Source("<dict>", config)
    name = str(config)
    try:
        with open(config, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([Problem((), f"cannot read the config: {error}", name)]) from None
    return read_source(text, name=name, syntax="json" if name.endswith(".json") else "yaml")
