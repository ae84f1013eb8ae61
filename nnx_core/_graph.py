"""Graph traversal: node registration, flatten/unflatten, GraphDef and the cached Plan.

A graph is made of *nodes* (Modules, plain lists / tuples / dicts, registered types) whose
children are nodes, Variables, raw arrays or static values. Flattening yields a hashable
:class:`GraphDef` (structure only) and the ordered list of leaves (Variables and raw arrays);
unflattening rebuilds the objects, restoring shared references and cycles by index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import GenericAlias
from typing import Any

import jax
import numpy as np

from ._state import State, format_path, sort_key
from ._tracing import current_trace
from ._variables import (
    Variable,
    _ById,
    _set_meta_key_slot,
    _set_meta_slot,
    _set_trace_slot,
    _set_value_slot,
    _structure_listeners,
    hashable,
)

Path = tuple[Any, ...]
Children = Sequence[tuple[Any, Any]]

TRACE_ATTR = "_nnx_trace"  # the JAX trace a Module was created under (excluded from its children)
PLAN_ATTR = "_nnx_plan"  # a Module's cached Plans (excluded from its children too)

# -- the structure epoch -------------------------------------------------------------------------
_EPOCH = [0]


def bump_epoch() -> None:
    """Record that some graph changed structure; cached Plans are re-validated from scratch."""
    _EPOCH[0] += 1


_structure_listeners.append(bump_epoch)


# -- node registration ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeImpl:
    """How the traversal treats one node type.

    ``flatten(node) -> (children, aux)`` lists ``(key, child)`` pairs and hashable static data;
    ``create(type, aux, children)`` rebuilds a node; ``create_empty`` + ``fill`` do it in two
    steps so references to the node from its own children (cycles) can be restored; ``set_key``
    and ``pop_key`` change one child in place. ``identity`` nodes keep shared references shared.
    """

    flatten: Callable[[Any], tuple[Children, Any]]
    create: Callable[[type, Any, Children], Any] | None = None
    create_empty: Callable[[type, Any], Any] | None = None
    fill: Callable[[Any, Children], None] | None = None
    set_key: Callable[[Any, Any, Any], None] | None = None
    pop_key: Callable[[Any, Any], Any] | None = None
    identity: bool = True
    subclasses: bool = False
    mutable: bool = True
    plan_attr: str | None = None  # the key in the node's __dict__ that caches its Plan


_IMPLS: dict[type, NodeImpl | None] = {}
_REGISTERED: dict[type, NodeImpl] = {}
_BUILTIN: set[type] = set()  # list, tuple, dict, State and Module: not re-registrable


def impl_for(t: type) -> NodeImpl | None:
    """The NodeImpl for type ``t`` (exact or via a base registered with ``subclasses=True``)."""
    try:
        return _IMPLS[t]
    except KeyError:
        pass
    found = None
    for base in t.__mro__:
        impl = _REGISTERED.get(base)
        if impl is not None and (base is t or impl.subclasses):
            found = impl
            break
    _IMPLS[t] = found
    return found


def register_internal(t: type, impl: NodeImpl, *, builtin: bool = True) -> None:
    if builtin:
        _BUILTIN.add(t)
    _REGISTERED[t] = impl
    _IMPLS.clear()
    bump_epoch()


def register_node_type(
    node_type: type,
    *,
    flatten: Callable[[Any], tuple[Children, Any]],
    unflatten: Callable[[Children, Any], Any],
    set_key: Callable[[Any, Any, Any], None] | None = None,
    pop_key: Callable[[Any, Any], Any] | None = None,
) -> None:
    """Let the graph API traverse ``node_type`` the way it traverses lists and dicts.

    Args:
        node_type: the container class.
        flatten: ``node -> (children, aux)`` where children is a sequence of ``(key, child)``
            pairs (keys are str or int) and aux is hashable static data.
        unflatten: ``(children, aux) -> node`` rebuilds a node from its children.
        set_key: ``(node, key, child) -> None`` replaces a child in place (used by ``update``).
        pop_key: ``(node, key) -> child`` removes a child (used by ``pop``).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Bag:
        ...     def __init__(self, **items): self.items = items
        >>> nnx.register_node_type(
        ...     Bag,
        ...     flatten=lambda b: (sorted(b.items.items()), None),
        ...     unflatten=lambda children, aux: Bag(**dict(children)),
        ...     set_key=lambda b, k, v: b.items.__setitem__(k, v),
        ... )
        >>> class Model(nnx.Module):
        ...     def __init__(self):
        ...         self.bag = Bag(w=nnx.Param(jnp.ones(2)), b=nnx.Param(jnp.zeros(2)))
        >>> graphdef, state = nnx.split(Model())
        >>> sorted(state["bag"])
        ['b', 'w']
        >>> nnx.merge(graphdef, state).bag.items["w"].value.tolist()
        [1.0, 1.0]

    Raises:
        TypeError: ``node_type`` is not a class, is a Variable kind or a type the graph already
            handles (list, tuple, dict, State, Module and their subclasses), or ``flatten`` /
            ``unflatten`` is not callable.
    """
    if not isinstance(node_type, type):
        raise TypeError(f"register_node_type expects a class, got {node_type!r}.")
    for arg, fn in (("flatten", flatten), ("unflatten", unflatten)):
        if not callable(fn):
            raise TypeError(
                f"register_node_type({node_type.__name__}): {arg} must be callable, got {fn!r}."
            )
    if issubclass(node_type, Variable):
        raise TypeError(
            f"{node_type.__name__} is a Variable kind; Variables are leaves, not nodes. "
            "Register a Variable kind with register_variable_type instead."
        )
    builtin = next((b for b in node_type.__mro__ if b in _BUILTIN
                    and (b is node_type or _REGISTERED[b].subclasses)), None)
    if builtin is not None:
        raise TypeError(
            f"{node_type.__name__} is already traversed as a graph node (as a "
            f"{builtin.__name__}); it cannot be registered again."
        )
    register_internal(
        node_type,
        NodeImpl(
            flatten=flatten,
            create=lambda t, aux, children: unflatten(children, aux),
            set_key=set_key,
            pop_key=pop_key,
        ),
        builtin=False,
    )


def _list_flatten(x: list) -> tuple[Children, None]:
    return list(enumerate(x)), None


def _tuple_flatten(x: tuple) -> tuple[Children, None]:
    return list(enumerate(x)), None


def _tuple_create(t: type, aux: Any, children: Children) -> tuple:
    values = [c for _, c in children]
    return t(*values) if hasattr(t, "_fields") else t(values)


def _dict_flatten(x: dict) -> tuple[Children, None]:
    return list(x.items()), None  # insertion order, so merge/clone rebuild the same order


def _pop_list(x: list, k: int) -> Any:
    return x.pop(k)


register_internal(list, NodeImpl(
    flatten=_list_flatten, create=lambda t, a, c: [v for _, v in c],
    set_key=lambda x, k, v: x.__setitem__(k, v), pop_key=_pop_list, identity=False))
register_internal(tuple, NodeImpl(
    flatten=_tuple_flatten, create=_tuple_create, identity=False, subclasses=True, mutable=False))
register_internal(dict, NodeImpl(
    flatten=_dict_flatten, create=lambda t, a, c: dict(c),
    set_key=lambda x, k, v: x.__setitem__(k, v), pop_key=lambda x, k: x.pop(k), identity=False))


register_internal(State, NodeImpl(
    flatten=lambda x: ([(k, x[k]) for k in sorted(x, key=sort_key)], None),
    create=lambda t, a, c: State(dict(c)),
    set_key=lambda x, k, v: x.__setitem__(k, v), pop_key=lambda x, k: x.pop(k), identity=False))


def is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def is_node(x: Any) -> bool:
    """True for anything the traversal descends into (Modules, containers, registered types)."""
    return impl_for(type(x)) is not None


# -- GraphDef ------------------------------------------------------------------------------------
class GraphDef:
    """The structure of a graph with no arrays: hashable, and equal for equal structures.

    It is a pytree with no leaves, so ``jax.jit`` takes it as an ordinary argument and retraces
    only for a new structure, and ``merge(graphdef, state)`` rebuilds the graph from it.
    """

    __slots__ = ("spec", "paths", "_hash")

    def __class_getitem__(cls, item: Any) -> GenericAlias:  # GraphDef[Model] in annotations
        return GenericAlias(cls, item)

    def __init__(self, spec: tuple[Any, ...], paths: tuple[Path, ...]):
        self.spec = spec
        self.paths = paths
        self._hash = hash(spec)

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, GraphDef) and other._hash == self._hash and other.spec == self.spec
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        root = self.spec[1].__name__ if self.spec[0] == "node" else self.spec[0]
        return f"GraphDef({root}, leaves={len(self.paths)})"


# A pytree with no leaves (as in flax.nnx): plain jax.jit and tree functions accept it as is.
jax.tree_util.register_static(GraphDef)


# -- flatten -------------------------------------------------------------------------------------
class _Flattener:
    __slots__ = ("ref", "objs", "leaves", "paths", "owners", "snaps")

    def __init__(self) -> None:
        self.ref: dict[int, int] = {}
        self.objs: list[Any] = []
        self.leaves: list[Any] = []
        self.paths: list[Path] = []
        self.owners: list[tuple[Any, NodeImpl | None, Any]] = []
        self.snaps: list[tuple[Any, NodeImpl, Any]] = []

    def visit(self, x: Any, path: Path, owner: Any, owner_impl: NodeImpl | None) -> Any:
        ref = self.ref
        if isinstance(x, Variable):
            i = ref.get(id(x))
            if i is not None:
                return ("ref", i)
            i = ref[id(x)] = len(self.objs)
            self.objs.append(x)
            self.leaves.append(x)
            self.paths.append(path)
            self.owners.append((owner, owner_impl, path[-1] if path else None))
            return ("var", type(x), x.meta_key(), i)
        t = type(x)
        impl = impl_for(t)
        if impl is not None:
            i = None
            if impl.identity:
                i = ref.get(id(x))
                if i is not None:
                    return ("ref", i)
                i = ref[id(x)] = len(self.objs)
                self.objs.append(x)
            children, aux = impl.flatten(x)
            if impl.mutable:
                self.snaps.append((x, impl, snapshot(x, impl)))
            specs = tuple((k, self.visit(c, (*path, k), x, impl)) for k, c in children)
            return ("node", t, aux, i, specs)
        if is_array(x):
            self.leaves.append(x)
            self.paths.append(path)
            self.owners.append((owner, owner_impl, path[-1] if path else None))
            return ("arr",)
        return ("static", hashable(x))


def snapshot(x: Any, impl: NodeImpl) -> tuple[Any, ...]:
    """Identities of a mutable node's children, to detect in-place mutation."""
    t = type(x)
    if t is list:
        return tuple(map(id, x))
    if t is dict:
        return (tuple(x), tuple(map(id, x.values())))
    children, aux = impl.flatten(x)
    return (hashable(aux), *((k, id(c)) for k, c in children))


