"""The cached Plan: a graph's flattening, kept while its structure is unchanged.

Node types live in ``_nodes``, the traversal and GraphDef in ``_flatten``; this module caches a
traversal per root tuple on the first root and checks, cheaply, that it still holds: one epoch
comparison plus a C-level comparison per mutable list or dict in the graph.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

from ._flatten import (
    Flattener,
    GraphDef,
    Unflattener,
    leaf_owners,
    new_state,
    new_variable,
    unflatten,
)
from ._nodes import (
    _EPOCH,
    _IMPLS,
    _REGISTERED,
    PLAN_ATTR,
    TRACE_ATTR,
    NodeImpl,
    bump_epoch,
    impl_for,
    is_array,
    is_node,
    register_internal,
    register_node_type,
)
from ._state import format_path
from ._variables import Variable, hashable

__all__ = [
    "PLAN_ATTR",
    "TRACE_ATTR",
    "GraphDef",
    "NodeImpl",
    "Plan",
    "Unflattener",
    "_IMPLS",
    "_Unflattener",
    "_REGISTERED",
    "bump_epoch",
    "cached_plan",
    "impl_for",
    "is_array",
    "is_node",
    "iter_nodes",
    "new_variable",
    "plan_for",
    "read_child",
    "register_internal",
    "register_node_type",
    "unflatten",
    "write_child",
]

Path = tuple[Any, ...]
_Unflattener = Unflattener  # the name the transforms import


def snapshot(x: Any, impl: NodeImpl) -> tuple[Any, ...]:
    """Identities of a mutable node's children, to detect in-place mutation."""
    t = type(x)
    if t is list:
        return tuple(map(id, x))
    if t is dict:
        return (tuple(x), tuple(map(id, x.values())))
    children, aux = impl.flatten(x)
    return (hashable(aux), *((k, id(c)) for k, c in children))


def _checks(containers: list[tuple[Any, NodeImpl]]) -> tuple[list[Any], ...]:
    """Snapshots of the non-empty mutable containers, grouped by how cheaply they are
    re-checked: lists and dicts (C-level tuple comparisons), then registered types."""
    lists: list[Any] = []
    dicts: list[Any] = []
    others: list[Any] = []
    for x, impl in containers:
        t = type(x)
        if t is list:
            lists.append((x, tuple(map(id, x))))
        elif t is dict:
            dicts.append((x, tuple(x), tuple(map(id, x.values()))))
        else:
            others.append((x, impl, snapshot(x, impl)))
    return lists, dicts, others


class Plan:
    """A cached flattening of some roots: GraphDef plus the leaves in order.

    Valid while the structure epoch is unchanged and no mutable container changed its items.
    ``fresh`` holds the State the traversal built, for the first ``split``/``state`` to take.
    """

    __slots__ = (
        "roots",
        "graphdef",
        "leaves",
        "epoch",
        "empty",
        "containers",
        "fresh",
        "_owners",
        "index",
        "partitions",
        "variables_only",
        "objs",
        "bounds",
        "_checks",
        "cache",
        "__weakref__",
    )

    def __init__(self, roots: tuple[Any, ...]):
        f = Flattener()
        if len(roots) == 1:
            spec = f.root(roots[0])
            bounds: tuple[tuple[int, int], ...] = ((0, len(f.leaves)),)
        else:
            specs = []
            spans = []
            for r in roots:
                start = len(f.leaves)
                specs.append(f.root(r))
                spans.append((start, len(f.leaves)))
            spec = ("multi", tuple(specs))
            bounds = tuple(spans)
        self.roots = roots
        self.objs = f.objs
        self.bounds = bounds
        self.graphdef = GraphDef(spec)
        self.leaves = f.leaves
        self._owners: list[tuple[Any, NodeImpl | None, Any]] | None = None
        self.empty = f.empty
        self.containers = f.containers
        # raw arrays may be given new ones before a State is asked for: only Variables qualify
        self.fresh = f.states[0] if len(roots) == 1 and f.all_variables else None
        self._checks = _checks(f.containers)
        self.epoch = _EPOCH[0]
        self.index: dict[Path, int] | None = None
        self.partitions: dict[Any, list[list[int]]] = {}
        self.variables_only = f.all_variables
        self.cache: dict[Any, Any] = {}  # per-Plan data of the transforms (e.g. donation masks)

    def valid(self) -> bool:
        """Whether the cached flattening still describes the graph (a hot path: keep it lean)."""
        if self.epoch != _EPOCH[0]:
            return False
        if any(self.empty):
            return False
        lists, dicts, others = self._checks
        for x, ids in lists:
            if tuple(map(id, x)) != ids:
                return False
        for x, keys, ids in dicts:
            if tuple(x) != keys or tuple(map(id, x.values())) != ids:
                return False
        for x, impl, snap in others:
            if snapshot(x, impl) != snap:
                return False
        return True

    @property
    def owners(self) -> list[tuple[Any, NodeImpl | None, Any]]:
        """``(owner, owner's NodeImpl, key)`` per leaf (worked out on first use)."""
        owners = self._owners
        if owners is None:
            owners = self._owners = leaf_owners(self.graphdef.spec, self.roots)
        return owners

    def take_fresh(self) -> Any:
        """The State the traversal of a single root built, once; None afterwards, for several
        roots, a root that is not a node, or a graph that holds raw arrays."""
        mapping = self.fresh
        if mapping is None:
            return None
        self.fresh = None
        return new_state(mapping)

    def current_leaves(self) -> list[Any]:
        """Leaves with raw arrays re-read from their owners (they are replaced, not mutated)."""
        if self.variables_only:
            return self.leaves
        out = []
        for leaf, (owner, impl, key) in zip(self.leaves, self.owners):
            if isinstance(leaf, Variable):
                out.append(leaf)
            else:
                out.append(read_child(owner, impl, key))
        return out

    def write_leaf(self, i: int, value: Any) -> None:
        leaf = self.leaves[i]
        if isinstance(leaf, Variable):
            leaf.set_raw_value(value)
        else:
            owner, impl, key = self.owners[i]
            write_child(owner, impl, key, value)
            self.refresh_snapshots()

    def refresh_snapshots(self) -> None:
        """After writing raw arrays into containers: their new identities are not a change."""
        self._checks = _checks(self.containers)

    def path_index(self) -> dict[Path, int]:
        if self.index is None:
            self.index = {p: i for i, p in enumerate(self.graphdef.paths)}
        return self.index


