"""``${dotted.path}`` interpolation in a composed config.

A string that is exactly ``${path}`` takes the referenced value with its type (a number, a
list, a whole layer node); ``${path}`` inside a longer string puts the referenced value's text
there (numbers, strings, ``true``/``false``/``null``; a mapping or list cannot be part of a
text). Paths use the override grammar (``${model.layers[0].out_features}``) and name values
written in the config (its files and overrides), not defaults. ``\\${`` stands for a literal
``${``. Only config paths resolve: there are no resolvers, so a config never reads the
environment. Interpolated copies count toward the read's limits.

Example:
    >>> from nnx_plugins.config._interpolate import interpolate
    >>> from nnx_plugins.config._limits import Budget, ConfigLimits
    >>> from nnx_plugins.config._source import Source
    >>> source = Source("m.yaml", {"width": 64, "model": {"out_features": "${width}",
    ...                            "name": "mlp-${width}", "price": "\\\\${5}"}})
    >>> interpolate(source, Budget(ConfigLimits(), "m.yaml"))  # (the paths that failed)
    frozenset()
    >>> source.data["model"]
    {'out_features': 64, 'name': 'mlp-64', 'price': '${5}'}
"""

from __future__ import annotations

import re
from typing import Any

from .._text import format_path, suggest
from ._errors import Problem
from ._limits import Budget
from ._paths import PathSyntaxError, parse_path
from ._source import Path, Source, copy_data

__all__ = ["interpolate", "escape"]

_PIECE = re.compile(r"\\\$\{|\$\{([^{}]*)\}|\$\{")
_WHOLE = re.compile(r"\$\{([^{}]*)\}\Z")


def escape(text: str) -> str:
    """``text`` with every ``${`` written ``\\${``, so that reading it back gives ``text``.

    Example:
        >>> from nnx_plugins.config._interpolate import escape
        >>> print(escape("cost: ${5}"))
        cost: \\${5}
    """
    return text.replace("${", "\\${")


class _Unresolved(Exception):
    """A reference to a value whose own interpolation failed (already reported there)."""


class _Failure(Exception):
    """An interpolation problem at ``path`` (turned into a located `Problem`)."""

    def __init__(self, path: Path, message: str):
        super().__init__(message)
        self.path, self.message = path, message


def _scalar_text(value: Any, reference: str, path: Path) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (str, int, float)):
        return str(value)
    raise _Failure(
        path,
        f"'${{{reference}}}' is {type(value).__name__} {value!r:.40}; only a number, string, "
        "bool or null can be part of a longer string. Make the string exactly "
        f"'${{{reference}}}' to take the value itself.",
    )


def _count(value: Any) -> tuple[int, int]:
    """The values in ``value`` and the characters of its strings (what a copy adds)."""
    stack, count, characters = [value], 0, 0
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            characters += len(item)
    return count, characters


