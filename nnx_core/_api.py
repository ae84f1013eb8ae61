"""The graph/state API: split, merge, state, graphdef, update, clone, pop, iter_graph."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

from ._filters import (
    All,
    Any_,
    Filter,
    Not,
    OfType,
    PathContains,
    _Constant,
    check_filters,
)
from ._flatten import Mismatch, unflatten_state
from ._graph import GraphDef, Plan, bump_epoch, impl_for, is_array, iter_nodes, plan_for, unflatten
from ._state import State, format_path, raise_unmatched, sort_key
from ._variables import UNTRACED, Variable, _set_value_slot

Path = tuple[Any, ...]
_CACHEABLE = (type, str, OfType, PathContains, All, Any_, Not, _Constant)


def _cache_key(filters: tuple[Filter, ...]) -> Any:
    """Filters that depend only on structure (kinds, paths) can be cached per Plan."""

    def ok(f: Any) -> bool:
        if f is Ellipsis or f is None or isinstance(f, bool):
            return True
        if isinstance(f, (tuple, list)):
            return all(ok(g) for g in f)
        if isinstance(f, (All, Any_)):
            return all(ok(g) for g in f.filters)
        if isinstance(f, Not):
            return ok(f.filter)
        return isinstance(f, _CACHEABLE)

    if not all(ok(f) for f in filters):
        return None
    try:
        hash(filters)
    except TypeError:
        return None
    return filters


def _partition(plan: Plan, filters: tuple[Filter, ...], *, exhaustive: bool) -> list[list[int]]:
    key = _cache_key(filters) if filters else ()
    if key is not None:
        cached = plan.partitions.get((key, exhaustive))
        if cached is not None:
            return cached
    if not filters:  # everything, in order
        everything = [list(range(len(plan.leaves)))]
        plan.partitions[((), exhaustive)] = everything
        return everything
    preds = check_filters(filters)
    leaves = plan.current_leaves()
    parts: list[list[int]] = [[] for _ in preds]
    unmatched = []
    for i, (path, leaf) in enumerate(zip(plan.graphdef.paths, leaves)):
        for j, pred in enumerate(preds):
            if pred(path, leaf):
                parts[j].append(i)
                break
        else:
            unmatched.append((path, leaf))
    if exhaustive and unmatched:
        raise_unmatched(unmatched, filters)
    if key is not None:
        plan.partitions[(key, exhaustive)] = parts
    return parts


def _build_state(plan: Plan, indices: list[int], leaves: list[Any]) -> State:
    """A State of the given leaves (the model's own Variable objects, as in flax.nnx)."""
    paths = plan.graphdef.paths
    new_state = object.__new__
    root = new_state(State)
    root_map: dict[Any, Any] = {}
    object.__setattr__(root, "_mapping", root_map)
    for i in indices:
        path = paths[i]
        node = root_map
        for key in path[:-1]:
            child = node.get(key)
            if child is None:
                child = new_state(State)
                object.__setattr__(child, "_mapping", {})
                node[key] = child
            node = child._mapping
        node[path[-1]] = leaves[i]
    return root


def split(node: Any, *filters: Filter, graph: bool | None = None) -> tuple[Any, ...]:
    """Split a graph into its GraphDef and one State per filter.

    Every Variable goes to the first filter that matches it; a Variable matching none is an
    error, so end with ``...`` to catch the rest. As in flax.nnx, the States hold the graph's
    own Variable objects: setting ``state["w"].value`` changes the model; ``jax.tree.map`` over a
    State builds new Variables and changes nothing.

    ``graph`` is flax.nnx's mode flag, accepted for its code: one traversal serves both of its
    modes (shared references and cycles are always kept), so it changes nothing here.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Block(nnx.Module):
        ...     def __init__(self):
        ...         self.w = nnx.Param(jnp.ones((2, 2)))
        ...         self.mean = nnx.BatchStat(jnp.zeros(2))
        >>> graphdef, params, rest = nnx.split(Block(), nnx.Param, ...)
        >>> list(params), list(rest)
        (['w'], ['mean'])
        >>> nnx.merge(graphdef, params, rest).w.shape
        (2, 2)

    Raises:
        ValueError: a Variable matches no filter (its path is named), or ``...`` is not last.
    """
    plan = plan_for(node)
    if not filters:
        fresh = plan.take_fresh()
        if fresh is not None:  # the first split of this structure: its traversal built it
            return plan.graphdef, fresh
    leaves = plan.current_leaves()
    parts = _partition(plan, filters, exhaustive=True)
    return (plan.graphdef, *(_build_state(plan, p, leaves) for p in parts))


def state(node: Any, *filters: Filter, graph: bool | None = None) -> Any:
    """The State of ``node`` (only the matching Variables; one State per filter if several).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self):
        ...         self.w = nnx.Param(jnp.ones(3)); self.n = nnx.Variable(jnp.array(0))
        >>> len(jax.tree_util.tree_leaves(nnx.state(M()))), list(nnx.state(M(), nnx.Param))
        (2, ['w'])
    """
    plan = plan_for(node)
    if not filters:
        fresh = plan.take_fresh()
        if fresh is not None:
            return fresh
    leaves = plan.current_leaves()
    parts = _partition(plan, filters, exhaustive=False)
    states = tuple(_build_state(plan, p, leaves) for p in parts)
    return states[0] if len(states) == 1 else states


def graphdef(node: Any, /, *, graph: bool | None = None) -> GraphDef:
    """The GraphDef of ``node``.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.ones(3))
        >>> nnx.graphdef(M()) == nnx.graphdef(M())
        True
    """
    return plan_for(node).graphdef


def merge(
    graphdef: GraphDef,
    state: Mapping[Any, Any] | None = None,
    /,
    *states: Mapping[Any, Any],
    copy: bool = False,
    recreate_variables: bool = True,
) -> Any:
    """Build a new graph from a GraphDef and States (never calls ``__init__``).

    Shared submodules and Variables are shared again in the result and cycles are restored.
    Variables in the States are used as they are (as in flax.nnx); raw arrays are wrapped in
    new Variables of the kinds the GraphDef records. With ``copy=True`` the result has new
    Variables (same kinds, metadata and arrays), so it shares nothing with the States; use
    :func:`clone` for an independent copy of a graph. ``recreate_variables`` (flax.nnx's
    switch between two internal code paths) changes nothing.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.ones(3))
        >>> g, s = nnx.split(M())
        >>> m = nnx.merge(g, s); type(m).__name__, m.w.value.tolist()
        ('M', [1.0, 1.0, 1.0])

    Raises:
        ValueError: the states lack a path the GraphDef needs, or have one it does not.
    """
    if not isinstance(graphdef, GraphDef):
        raise TypeError(
            f"merge expects a GraphDef first (from split or graphdef), got {type(graphdef).__name__}."
        )
    given = tuple(
        s if isinstance(s, State) else State(s)
        for s in ((state, *states) if state is not None else ())
    )
    if copy:
        found = _leaves_along(graphdef, given)
        return unflatten(graphdef, found if found is not None else _leaves_by_path(graphdef, given))
    if len(given) == 1:  # the common case: read the leaves along the program, in one pass
        try:
            return unflatten_state(graphdef, given[0])
        except Mismatch:
            pass
    leaves = _leaves_along(graphdef, given)
    if leaves is None:
        leaves = _leaves_by_path(graphdef, given)
    return unflatten(graphdef, leaves, keep_variables=True)


_MISSING: Any = object()


def _collect(trie: dict[Any, Any], mapping: dict[Any, Any], out: list[Any]) -> bool:
    """Leaves of one nested State along the trie into ``out``; False unless it matches exactly."""
    if len(mapping) != len(trie):
        return False
    get = mapping.get
    for key, sub in trie.items():
        value = get(key, _MISSING)
        if type(sub) is dict:
            if type(value) is not State or not _collect(sub, value._mapping, out):
                return False
        elif value is _MISSING or type(value) is State:
            return False
        else:
            out[sub] = value
    return True


def _collect_many(trie: dict[Any, Any], mappings: list[dict[Any, Any]], out: list[Any]) -> bool:
    """As _collect, for a GraphDef split over several States (each path in exactly one)."""
    if any(k not in trie for m in mappings for k in m):
        return False
    for key, sub in trie.items():
        found = [m[key] for m in mappings if key in m]
        if not found:
            return False
        if type(sub) is dict:
            inner = [v._mapping for v in found if type(v) is State]
            if len(inner) != len(found) or not _collect_many(sub, inner, out):
                return False
        elif len(found) != 1 or type(found[0]) is State:
            return False
        else:
            out[sub] = found[0]
    return True


def _leaves_along(graphdef: GraphDef, states: tuple[State, ...]) -> list[Any] | None:
    """The leaves in GraphDef order, read along its paths; None if the States differ from it."""
    trie = graphdef.trie()
    if trie is None:
        return None
    out: list[Any] = [None] * len(graphdef.paths)
    if len(states) == 1:
        ok = _collect(trie, states[0]._mapping, out)
    else:
        ok = _collect_many(trie, [s._mapping for s in states], out)
    return out if ok else None


def _leaves_by_path(graphdef: GraphDef, states: tuple[State, ...]) -> list[Any]:
    """The leaves in GraphDef order from the flattened States (later States win), or an error
    that lists the missing and unexpected paths."""
    flat: dict[Path, Any] = {}
    for s in states:
        flat.update(s.flat_state())
    paths = graphdef.paths
    missing = [format_path(p) for p in paths if p not in flat]
    if missing or len(flat) != len(paths):
        extra = sorted(format_path(p) for p in set(flat) - set(paths))
        raise ValueError(
            "merge: the states do not match the GraphDef. "
            + (f"Missing: {', '.join(missing[:10])}. " if missing else "")
            + (f"Unexpected: {', '.join(extra[:10])}. " if extra else "")
            + "Pass every State returned by split (or state) for this GraphDef."
        )
    return [flat[p] for p in paths]


def update(node: Any, state: Mapping[Any, Any], /, *states: Mapping[Any, Any]) -> None:
    """Write the values of ``states`` into the matching Variables of ``node`` in place.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.ones(2))
        >>> m = M(); s = nnx.state(m); s["w"].value = jnp.zeros(2)
        >>> nnx.update(m, s); m.w.value.tolist()
        [0.0, 0.0]

    Raises:
        KeyError: a path in the states does not exist in ``node``.
    """
    for s in (state, *states):
        s = s if isinstance(s, State) else State(s)
        if not _write_into(node, s._mapping):
            _write_by_path(plan_for(node), s, node)


def _write_into(node: Any, mapping: dict[Any, Any]) -> bool:
    """Write one nested State into the graph by walking both together (no traversal of the
    rest of the graph). False where the State does not fit: the caller then writes by path,
    which names the path that does not exist or the container that cannot take the value."""
    t = type(node)
    impl = impl_for(t)
    if impl is None:
        return False
    if impl.attributes is not None:
        children: Any = node.__dict__
        hidden = impl.attributes
    elif t is list or t is dict or t is tuple:
        children, hidden = node, frozenset()
    else:
        return False  # a registered type: by path
    for key, value in mapping.items():
        if key in hidden:
            return False
        try:
            target = children[key]
        except (KeyError, IndexError, TypeError):
            return False
        if type(value) is State:
            if not _write_into(target, value._mapping):
                return False
        elif isinstance(target, Variable):
            raw = value._value if isinstance(value, Variable) else value
            if type(raw) in UNTRACED:  # a concrete array: no trace to check
                _set_value_slot(target, raw)
            else:
                target.set_raw_value(raw)
        elif is_array(target) and t is not tuple:
            children[key] = value._value if isinstance(value, Variable) else value
        else:
            return False
    return True


def _write_by_path(plan: Plan, s: State, node: Any) -> None:
    index = plan.path_index()
    for path, leaf in s.flat_state():
        i = index.get(path)
        if i is None:
            raise KeyError(
                f"update: {format_path(path)} does not exist in {type(node).__name__}. "
                f"Known paths include: {', '.join(format_path(p) for p in list(index)[:8])}."
            )
        plan.write_leaf(i, leaf._value if isinstance(leaf, Variable) else leaf)


def clone(
    node: Any, variables: bool = True, *, arrays: bool = False, graph: bool | None = None
) -> Any:
    """A deep copy of the graph (new objects, same arrays, same sharing and cycles).

    With ``arrays=True`` the arrays are copied too (new buffers, e.g. to donate the copy to a
    jitted step while the original stays usable). ``variables=False`` keeps the original
    Variable objects in the copy (only the nodes are new), as in flax.nnx. ``graph`` is
    flax.nnx's mode flag and changes nothing here.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.ones(2))
        >>> m = M(); c = nnx.clone(m)
        >>> c is m, c.w is m.w, c.w.shape
        (False, False, (2,))
        >>> c2 = nnx.clone(m, arrays=True)
        >>> c2.w.value is m.w.value, c2.w.value.unsafe_buffer_pointer() != m.w.value.unsafe_buffer_pointer()
        (False, True)
    """
    plan = plan_for(node)
    leaves = plan.current_leaves()
    if arrays:
        leaves = [_copy_leaf(leaf) for leaf in leaves]
    return unflatten(plan.graphdef, leaves, keep_variables=not variables and not arrays)


def _copy_leaf(leaf: Any) -> Any:
    """A leaf with new buffers (a Variable's value, or a raw array), sharding kept."""
    value = leaf._value if isinstance(leaf, Variable) else leaf

    def copy(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.device_put(x, x.sharding, may_alias=False)
        return np.array(x, copy=True) if isinstance(x, np.ndarray) else x

    copied = jax.tree_util.tree_map(copy, value)
    return leaf.replace(copied) if isinstance(leaf, Variable) else copied


def pop(node: Any, *filters: Filter) -> Any:
    """Remove the Variables matching ``filters`` from ``node`` and return them as State(s).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self):
        ...         self.w = nnx.Param(jnp.ones(2)); self.seen = nnx.Intermediate((jnp.ones(2),))
        >>> m = M(); popped = nnx.pop(m, nnx.Intermediate)
        >>> list(popped), hasattr(m, "seen")
        (['seen'], False)

    Raises:
        TypeError: a matching Variable sits in a container that cannot drop it (a tuple).
    """
    if not filters:
        raise TypeError("pop needs at least one filter, e.g. nnx.pop(model, nnx.Intermediate).")
    plan = plan_for(node)
    leaves = plan.current_leaves()
    parts = _partition(plan, filters, exhaustive=False)
    states = tuple(_build_state(plan, p, leaves) for p in parts)
    paths = plan.graphdef.paths
    # last list positions first, so earlier indices stay valid; mixed int/str keys sort too
    removals = sorted(
        (i for p in parts for i in p), key=lambda i: tuple(map(sort_key, paths[i])), reverse=True
    )
    for i in removals:  # check every removal before changing anything
        owner, impl, key = plan.owners[i]
        if impl is None or (impl.fill is None and impl.pop_key is None):
            raise TypeError(
                f"pop: cannot remove {format_path(paths[i])} from a "
                f"{type(owner).__name__}; hold it in a list, dict or Module attribute instead."
            )
    for i in removals:
        owner, impl, key = plan.owners[i]
        if impl is not None and impl.fill is not None:
            del vars(owner)[key]
        elif impl is not None and impl.pop_key is not None:  # always, after the check above
            impl.pop_key(owner, key)
    bump_epoch()
    return states[0] if len(states) == 1 else states


def iter_graph(node: Any, /, *, graph: bool | None = None) -> Iterator[tuple[Path, Any]]:
    """Yield ``(path, value)`` for every node, Variable and array once, root first.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.layers = [nnx.Param(jnp.ones(1))]
        >>> [(p, type(v).__name__) for p, v in nnx.iter_graph(M())]
        [((), 'M'), (('layers',), 'list'), (('layers', 0), 'Param')]
    """
    return iter_nodes(node)
