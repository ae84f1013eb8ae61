"""Reading a config from YAML, JSON or a mapping, remembering where every key and value was.

YAML is read event by event with PyYAML's safe parser (no recursion, no tags that construct
Python objects); every value counts toward the `Budget` of the read, so nesting, alias
expansion and size are bounded before anything grows. Duplicate keys and unsupported tags do
not stop the reader: they are collected in `Source.problems` and reported together with every
other problem of the config. Positions are 1-based ``(line, column)`` pairs.

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
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

import yaml
from yaml import events
from yaml.constructor import SafeConstructor

from ._errors import ConfigError, Problem
from ._limits import Budget, ConfigLimits

__all__ = [
    "Source",
    "read_source",
    "read_file",
    "source_from",
    "measure",
    "loader_class",
    "copy_data",
]

Path = tuple[Any, ...]
Position = tuple[int, int]
_YAML = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_YAML + t for t in ("null", "bool", "int", "float", "str", "timestamp")}
_COLLECTION_TAGS = {None, "!", _YAML + "map", _YAML + "seq"}
_MERGE_TAG = _YAML + "merge"


def loader_class(base: type) -> type:
    """``base`` (a PyYAML safe loader) reading ``1e-3`` and ``3E5`` as numbers, the way YAML
    1.2 and JSON do (YAML 1.1 needs a dot: ``1.0e-3``)."""
    loader = type(f"_Nnx{base.__name__}", (base,), {})
    loader.add_implicit_resolver(  # type: ignore[attr-defined]
        _YAML + "float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return loader


_LOADER = loader_class(getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # (libyaml: 20x faster)
_KEY = object()  # path element of a value being read as a mapping key
_MERGE = object()  # the ``<<`` merge key


@dataclasses.dataclass
class Source:
    """Parsed config data with the position of every value and key.

    Attributes:
        name: the file (``"<dict>"`` for a Python mapping).
        data: the plain data.
        values, keys: ``path -> (line, column)`` of each value and each mapping key.
        files: for a composed config, the file of the value at a path when it is not ``name``
            (an included file or an override); paths below inherit it.
        problems: what the reader found besides syntax errors (duplicate keys, tags), reported
            with the rest of the config's problems.
    """

    name: str
    data: Any
    values: dict[Path, Position] = dataclasses.field(default_factory=dict)
    keys: dict[Path, Position] = dataclasses.field(default_factory=dict)
    files: dict[Path, str] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)

    def _located(self, path: Path) -> Path | None:
        for end in range(len(path), -1, -1):
            if tuple(path[:end]) in self.values:
                return tuple(path[:end])
        return None

    def value_position(self, path: Path) -> Position | None:
        """Position of the value at ``path``, or of its nearest located ancestor."""
        found = self._located(path)
        return None if found is None else self.values[found]

    def key_position(self, path: Path) -> Position | None:
        """Position of the key that ends ``path`` (falls back to `value_position`)."""
        return self.keys.get(tuple(path)) or self.value_position(path)

    def file_of(self, path: Path) -> str:
        """The file the value at ``path`` (or its nearest located ancestor) was read from."""
        for end in range(len(path), -1, -1):
            found = self.files.get(tuple(path[:end]))
            if found is not None:
                return found
        return self.name

    def problem(self, path: Path, message: str, *, at_key: bool = False) -> Problem:
        """A `Problem` at ``path`` located in the file its value came from."""
        if at_key and tuple(path) in self.keys:
            line, column = self.keys[tuple(path)]
            return Problem(tuple(path), message, self.file_of(path), line, column)
        found = self._located(path)
        if found is None:
            return Problem(tuple(path), message, self.file_of(path))
        line, column = self.values[found]
        return Problem(tuple(path), message, self.file_of(found), line, column)


def _mark(event: Any) -> Position:
    return event.start_mark.line + 1, event.start_mark.column + 1


@dataclasses.dataclass
class _Frame:
    """A mapping or list being read."""

    path: Path
    data: Any
    anchor: str | None
    nodes_before: int
    start: Position = (1, 1)
    height: int = 1
    key: Any = _KEY
    merges: list[tuple[Any, Position]] = dataclasses.field(default_factory=list)

    def slot(self) -> Path:
        if isinstance(self.data, list):
            return (*self.path, len(self.data))
        return (*self.path, _KEY if self.key is _KEY else self.key)


class _Builder:
    """Builds plain data from the parser's events with an explicit stack (no recursion)."""

    def __init__(self, loader: yaml.SafeLoader, source: Source, budget: Budget):
        self.loader, self.source, self.budget = loader, source, budget
        self.anchors: dict[str, tuple[Any, int, int]] = {}

    def problem(self, path: Path, message: str, position: Position) -> None:
        self.source.problems.append(Problem(path, message, self.source.name, *position))

    def run(self) -> Any:
        stack: list[_Frame] = []
        while True:
            event = self.loader.get_event()
            if isinstance(event, events.CollectionEndEvent):
                frame = stack.pop()
                value, height, position = self._close(frame), frame.height, frame.start
                self._remember(frame.anchor, value, frame.nodes_before, height)
            else:
                path = stack[-1].slot() if stack else ()
                self.budget.check_depth(len(path), path, self.source.name, _mark(event))
                if isinstance(event, events.CollectionStartEvent):
                    stack.append(self._open(event, path))
                    continue
                if isinstance(event, events.AliasEvent):
                    value, height = self._alias(event, path)
                else:
                    before = self.budget.nodes
                    self.budget.add_nodes(1, path, self.source.name, _mark(event))
                    value, height = self._scalar(event, path), 0
                    self._remember(event.anchor, value, before, 0)
                position = _mark(event)
                if _KEY not in path:
                    self.source.values[path] = position
            if not stack:
                return value
            self._add(stack[-1], value, height, position)

    def _open(self, event: Any, path: Path) -> _Frame:
        before = self.budget.nodes
        self.budget.add_nodes(1, path, self.source.name, _mark(event))
        if _KEY not in path:
            self.source.values[path] = _mark(event)
        if event.tag not in _COLLECTION_TAGS:
            self.problem(
                path,
                f"unsupported YAML tag {event.tag!r}: configs hold plain data only.",
                _mark(event),
            )
        data: Any = {} if isinstance(event, events.MappingStartEvent) else []
        return _Frame(path, data, event.anchor, before, _mark(event))

    def _scalar(self, event: Any, path: Path) -> Any:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _MERGE_TAG and path and path[-1] is _KEY:
            return _MERGE
        if tag not in _SCALAR_TAGS:
            self.problem(
                path, f"unsupported YAML tag {tag!r}: configs hold plain data only.", _mark(event)
            )
            return None
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            return SafeConstructor.yaml_constructors[tag](self.loader, node)
        except (ValueError, yaml.YAMLError) as error:
            shown = event.value if len(event.value) <= 40 else event.value[:37] + "..."
            self.problem(
                path, f"cannot read {shown!r} as {tag[len(_YAML) :]}: {error}", _mark(event)
            )
            return None

    def _alias(self, event: Any, path: Path) -> tuple[Any, int]:
        if event.anchor not in self.anchors:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"found undefined alias {event.anchor!r} (an alias must come after the "
                "complete value of its anchor; an anchor cannot contain itself)",
                event.start_mark,
            )
        value, size, height = self.anchors[event.anchor]
        self.budget.add_nodes(size, path, self.source.name, _mark(event))
        self.budget.check_depth(len(path) + height, path, self.source.name, _mark(event))
        return copy_data(value), height

    def _remember(self, anchor: str | None, value: Any, before: int, height: int) -> None:
        if anchor is not None:
            self.anchors[anchor] = (value, self.budget.nodes - before, height)

    def _add(self, frame: _Frame, value: Any, height: int, position: Position) -> None:
        frame.height = max(frame.height, height + 1)
        if isinstance(frame.data, list):
            frame.data.append(value)
        elif frame.key is _KEY:
            if isinstance(value, (dict, list)):
                self.problem(frame.path, "a mapping key must be a string or a number.", position)
                value = str(value)
            elif value is not _MERGE and not isinstance(value, (str, int, float, bool)):
                value = None if value is None else str(value)
            frame.key = value
            if value is not _MERGE:
                if value in frame.data:
                    self.problem(
                        (*frame.path, value),
                        f"duplicate key {value!r}; only one may be given.",
                        position,
                    )
                self.source.keys[(*frame.path, value)] = position
        else:
            if frame.key is _MERGE:
                frame.merges.append((value, self.source.values[(*frame.path, _MERGE)]))
            else:
                frame.data[frame.key] = value
            frame.key = _KEY

    def _close(self, frame: _Frame) -> Any:
        """Finish a mapping: apply ``<<`` merge keys (explicit keys win, earlier sources win)."""
        data = frame.data
        for value, position in frame.merges:
            sources = value if isinstance(value, list) else [value]
            for item in sources:
                if not isinstance(item, dict):
                    self.problem(
                        frame.path, "a '<<' merge key takes a mapping or a list of them.", position
                    )
                    continue
                for key, item_value in item.items():
                    if key not in data:
                        data[key] = item_value
                        self.source.values.setdefault((*frame.path, key), position)
        return data


