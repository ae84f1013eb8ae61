"""Per-leaf specs for the mapping transforms: ``StateAxes``, ``StateSharding``, ``Carry``.

``vmap``/``pmap``/``scan`` take axes and ``shard_map`` takes PartitionSpecs as a prefix tree of
the arguments; a Module's entry may be a per-filter mapping. :func:`leaf_specs` broadcasts such
a prefix to one spec per leaf (graph roots count as one leaf) and :func:`state_specs` expands the
spec of each graph root to one spec per Variable of its :class:`Plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
from jax.sharding import PartitionSpec

from .._filters import Filter, _show, to_predicate
from .._graph import Plan
from .._state import State, format_path
from ._lift import is_graph_root

Path = tuple[Any, ...]


class _CarryType:
    """The type of :data:`Carry` (a singleton)."""

    def __repr__(self) -> str:
        return "Carry"

    def __reduce__(self) -> str:
        return "Carry"


Carry = _CarryType()
"""Marks what ``scan`` carries from step to step: an argument and its output, or, inside a
:class:`StateAxes`, the Variables of a Module that are carried rather than sliced."""


@dataclass(frozen=True)
class _AtPath:
    """Filter matching exactly one path (how a State of specs becomes per-path filters)."""

    path: Path

    def __call__(self, path: Path, value: Any) -> bool:
        return path == self.path

    def __repr__(self) -> str:
        return repr(format_path(self.path))


class PerFilter:
    """A spec per Variable filter for one Module argument; the first matching filter wins.

    Built from a mapping ``{filter: spec}``, an iterable of ``(filter, spec)`` pairs, or a
    :class:`State` of specs (one entry per path, e.g. from ``get_partition_spec``).
    """

    _catch_all = "...: None"  # the catch-all entry suggested when no filter matches

    def __init__(self, specs: Mapping[Filter, Any] | Iterable[tuple[Filter, Any]] | State, /):
        if isinstance(specs, State):
            pairs = [
                (_AtPath(p), v.value if hasattr(v, "value") else v) for p, v in specs.flat_state()
            ]
        else:
            pairs = list(specs.items() if isinstance(specs, Mapping) else specs)
        self.filters = tuple(f for f, _ in pairs)
        self.specs = tuple(s for _, s in pairs)
        self._predicates = tuple(to_predicate(f) for f in self.filters)

    def items(self) -> list[tuple[Filter, Any]]:
        """The ``(filter, spec)`` pairs in order."""
        return list(zip(self.filters, self.specs))

    def spec_for(self, path: Path, leaf: Any, where: str) -> Any:
        """The spec of the Variable ``leaf`` at ``path``.

        Raises:
            ValueError: no filter matches it.
        """
        for pred, spec in zip(self._predicates, self.specs):
            if pred(path, leaf):
                return spec
        raise ValueError(
            f"{where}: {self!r} has no filter matching {format_path(path)} "
            f"({type(leaf).__name__}); add one, e.g. `{self._catch_all}` as the last entry."
        )

    def __repr__(self) -> str:
        body = ", ".join(f"{_show(f)}: {s!r}" for f, s in self.items())
        return f"{type(self).__name__}({{{body}}})"

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other.filters == self.filters  # type: ignore[attr-defined]
            and other.specs == self.specs
        )  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.filters, self.specs))


class StateAxes(PerFilter):
    """Axes per Variable filter for one Module argument of ``vmap``/``pmap``/``scan``.

    Values are an int (mapped or sliced along that axis), ``None`` (broadcast; in ``scan``,
    carried) or :data:`Carry` (``scan`` only: carried from step to step).

    Example:
        >>> import nnx_core as nnx
        >>> nnx.StateAxes({nnx.Param: 0, ...: None})
        StateAxes({Param: 0, ...: None})
        >>> nnx.StateAxes({nnx.BatchStat: nnx.Carry, "Param": 1}).items()[0][1]
        Carry
    """


class StateSharding(PerFilter):
    """PartitionSpecs per Variable filter for one Module argument of ``shard_map``.

    Example:
        >>> import nnx_core as nnx
        >>> from jax.sharding import PartitionSpec as P
        >>> nnx.StateSharding({nnx.PathContains("kernel"): P(None, "model"), ...: P()})
        StateSharding({PathContains(key='kernel'): P(None, 'model'), ...: P()})
    """

    _catch_all = "...: P()"


def is_spec_leaf(x: Any) -> bool:
    """Leaves of an axes/specs prefix tree (``None`` included, unlike in JAX pytrees)."""
    return x is None or x is Carry or isinstance(x, (int, PerFilter, PartitionSpec))


def leaf_specs(where: str, spec: Any, tree: Any) -> list[Any]:
    """One spec per leaf of ``tree`` (graph roots are leaves) from the prefix tree ``spec``.

    Raises:
        ValueError: ``spec`` is not a prefix of the structure of ``tree``.
    """
    out: list[Any] = []

    def expand(s: Any, sub: Any) -> None:
        out.extend([s] * len(jax.tree_util.tree_leaves(sub, is_leaf=is_graph_root)))

    try:
        jax.tree_util.tree_map(expand, spec, tree, is_leaf=is_spec_leaf)
    except ValueError as e:
        raise ValueError(
            f"{where} {spec!r} does not match the structure of the values it describes "
            f"({_describe_tree(tree)}); give one entry per argument/output, or a single one "
            f"for all. JAX says: {str(e).splitlines()[0]}"
        ) from None
    return out


def _describe_tree(tree: Any) -> str:
    if isinstance(tree, tuple):
        return f"a tuple of {len(tree)}"
    if isinstance(tree, (list, dict)):
        return f"a {type(tree).__name__} of {len(tree)}"
    return type(tree).__name__


def state_specs(
    where: str, plan: Plan, root_specs: list[Any], check: Callable[[Any, str], None] | None = None
) -> list[Any]:
    """One spec per leaf of ``plan``: each root's spec, or its per-filter spec per Variable."""
    out: list[Any] = []
    paths = plan.graphdef.paths
    leaves = plan.current_leaves()
    for (start, stop), spec in zip(plan.bounds, root_specs):
        if isinstance(spec, PerFilter):
            for i in range(start, stop):
                s = spec.spec_for(paths[i], leaves[i], where)
                if check is not None:
                    check(s, f"{spec!r} for {format_path(paths[i])}")
                out.append(s)
        else:
            out.extend([spec] * (stop - start))
    return out


def axes_ints(spec: Any) -> set[int]:
    """Every int axis appearing in a prefix tree of axes (inside StateAxes too)."""
    found: set[int] = set()
    for leaf in jax.tree_util.tree_leaves(spec, is_leaf=is_spec_leaf):
        if isinstance(leaf, PerFilter):
            found |= {s for s in leaf.specs if isinstance(s, int)}
        elif isinstance(leaf, int):
            found.add(leaf)
    return found
