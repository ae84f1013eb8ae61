"""flax.nnx's ``graph`` module path (``from flax.nnx import graph``): the graph API by its names.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_core import graph
    >>> graphdef, flat = graph.flatten({"w": jnp.ones(2)})
    >>> [(path, x.shape) for path, x in flat], type(graph.unflatten(graphdef, flat)).__name__
    ([(('w',), (2,))], 'dict')
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from ._api import clone, graphdef, iter_graph, merge, pop, split, state, update
from ._graph import GraphDef
from ._graph_tools import find_duplicates, recursive_map
from ._state import State

Key = Hashable
PathParts = tuple[Key, ...]


def flatten(
    node: Any, /, *, graph: bool | None = None
) -> tuple[GraphDef, list[tuple[PathParts, Any]]]:
    """The GraphDef of ``node`` and its leaves as ``(path, leaf)`` pairs."""
    g, s = split(node)
    return g, s.flat_state()


def unflatten(
    graphdef: GraphDef, state: Mapping[Any, Any] | Iterable[tuple[PathParts, Any]], /
) -> Any:
    """The graph of ``graphdef`` with the leaves of ``state`` (a State or ``(path, leaf)`` pairs)."""
    return merge(graphdef, state if isinstance(state, Mapping) else State.from_flat_state(state))


__all__ = [
    "GraphDef",
    "Key",
    "PathParts",
    "clone",
    "find_duplicates",
    "flatten",
    "graphdef",
    "iter_graph",
    "merge",
    "pop",
    "recursive_map",
    "split",
    "state",
    "unflatten",
    "update",
]
