"""Composing a config: ``include:`` files merged under it, then ``KEY=VALUE`` overrides.

A top-level ``include: [base.yaml, ...]`` names files relative to the including file (for a
Python mapping, to the current directory). They are read (with their own includes) and merged
in order, then the including file on top: mappings are merged key by key, anything else (lists
included) is replaced. Every value keeps the file and ``line:col`` it came from, so a problem
anywhere is reported where it was written. Overrides then set values by path; an override is
located at the argument itself (``<override train.epochs=5>:1:7``).

Example:
    >>> import pathlib, tempfile
    >>> from nnx_plugins.config._compose import compose
    >>> from nnx_plugins.config._limits import Budget, ConfigLimits
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "base.yaml").write_text("train: {epochs: 3, batch_size: 32}\\n")
    >>> _ = (folder / "run.yaml").write_text("include: [base.yaml]\\ntrain: {epochs: 5}\\n")
    >>> source = compose(folder / "run.yaml", ["train.batch_size=64"], Budget(ConfigLimits(), "run"))
    >>> source.data
    {'train': {'epochs': 5, 'batch_size': 64}}
    >>> source.problem(("train", "batch_size"), "x").location
    '<override train.batch_size=64>:1:18'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .._text import content_kind, format_path
from ._errors import ConfigError, Problem
from ._limits import Budget
from ._paths import PathSyntaxError, path_prefix
from ._source import Path, Source, read_source, source_from

__all__ = ["compose", "merge", "apply_override", "INCLUDE"]

INCLUDE = "include"
_SUFFIXES = (".yaml", ".yml", ".json")


def _walk(value: Any, path: Path) -> Any:
    """Every path inside ``value`` (``path`` first), without recursion."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        yield where
        if isinstance(item, dict):
            stack.extend((v, (*where, k)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(item))


def _take(source: Source, value: Any, path: Path, out: Source, *, subtree: bool = True) -> None:
    """Copy the positions (and files) of ``path`` (and below, with ``subtree``) to ``out``."""
    paths = _walk(value, path) if subtree else [path]
    for where in paths:
        located = where in source.values
        if located:
            out.values[where] = source.values[where]
        if where in source.keys:
            out.keys[where] = source.keys[where]
        if located or where == path:
            name = source.file_of(where)
            if name != out.name:
                out.files[where] = name
            else:
                out.files.pop(where, None)


def merge(base: Source, top: Source) -> Source:
    """``top`` merged onto ``base``: mappings key by key, anything else replaced by ``top``.

    Example:
        >>> from nnx_plugins.config._compose import merge
        >>> from nnx_plugins.config._source import Source
        >>> merge(Source("a", {"m": {"x": 1, "y": [1, 2]}}),
        ...       Source("b", {"m": {"y": [3]}, "n": 0})).data
        {'m': {'x': 1, 'y': [3]}, 'n': 0}
    """
    out = Source(top.name, None, problems=[*base.problems, *top.problems])

    def combine(low: Any, high: Any, path: Path) -> Any:
        if not (isinstance(low, dict) and isinstance(high, dict)):
            _take(top, high, path, out)
            return high
        _take(top, high, path, out, subtree=False)
        result = {}
        for key, value in low.items():
            if key in high:
                if (*path, key) in top.keys:
                    out.keys[(*path, key)] = top.keys[(*path, key)]
                result[key] = combine(value, high[key], (*path, key))
            else:
                _take(base, value, (*path, key), out)
                result[key] = value
        for key, value in high.items():
            if key not in low:
                _take(top, value, (*path, key), out)
                result[key] = value
        return result

    out.data = combine(base.data, top.data, ())
    return out


def _include_names(source: Source, entries: Any) -> list[tuple[Path, str]]:
    """The files an ``include`` entry names, with their paths; bad entries raise."""
    where: Path = (INCLUDE,)
    items = [(where, entries)] if isinstance(entries, str) else None
    if isinstance(entries, list):
        items = [((INCLUDE, i), item) for i, item in enumerate(entries)]
    if items is None:
        raise ConfigError(
            [
                source.problem(
                    where,
                    f"'include' takes a list of file names, got {type(entries).__name__} "
                    f"{entries!r:.60}.",
                )
            ]
        )
    problems = [
        source.problem(
            path,
            f"an include names a .yaml, .yml or .json file (relative to this file), got "
            f"{type(name).__name__} {name!r:.60}.",
        )
        for path, name in items
        if not (isinstance(name, str) and name.strip() and name.endswith(_SUFFIXES))
    ]
    if problems:
        raise ConfigError(problems)
    return items


@dataclasses.dataclass
class _Reading:
    """A file whose includes are being read: the next include to read, what is merged so far."""

    source: Source
    items: list[tuple[Path, str]]
    chain: tuple[tuple[str, str], ...]
    merged: Source | None = None
    problems: list[Problem] = dataclasses.field(default_factory=list)
    done: int = 0


def _open(config: Any, budget: Budget, chain: tuple[tuple[str, str], ...]) -> _Reading:
    """Read ``config`` and the names it includes."""
    source = source_from(config, budget)
    data = source.data
    items = []
    if isinstance(data, dict) and INCLUDE in data:
        items = _include_names(source, data.pop(INCLUDE))
    return _Reading(source, items, chain)


def _next_include(reading: _Reading) -> tuple[Path, str, str] | None:
    """The next include of ``reading`` to read: ``(path, target, identity)``; problems with
    an include (a cycle, a missing file) are added to ``reading.problems`` and skipped."""
    folder = os.path.dirname(reading.source.name) if reading.source.name != "<dict>" else "."
    while reading.done < len(reading.items):
        path, name = reading.items[reading.done]
        reading.done += 1
        target = os.path.normpath(os.path.join(folder, name))
        identity = os.path.realpath(target)
        known = [identity for identity, _ in reading.chain]
        if identity in known:
            names = [shown for _, shown in reading.chain]
            cycle = " -> ".join([*names[known.index(identity) :], target])
            reading.problems.append(
                reading.source.problem(
                    path,
                    f"include cycle: {cycle}. A file cannot include itself, directly or "
                    "through the files it includes.",
                )
            )
        elif not os.path.exists(target):
            reading.problems.append(
                reading.source.problem(path, f"cannot include {name!r}: there is no file {target}.")
            )
        else:
            return path, target, identity
    return None


def _finish(reading: _Reading) -> Source:
    """The file of ``reading`` merged onto its includes; its problems raised."""
    if reading.problems:
        raise ConfigError([*reading.source.problems, *reading.problems])
    return reading.source if reading.merged is None else merge(reading.merged, reading.source)


def _add_included(parent: _Reading, path: Path, included: Source) -> None:
    data = included.data
    if data is None and not included.problems:  # (an empty file adds nothing)
        return
    if not isinstance(data, dict):  # (not a config: said by its type and size, never quoted)
        parent.problems.append(
            parent.source.problem(
                path,
                f"cannot include {_file_named(included.name)}: it holds {held(data, included)}, "
                "not a mapping of sections. An included file is merged key by key under this "
                "one; nothing of it was used.",
            )
        )
        return
    parent.merged = included if parent.merged is None else merge(parent.merged, included)


def held(data: Any, source: Source) -> str:
    """What a file that is not a config holds, by type and size only (never its content: it
    may be a file the config was not meant to read, e.g. a link to /etc/passwd)."""
    try:
        size = f" in {os.path.getsize(source.name):,} bytes"
    except (OSError, ValueError):
        size = ""
    if data is None:
        return (
            f"one value that cannot be read{size}" if source.problems else "nothing (it is empty)"
        )
    return f"{content_kind(data)}{size}"


def _file_named(name: str) -> str:
    """``name``, and where it leads when it is a symbolic link."""
    try:
        real = os.path.realpath(name)
    except (OSError, ValueError):
        return name
    return f"{name} (a link to {real})" if os.path.islink(name) else name


def _too_many_files(
    source: Source, path: Path, chain: tuple[tuple[str, str], ...], budget: Budget
) -> None:
    """Refuse one more file, naming the include chain, at the include entry ``path``."""
    names = [name for _, name in chain]
    shown = " -> ".join(names if len(names) <= 6 else [*names[:3], "...", *names[-2:]])
    where = source.problem(path, "")
    budget.fail(
        "max_files",
        "the config reads more than {limit} files (itself and its includes); the include "
        f"chain here is {len(names)} files long: {shown}.",
        source=where.source,
        path=path,
        position=(where.line, where.column) if where.line is not None else None,
    )


def _with_includes(config: Any, budget: Budget, chain: tuple[tuple[str, str], ...]) -> Source:
    """Read ``config`` and merge the files it includes under it (depth first, no recursion,
    so a chain of includes is bounded by ``max_files`` alone)."""
    stack = [_open(config, budget, chain)]
    reading_path: list[Path] = []  # (for each reading but the first: its include entry)
    while True:
        top = stack[-1]
        found = _next_include(top)
        if found is not None:
            path, target, identity = found
            chain = (*top.chain, (identity, target))
            if budget.files >= budget.limits.max_files:  # (a limit stops the read at once)
                _too_many_files(top.source, path, chain, budget)
            try:
                stack.append(_open(target, budget, chain))
                reading_path.append(path)
            except ConfigError as error:
                top.problems.extend(error.problems)
            continue
        stack.pop()
        if not stack:
            return _finish(top)
        path = reading_path.pop()
        try:
            _add_included(stack[-1], path, _finish(top))
        except ConfigError as error:
            stack[-1].problems.extend(error.problems)


def _shifted(value: Source, offset: int, name: str, path: Path) -> Source:
    """The override value's positions moved to its place in the argument and the config."""

    def move(position: tuple[int, int]) -> tuple[int, int]:
        line, column = position
        return (line, column + offset) if line == 1 else position

    out = Source(name, value.data)
    out.values = {(*path, *p): move(pos) for p, pos in value.values.items()}
    out.keys = {(*path, *p): move(pos) for p, pos in value.keys.items()}
    out.problems = [
        Problem((*path, *p.path), p.message, name, p.line, p.column + offset)
        if p.line == 1 and p.column is not None
        else Problem((*path, *p.path), p.message, name, p.line, p.column)
        for p in value.problems
    ]
    return out


def _step(container: Any, key: Any, where: Path, fail: Any) -> Any:
    """The key (or list index) ``key`` resolves to in ``container``, or a call to ``fail``."""
    if isinstance(container, list):
        if not isinstance(key, int) or isinstance(key, bool):
            fail(f"{format_path(where)} is a list: select an item with [index], got {key!r}.")
        if not -len(container) <= key < len(container):
            fail(
                f"index {key} is out of range: {format_path(where)} has {len(container)} "
                f"item{'s' if len(container) != 1 else ''}."
            )
        return key % len(container)
    if not isinstance(container, dict):
        fail(
            f"cannot set a key inside {format_path(where)}: it holds "
            f"{type(container).__name__} {container!r:.40}, not a mapping."
        )
    return key


def apply_override(source: Source, text: str, budget: Budget) -> Source:
    """Set the value of one ``KEY=VALUE`` override in ``source`` (in place; returned).

    A missing mapping along the path is created; the key's validity is checked with the rest
    of the config (an unknown key is reported at the argument with a "did you mean").

    Raises:
        ConfigError: the argument is not ``KEY=VALUE``, an index is out of range, the path
            runs through a value that is not a mapping or a list, or the value is not YAML.
    """
    name = f"<override {text if len(text) <= 60 else text[:57] + '...'}>"
    budget.add_bytes(len(text.encode("utf-8")), name)

    def fail(message: str, column: int = 1, path: Path = ()) -> None:
        raise ConfigError([Problem(path, message, name, 1, column)])

    try:
        keys, columns, end = path_prefix(text, max_keys=budget.limits.max_depth)
    except PathSyntaxError as error:
        fail(f"{error}; write KEY=VALUE, e.g. train.epochs=5.", error.column)
    if len(keys) > budget.limits.max_depth:  # (a key path nests as deep as its keys)
        budget.check_depth(len(keys), keys, name, (1, columns[budget.limits.max_depth]))
    if end >= len(text) or text[end] != "=":
        fail(
            f"expected '=' after the key {text[:end]!r}; write KEY=VALUE, "
            "e.g. model.layers[1].out_features=64.",
            end + 1,
        )
    if keys[0] == INCLUDE:
        fail(
            "'include' is read from config files only: an override cannot add files. Write "
            "the include in a file, or set the values themselves with KEY=VALUE."
        )
    try:
        parsed = read_source(text[end + 1 :], name=name, budget=budget)
    except ConfigError as error:  # (its position, moved to the value's place in the argument)
        if "\n" not in text:  # (an error at the end of the value: at the end of the argument)
            error.problems = tuple(
                dataclasses.replace(p, line=1, column=len(text) - end) if (p.line or 1) > 1 else p
                for p in error.problems
            )
        raise ConfigError(
            _shifted(
                Source(name, None, problems=list(error.problems)), end + 1, name, keys
            ).problems
        ) from None
    value = _shifted(parsed, end + 1, name, keys)
    if source.data is None:
        source.data = {}
    container, where = source.data, ()
    for depth, key in enumerate(keys):
        at = columns[depth]
        step = _step(container, key, where, lambda m, at=at, w=where: fail(m, at, w))
        where = (*where, step if isinstance(container, list) else key)
        if depth == len(keys) - 1:
            break
        if isinstance(container, dict) and key not in container:  # (validation checks it)
            container[key] = {}
            source.values[where] = source.keys[where] = (1, at)
            source.files[where] = name
        container = container[step]
    for old in [p for p in source.values if p[: len(where)] == where]:
        del source.values[old]
    for old in [p for p in source.keys if p[: len(where)] == where and p != where]:
        del source.keys[old]
    for old in [p for p in source.files if p[: len(where)] == where]:
        del source.files[old]
    container[where[-1]] = value.data
    source.values.update({(*where, *p[len(keys) :]): pos for p, pos in value.values.items()})
    source.keys.update({(*where, *p[len(keys) :]): pos for p, pos in value.keys.items()})
    source.values.setdefault(where, (1, end + 2))
    if isinstance(container, dict):
        source.keys[where] = (1, columns[-1])
    source.files[where] = name
    source.problems.extend(value.problems)
    return source


def compose(config: Any, overrides: Sequence[str], budget: Budget) -> Source:
    """Read ``config`` (a path or a mapping) with its includes, then apply ``overrides``.

    Args:
        config: a file path or a mapping.
        overrides: ``KEY=VALUE`` texts, applied in order (a later one wins).
        budget: the limits every file and override counts against.

    Raises:
        ConfigError: a file cannot be read or included (located at the ``include`` entry), an
            include cycle (naming the chain), bad overrides (every one), or a passed limit.
    """
    if isinstance(config, Source):
        source = config
    else:
        source = _with_includes(config, budget, _root_chain(config))
    problems: list[Problem] = []
    for text in overrides:
        try:
            source = apply_override(source, text, budget)
        except ConfigError as error:
            problems.extend(error.problems)
    if problems:
        raise ConfigError(problems)
    return source


def _root_chain(config: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(config, Mapping):
        return ()
    path = os.fspath(config)
    return ((os.path.realpath(path), path),)
