"""flax.nnx's ``traversals`` module path: nested mappings to flat ``{path: leaf}`` dicts and back.

Example:
    >>> from nnx_core import traversals
    >>> flat = traversals.flatten_mapping({"a": {"w": 1, "b": 2}, "c": 3})
    >>> flat
    {('a', 'w'): 1, ('a', 'b'): 2, ('c',): 3}
    >>> traversals.unflatten_mapping(flat) == {"a": {"w": 1, "b": 2}, "c": 3}
    True
    >>> traversals.flatten_mapping({"a": {"w": 1}}, sep="/")
    {'a/w': 1}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


class _EmptyNode:
    """Stands for an empty mapping in a flat dict (``keep_empty_nodes=True``)."""

    def __repr__(self) -> str:
        return "empty_node"


empty_node = _EmptyNode()


def flatten_to_sequence(
    xs: Mapping[Any, Any],
    /,
    *,
    is_leaf: Callable[[tuple[Any, ...], Any], bool] | None = None,
) -> list[tuple[tuple[Any, ...], Any]]:
    """``(path, leaf)`` pairs of a nested mapping, in its order (empty mappings left out).

    Raises:
        TypeError: ``xs`` is not a mapping.
    """
    if not isinstance(xs, Mapping):
        raise TypeError(
            f"flatten_to_sequence expects a mapping (a dict or a State), got {type(xs).__name__}."
        )
    return [(p, v) for p, v in _walk(xs, (), is_leaf, keep_empty=False)]


def _walk(
    xs: Mapping[Any, Any],
    prefix: tuple[Any, ...],
    is_leaf: Callable[[tuple[Any, ...], Any], bool] | None,
    *,
    keep_empty: bool,
) -> Any:
    for key, value in xs.items():
        path = (*prefix, key)
        if isinstance(value, Mapping) and not (is_leaf is not None and is_leaf(path, value)):
            if not value:
                if keep_empty:
                    yield path, empty_node
                continue
            yield from _walk(value, path, is_leaf, keep_empty=keep_empty)
        else:
            yield path, value


def flatten_mapping(
    xs: Mapping[Any, Any],
    /,
    *,
    keep_empty_nodes: bool = False,
    is_leaf: Callable[[tuple[Any, ...], Any], bool] | None = None,
    sep: str | None = None,
) -> dict[Any, Any]:
    """A nested mapping as ``{path: leaf}``: paths are tuples of keys, or the keys joined by
    ``sep``; ``is_leaf(path, value)`` stops the descent; empty mappings are dropped unless
    ``keep_empty_nodes`` (then they map to :data:`empty_node`).

    Raises:
        TypeError: ``xs`` is not a mapping.
    """
    if not isinstance(xs, Mapping):
        raise TypeError(
            f"flatten_mapping expects a mapping (a dict or a State), got {type(xs).__name__}."
        )
    pairs = _walk(xs, (), is_leaf, keep_empty=keep_empty_nodes)
    if sep is None:
        return dict(pairs)
    return {sep.join(str(k) for k in path): value for path, value in pairs}


def unflatten_mapping(xs: Mapping[Any, Any], /, *, sep: str | None = None) -> dict[Any, Any]:
    """The nested dict of a flat ``{path: leaf}`` mapping (paths are tuples, or strings split
    at ``sep``); :data:`empty_node` leaves become empty dicts.

    Raises:
        ValueError: a path is not a tuple (without ``sep``), or one path runs through another's
            leaf.
    """
    out: dict[Any, Any] = {}
    for path, value in xs.items():
        if sep is not None:
            path = tuple(path.split(sep))
        if not isinstance(path, tuple):
            raise ValueError(
                f"unflatten_mapping: the key {path!r} is not a tuple path; give tuple keys, or "
                "sep= for string keys."
            )
        cursor = out
        for i, key in enumerate(path[:-1]):
            cursor = cursor.setdefault(key, {})
            if not isinstance(cursor, dict):
                raise ValueError(
                    f"unflatten_mapping: the path {path!r} runs through the leaf at "
                    f"{path[: i + 1]!r}; a path cannot both be a leaf and hold others."
                )
        cursor[path[-1]] = {} if value is empty_node else value
    return out


__all__ = ["empty_node", "flatten_mapping", "flatten_to_sequence", "unflatten_mapping"]