def copy_data(value: Any) -> Any:
    """A copy of plain data (bounded: its size was counted in the budget)."""
    if isinstance(value, dict):
        return {k: copy_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_data(v) for v in value]
    return value


def _syntax_problem(error: yaml.YAMLError, text: str, name: str) -> Problem:
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = f"{error.context + '; ' if error.context else ''}{error.problem}"
        return Problem((), f"invalid YAML: {what}", name, line, column)
    offset = getattr(error, "position", None)
    line = column = None
    if isinstance(offset, int):
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Problem((), f"invalid YAML: {str(error).splitlines()[0]}", name, line, column)


def _parse_yaml(text: str, source: Source, budget: Budget, reader: type | None = None) -> None:
    loader = None
    reader = reader or _LOADER
    counted = (budget.nodes, budget.text)
    try:
        loader = reader(text)
        loader.get_event()  # stream start
        if loader.check_event(events.StreamEndEvent):
            source.data = None
            return
        loader.get_event()  # document start
        source.data = _Builder(loader, source, budget).run()
        loader.get_event()  # document end
        if not loader.check_event(events.StreamEndEvent):
            raise yaml.composer.ComposerError(
                "expected a single document in the stream",
                None,
                "but found another document (a config is one document: remove '---')",
                loader.get_event().start_mark,
            )
    except yaml.YAMLError as error:
        deep = min(budget.limits.max_depth, _LIBYAML_SAFE_DEPTH)
        if reader is not _PURE_LOADER and _flow_depth(text) > deep:
            # libyaml (PyYAML >= 6.0.4) refuses flow nesting past 1,000 levels with its own
            # message before our builder sees it. The pure-Python reader has no such cap:
            # reading again with it enforces our limit, the one the user can set, located.
            budget.nodes, budget.text = counted
            source.values.clear(), source.keys.clear(), source.problems.clear()
            loader.dispose()
            loader = None
            _parse_yaml(text, source, budget, _PURE_LOADER)
            return
        raise ConfigError([_syntax_problem(error, text, source.name)]) from None
    finally:
        if loader is not None:
            loader.dispose()