def _checks(snaps: list[tuple[Any, NodeImpl, Any]]) -> tuple[list[Any], ...]:
    """The snapshots sorted by how cheaply they can be re-checked: empty containers (most
    metadata dicts), lists and dicts (C-level tuple comparisons), then registered types."""
    empty: list[Any] = []
    lists: list[Any] = []
    dicts: list[Any] = []
    others: list[Any] = []
    for x, impl, snap in snaps:
        t = type(x)
        if t in (list, dict) and not x:
            empty.append(x)
        elif t is list:
            lists.append((x, snap))
        elif t is dict:
            dicts.append((x, snap[0], snap[1]))
        else:
            others.append((x, impl, snap))
    return empty, lists, dicts, others


class Plan:
    """A cached flattening of some roots: GraphDef plus the leaves in order.

    Valid while the structure epoch is unchanged and no mutable container changed its items.
    """

    __slots__ = ("roots", "graphdef", "leaves", "owners", "epoch", "snaps", "index",
                 "partitions", "variables_only", "objs", "bounds", "_checks")

    def __init__(self, roots: tuple[Any, ...]):
        f = _Flattener()
        spec_list = []
        bounds = []
        for r in roots:
            start = len(f.leaves)
            spec_list.append(f.visit(r, (), None, None))
            bounds.append((start, len(f.leaves)))
        spec = tuple(spec_list)
        self.roots = roots
        self.objs = f.objs
        self.bounds = tuple(bounds)
        self.graphdef = GraphDef(spec[0] if len(roots) == 1 else ("multi", spec), tuple(f.paths))
        self.leaves = f.leaves
        self.owners = f.owners
        self.snaps = f.snaps
        self._checks = _checks(f.snaps)
        self.epoch = _EPOCH[0]
        self.index: dict[Path, int] | None = None
        self.partitions: dict[Any, list[list[int]]] = {}
        self.variables_only = all(isinstance(v, Variable) for v in f.leaves)

    def valid(self) -> bool:
        """Whether the cached flattening still describes the graph (a hot path: keep it lean)."""
        if self.epoch != _EPOCH[0]:
            return False
        empty, lists, dicts, others = self._checks
        for x in empty:
            if x:
                return False
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
        self.snaps = [(x, impl, snapshot(x, impl)) for x, impl, _ in self.snaps]
        self._checks = _checks(self.snaps)

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
    if plan is None or not plan.valid() or any(a is not b for a, b in zip(plan.roots, roots)):
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