def read_child(owner: Any, impl: NodeImpl | None, key: Any) -> Any:
    if impl is None:
        raise ValueError("A root that is a bare array has no owner to read it from.")
    if impl.subclasses and impl.fill is not None:  # Module-like: attributes
        return vars(owner)[key]
    return dict(impl.flatten(owner)[0])[key]


def write_child(owner: Any, impl: NodeImpl | None, key: Any, value: Any) -> None:
    if impl is not None and impl.fill is not None:
        vars(owner)[key] = value
    elif impl is not None and impl.set_key is not None:
        impl.set_key(owner, key, value)
    else:
        raise TypeError(
            f"Cannot write {format_path((key,))} back into a {type(owner).__name__}: it is "
            "immutable or was registered without set_key. Hold the array in a Variable instead."
        )


def cached_plan(roots: tuple[Any, ...]) -> Plan | None:
    """The cached Plan of ``roots``, kept on the first root (a Module), or None if it has no slot.

    Plans live in the first root's ``__dict__``, keyed by the identities of all roots, and never
    in a global table: a Plan refers to its roots, so a global cache would keep every model ever
    split or jitted alive. ``split(model)`` and ``jit(f)(model, optimizer, ...)`` both use it.
    """
    first = roots[0]
    impl = impl_for(type(first))
    attr = impl.plan_attr if impl is not None else None
    if attr is None:
        return None
    d = first.__dict__
    plans = d.get(attr)
    if type(plans) is not dict:
        plans = d[attr] = {}
    key = tuple(map(id, roots))
    plan = plans.get(key)
    # copies carry no Plans, but ids can be reused: check the roots themselves too
    if plan is None or not plan.valid() or not all(map(operator.is_, plan.roots, roots)):
        if len(plans) >= 8:
            plans.clear()
        plan = plans[key] = Plan(roots)
    return plan


def plan_for(node: Any) -> Plan:
    """The cached Plan of ``node`` (rebuilt only when its structure changed); see cached_plan.

    Raises:
        TypeError: ``node`` is a bare Variable or array (it has no path inside a graph).
    """
    if isinstance(node, Variable) or is_array(node):
        raise TypeError(
            f"The graph API expects a graph node (a Module, list, tuple, dict or registered "
            f"type), got a bare {type(node).__name__}, which has no path inside a graph. "
            "Put it in a container, e.g. nnx_core.split([value])."
        )
    plan = cached_plan((node,))
    return plan if plan is not None else Plan((node,))


def iter_nodes(node: Any) -> Iterator[tuple[Path, Any]]:
    """Every node, Variable and raw array reachable from ``node``, once each, root first."""
    seen: set[int] = set()
    stack: list[tuple[Path, Any]] = [((), node)]
    while stack:
        path, x = stack.pop()
        impl = None if isinstance(x, Variable) else impl_for(type(x))
        if isinstance(x, Variable) or (impl is not None and impl.identity):
            if id(x) in seen:
                continue
            seen.add(id(x))
        if isinstance(x, Variable) or is_array(x):
            yield path, x
            continue
        if impl is None:
            continue
        yield path, x
        children = impl.flatten(x)[0]
        stack.extend(((*path, k), c) for k, c in reversed(list(children)))