_PURE_LOADER = loader_class(yaml.SafeLoader)
_LIBYAML_SAFE_DEPTH = 500  # below the nesting libyaml refuses on its own (1,000 since 6.0.4)
# Quoted scalars, comments and flow brackets: enough of YAML's lexis to measure flow nesting.
_YAML_FLOW_TOKEN = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"\\]|\\.)*\"|(?:^|(?<=\s))#[^\n]*|[\[\]{}]", re.M
)


def _flow_depth(text: str) -> int:
    """The deepest nesting of flow brackets in ``text`` (approximate: quotes and comments
    are skipped, brackets inside plain scalars are counted)."""
    depth = deepest = 0
    for match in _YAML_FLOW_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth = max(depth - 1, 0)
    return deepest


_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def _check_json_depth(text: str, source: Source, budget: Budget) -> None:
    """Refuse deep JSON before `json.loads` (whose recursion would crash on it)."""
    blanked = _JSON_STRING.sub(lambda m: '"' + " " * (len(m.group()) - 2) + '"', text)
    depth = 0
    for match in _JSON_BRACKET.finditer(blanked):
        depth += 1 if match.group() in "[{" else -1
        if depth > budget.limits.max_depth:
            offset = match.start()
            line = text.count("\n", 0, offset) + 1
            column = offset - (text.rfind("\n", 0, offset) + 1) + 1
            budget.check_depth(depth, (), source.name, (line, column))


class _Pairs(dict):  # type: ignore[type-arg]
    """A JSON object that remembers the keys given more than once."""

    duplicates: list[Any]


def _pairs(items: list[tuple[Any, Any]]) -> _Pairs:
    result = _Pairs(items)
    result.duplicates = []
    seen: set[Any] = set()
    for key, _ in items:
        if key in seen:
            result.duplicates.append(key)
        seen.add(key)
    return result


def _parse_json(text: str, source: Source, budget: Budget) -> None:
    _check_json_depth(text, source, budget)
    try:
        data = json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as error:
        problem = Problem((), f"invalid JSON: {error.msg}", source.name, error.lineno, error.colno)
        raise ConfigError([problem]) from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise ConfigError([Problem((), f"invalid JSON: {error}", source.name)]) from None
    duplicates: list[Path] = []
    source.data = measure(data, budget, source.name, duplicates=duplicates)
    try:  # JSON is YAML for our purposes; borrow the YAML positions when the parse agrees
        located = Source(source.name, None)
        _parse_yaml(text, located, Budget(budget.limits, source.name))
        if located.data == source.data:
            source.values, source.keys = located.values, located.keys
    except ConfigError:
        pass
    for path in duplicates:
        source.problems.append(
            source.problem(path, f"duplicate key {path[-1]!r}; only one may be given.", at_key=True)
        )