class _Resolver:
    """Resolves every interpolation of one `Source`, in place, detecting cycles."""

    def __init__(self, source: Source, budget: Budget):
        self.source, self.budget = source, budget
        self.done: set[Path] = set()
        self.failed: set[Path] = set()
        self.active: list[Path] = []

    def get(self, path: Path) -> Any:
        value = self.source.data
        for key in path:
            value = value[key]
        return value

    def set(self, path: Path, value: Any) -> None:
        if not path:
            self.source.data = value
            return
        self.get(path[:-1])[path[-1]] = value

    def pending(self, path: Path) -> bool:
        value = self.get(path)
        return isinstance(value, str) and "${" in value and path not in self.done

    def resolve(self, path: Path) -> None:
        """Replace the string at ``path`` by its interpolated value."""
        if path in self.active:
            chain = [format_path(p) for p in self.active[self.active.index(path) :]]
            raise _Failure(
                path,
                f"interpolation cycle: {' -> '.join([*chain, format_path(path)])}. A value "
                "cannot refer to itself, directly or through others.",
            )
        self.active.append(path)
        where = (self.source.file_of(path), self.source.value_position(path))
        self.budget.check_depth(len(self.active), path, *where)
        try:
            text = self.get(path)
            whole = _WHOLE.match(text)
            if whole is not None:
                found = self.lookup(whole.group(1), path)
                count, characters = _count(found)
                self.budget.add_nodes(count, path, *where)
                self.budget.add_text(characters, path, *where)
                value = copy_data(found)
            else:
                value = self.expand(text, path, where)
            self.set(path, value)
        finally:
            self.active.pop()
        self.done.add(path)

    def expand(self, text: str, path: Path, where: Any) -> str:
        """``text`` with each ``${...}`` replaced, refused as soon as the output passes the
        read's text budget (never built first and measured after)."""
        parts, size, last = [], 0, 0
        for match in _PIECE.finditer(text):
            piece = self.piece(match, path)
            parts += (text[last : match.start()], piece)
            size += match.start() - last + len(piece)
            last = match.end()
            if self.budget.text + size > self.budget.limits.max_bytes:
                self.budget.add_text(size, path, *where)  # (raises)
        parts.append(text[last:])
        self.budget.add_text(size + len(text) - last, path, *where)
        return "".join(parts)

    def piece(self, match: re.Match[str], path: Path) -> str:
        if match.group() == "\\${":
            return "${"
        if match.group(1) is None:
            raise _Failure(
                path,
                "'${' without a closing '}' (or with a nested '${'); write ${dotted.path}, "
                "or \\${ for a literal '${'.",
            )
        return _scalar_text(self.lookup(match.group(1), path), match.group(1), path)

    def lookup(self, reference: str, origin: Path) -> Any:
        """The fully resolved value ``${reference}`` names (seen from ``origin``)."""
        try:
            target = parse_path(reference.strip())
        except PathSyntaxError as error:
            hint = (
                " Resolvers such as oc.env are not supported: a config does not read the "
                "environment; pass values as KEY=VALUE overrides instead."
                if ":" in reference
                else ""
            )
            raise _Failure(
                origin, f"'${{{reference}}}' is not a config path: {error}.{hint}"
            ) from None
        where: Path = ()
        value = self.source.data
        for key in target:
            if self.pending(where):
                self.resolve(where)
                value = self.get(where)
            if isinstance(value, dict) and key in value:
                where = (*where, key)
            elif (
                isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value)
            ):
                where = (*where, key % len(value))
            else:
                raise _Failure(origin, self.unknown(reference, where, value, key))
            value = value[where[-1]]
        self.resolve_within(where, origin)
        if any(f[: len(where)] == where or where[: len(f)] == f for f in self.failed):
            raise _Unresolved(origin)
        return self.get(where)

    def unknown(self, reference: str, where: Path, value: Any, key: Any) -> str:
        head = f"'${{{reference}}}' names no value of the config"
        if isinstance(value, dict):
            known = [k for k in value if isinstance(k, str)]
            inside = format_path(where) if where else "the top level"
            return (
                f"{head}: {inside} has no key {key!r}.{suggest(key, known)} Only values "
                "written in the config (its files and overrides) can be referenced, not defaults."
            )
        if isinstance(value, list):
            count = f"{len(value)} item{'s' if len(value) != 1 else ''}"
            return f"{head}: {format_path(where)} has {count}, no index {key!r}."
        return f"{head}: {format_path(where)} is {type(value).__name__} {value!r:.40}."

    def resolve_within(self, where: Path, origin: Path) -> None:
        """Resolve every interpolation in the value at ``where`` (refusing a cycle)."""
        for active in self.active:
            if active[: len(where)] == where:
                chain = [format_path(p) for p in self.active[self.active.index(active) :]]
                raise _Failure(
                    origin,
                    f"interpolation cycle: {' -> '.join([*chain, format_path(where)])}. A value "
                    "cannot refer to itself, directly or through others.",
                )
        for path in list(_strings(self.get(where), where)):
            if self.pending(path):
                self.resolve(path)


def _strings(value: Any, path: Path) -> Any:
    """The paths of the strings holding ``${`` in ``value``, without recursion."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if "${" in item:
                yield where
        elif isinstance(item, dict):
            stack.extend((v, (*where, k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((v, (*where, i)) for i, v in reversed(list(enumerate(item))))


def interpolate(source: Source, budget: Budget) -> frozenset[Path]:
    """Resolve every ``${...}`` of ``source`` in place.

    An unknown path, a cycle or a malformed interpolation is added to ``source.problems``,
    located at the string that holds it, and that string is left as it is.

    Returns:
        The paths whose interpolation failed (validation's remarks on them add nothing).

    Raises:
        ConfigError: a limit is passed (interpolated copies count toward the read's limits).
    """
    resolver = _Resolver(source, budget)
    problems: dict[Path, Problem] = {}
    for path in list(_strings(source.data, ())):
        try:
            if resolver.pending(path):
                resolver.resolve(path)
        except _Failure as failure:  # (reported once, where the bad reference is written)
            resolver.active.clear()
            resolver.done.update((path, failure.path))
            resolver.failed.update((path, failure.path))
            problems.setdefault(failure.path, source.problem(failure.path, failure.message))
        except _Unresolved:
            resolver.active.clear()
            resolver.done.add(path)
            resolver.failed.add(path)
    source.problems.extend(problems.values())
    return frozenset(resolver.failed)