# -- unflatten -----------------------------------------------------------------------------------
def new_variable(cls: type[Variable], value: Any, meta_key: tuple[Any, ...]) -> Variable:
    v = object.__new__(cls)
    _set_value_slot(v, value)
    _set_meta_slot(v, {k: (m.obj if isinstance(m, _ById) else m) for k, m in meta_key})
    _set_meta_key_slot(v, meta_key)
    _set_trace_slot(v, current_trace())
    return v


class _Unflattener:
    __slots__ = ("leaves", "pos", "objs", "reuse", "keep_variables")

    def __init__(self, leaves: Sequence[Any], reuse: dict[int, Any] | None = None,
                 keep_variables: bool = False):
        self.leaves = leaves
        self.pos = 0
        self.objs: dict[int, Any] = {}
        self.reuse = reuse or {}
        self.keep_variables = keep_variables

    def next_leaf(self) -> Any:
        leaf = self.leaves[self.pos]
        self.pos += 1
        return leaf._value if isinstance(leaf, Variable) else leaf

    def build(self, spec: tuple[Any, ...]) -> Any:
        tag = spec[0]
        if tag == "ref":
            return self.objs[spec[1]]
        if tag == "var":
            _, cls, meta_key, i = spec
            if self.keep_variables and type(self.leaves[self.pos]) is cls:
                v = self.leaves[self.pos]
                self.pos += 1
                self.objs[i] = v
                return v
            value = self.next_leaf()
            old = self.reuse.get(i)
            if old is not None and type(old) is cls:
                old.set_raw_value(value)
                if old.meta_key() != meta_key:
                    old.set_metadata(**dict(meta_key))
                v = old
            else:
                v = new_variable(cls, value, meta_key)
            self.objs[i] = v
            return v
        if tag == "arr":
            return self.next_leaf()
        if tag == "static":
            value = spec[1]
            return value.obj if isinstance(value, _ById) else value
        return self.build_node(spec)

    def build_node(self, spec: tuple[Any, ...]) -> Any:
        _, t, aux, i, specs = spec
        impl = impl_for(t)
        if impl is None:
            raise TypeError(f"{t.__name__} is no longer a registered graph node type.")
        if impl.create_empty is not None and impl.fill is not None:
            obj = self.reuse.get(i)
            if type(obj) is not t:
                obj = impl.create_empty(t, aux)
            self.objs[i] = obj
            impl.fill(obj, [(k, self.build(s)) for k, s in specs])
            return obj
        children = [(k, self.build(s)) for k, s in specs]
        assert impl.create is not None
        obj = impl.create(t, aux, children)
        if i is not None:
            self.objs[i] = obj
        return obj


def unflatten(
    graphdef: GraphDef, leaves: Sequence[Any], reuse: dict[int, Any] | None = None, *,
    keep_variables: bool = False,
) -> Any:
    """Rebuild the graph from its GraphDef and leaves in GraphDef order.

    ``reuse`` maps reference indices to existing objects that are updated in place instead of
    being created (how the transforms write structural changes back to the caller's objects).
    With ``keep_variables``, Variable leaves of the recorded kind are used as they are.
    """
    u = _Unflattener(leaves, reuse, keep_variables)
    spec = graphdef.spec
    if spec[0] == "multi":
        out = tuple(u.build(s) for s in spec[1])
    else:
        out = u.build(spec)
    if reuse:
        bump_epoch()
    return out


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