def measure(data: Any, budget: Budget, name: str, *, duplicates: list[Path] | None = None) -> Any:
    """Count the values of ``data`` against ``budget`` without recursion; return plain data.

    JSON objects that repeated a key add the key's path to ``duplicates``. A mapping that
    contains itself is refused by the depth limit.
    """
    stack: list[tuple[Any, Path, Any, Any]] = [(data, (), None, None)]
    root: list[Any] = [None]
    while stack:
        value, path, parent, key = stack.pop()
        budget.check_depth(len(path), path, name)
        budget.add_nodes(1, path, name)
        if isinstance(value, Mapping):
            if duplicates is not None:
                duplicates.extend((*path, k) for k in getattr(value, "duplicates", ()))
            copy: Any = {}
            stack.extend((v, (*path, k), copy, k) for k, v in reversed(list(value.items())))
        elif isinstance(value, (list, tuple)):
            copy = [None] * len(value)
            stack.extend((v, (*path, i), copy, i) for i, v in reversed(list(enumerate(value))))
        else:
            copy = value
        if parent is None:
            root[0] = copy
        else:
            parent[key] = copy
    return root[0]


def read_source(
    text: str, *, name: str = "<string>", syntax: str = "yaml", budget: Budget | None = None
) -> Source:
    """Parse ``text`` as ``syntax`` (``"yaml"`` or ``"json"``) into a located `Source`.

    Args:
        text: the config text.
        name: the file name used in locations.
        syntax: ``"yaml"`` or ``"json"``.
        budget: the limits to count against (``ConfigLimits.from_env()`` when omitted).

    Raises:
        ConfigError: the text is not valid YAML/JSON (with the position of the error), or it
            passes a limit of ``budget``.
    """
    budget = budget or Budget(ConfigLimits.from_env(), name)
    source = Source(name, None)
    (_parse_json if syntax == "json" else _parse_yaml)(text, source, budget)
    return source


def _read_bytes(path: str, budget: Budget) -> bytes:
    """The bytes of a regular file, refusing anything else and anything too large."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a directory"
                if stat.S_ISDIR(info.st_mode)
                else "a FIFO"
                if stat.S_ISFIFO(info.st_mode)
                else "a device or other special file"
            )
            raise ConfigError(
                [
                    Problem(
                        (),
                        f"not a regular file ({kind}); a config is a .yaml, .yml or .json file. "
                        "Nothing was read.",
                        path,
                    )
                ]
            )
        budget.add_bytes(info.st_size, path)
        chunks, total = [], 0
        limit = budget.limits.max_bytes - (budget.nbytes - info.st_size) + 1
        while total < limit:
            chunk = os.read(fd, min(1 << 16, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        budget.add_bytes(total - info.st_size, path)  # (a file that grew while being read)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file(path: str | os.PathLike[str], budget: Budget) -> Source:
    """Read the YAML (``.yaml``, ``.yml``) or JSON (``.json``) file ``path`` within ``budget``.

    Raises:
        ConfigError: the file is missing, not a regular file, too large, not UTF-8, or not
            valid YAML/JSON.
    """
    name = os.fspath(path)
    budget.add_file(name)
    try:
        raw = _read_bytes(name, budget)
        text = raw.decode("utf-8")
    except OSError as error:
        raise ConfigError([Problem((), f"cannot read the config: {error}", name)]) from None
    except UnicodeDecodeError as error:
        message = (
            f"cannot read the config: it is not UTF-8 text ({error.reason} at byte {error.start})."
        )
        raise ConfigError([Problem((), message, name)]) from None
    syntax = "json" if name.endswith(".json") else "yaml"
    return read_source(text, name=name, syntax=syntax, budget=budget)


def source_from(config: Any, budget: Budget | None = None) -> Source:
    """Return a `Source` for a path (``.yaml``, ``.yml``, ``.json``) or an in-memory mapping.

    Raises:
        ConfigError: the file cannot be read (see `read_file`), or a limit is passed.
    """
    if isinstance(config, Source):
        return config
    name = "<dict>" if isinstance(config, Mapping) else os.fspath(config)
    budget = budget or Budget(ConfigLimits.from_env(), name)
    if isinstance(config, Mapping):
        return Source(name, measure(config, budget, name))
    return read_file(config, budget)
