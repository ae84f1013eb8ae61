"""Graph node types: registration, the built-in containers, and what each type is to a traversal.

A graph is made of *nodes* (Modules, plain lists / tuples / dicts, States, registered types)
whose children are nodes, Variables, raw arrays or static values. This module says, per type,
which of the four a value is (cached per type, so the traversal pays one dict lookup per child),
and holds the structure epoch that cached flattenings are validated against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ._state import State, sort_key
from ._tracing import Tracer
from ._variables import Variable, _structure_listeners

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
    With ``attributes`` set (Modules), the children are the node's ``__dict__`` entries except
    those keys, in sorted key order, and the traversal reads them without calling ``flatten``.
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
    attributes: frozenset[str] | None = None  # children = __dict__ minus these keys, sorted


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
    KINDS.clear()
    LAYOUTS.clear()
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
    builtin = next(
        (
            b
            for b in node_type.__mro__
            if b in _BUILTIN and (b is node_type or _REGISTERED[b].subclasses)
        ),
        None,
    )
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


# -- the built-in containers ---------------------------------------------------------------------
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


# -- what a value is to the traversal, by type ---------------------------------------------------
STATIC, VARIABLE, NODE, ARRAY, MAYBE_ARRAY = 0, 1, 2, 3, 4
_ARRAY_TYPES = (jax.Array, np.ndarray)


class _Kinds(dict):
    """type -> STATIC / VARIABLE / NODE / ARRAY, filled on first sight of each type.

    Tracers are MAYBE_ARRAY: whether one is a ``jax.Array`` depends on its abstract value, so
    those few are checked per instance (they only occur while a transform traces).
    """

    def __missing__(self, t: type) -> int:
        if issubclass(t, Variable):
            kind = VARIABLE
        elif impl_for(t) is not None:
            kind = NODE
        elif issubclass(t, _ARRAY_TYPES):
            kind = ARRAY
        elif issubclass(t, Tracer):
            kind = MAYBE_ARRAY
        else:
            kind = STATIC
        self[t] = kind
        return kind


KINDS = _Kinds()
# the types of a node's children -> (their kinds, the positions that are not static)
LAYOUTS: dict[tuple[type, ...], tuple[tuple[int, ...], tuple[int, ...]]] = {}


def layout(types: tuple[type, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The kinds of children of these types and the positions of the non-static ones (cached)."""
    found = LAYOUTS.get(types)
    if found is None:
        if len(LAYOUTS) > 4096:
            LAYOUTS.clear()
        kinds = tuple(map(KINDS.__getitem__, types))
        found = LAYOUTS[types] = (kinds, tuple(j for j, k in enumerate(kinds) if k != STATIC))
    return found


def is_array(x: Any) -> bool:
    return isinstance(x, _ARRAY_TYPES)


def is_node(x: Any) -> bool:
    """True for anything the traversal descends into (Modules, containers, registered types)."""
    return impl_for(type(x)) is not None


register_internal(
    list,
    NodeImpl(
        flatten=_list_flatten,
        create=lambda t, a, c: [v for _, v in c],
        set_key=lambda x, k, v: x.__setitem__(k, v),
        pop_key=_pop_list,
        identity=False,
    ),
)
register_internal(
    tuple,
    NodeImpl(
        flatten=_tuple_flatten, create=_tuple_create, identity=False, subclasses=True, mutable=False
    ),
)
register_internal(
    dict,
    NodeImpl(
        flatten=_dict_flatten,
        create=lambda t, a, c: dict(c),
        set_key=lambda x, k, v: x.__setitem__(k, v),
        pop_key=lambda x, k: x.pop(k),
        identity=False,
    ),
)
register_internal(
    State,
    NodeImpl(
        flatten=lambda x: ([(k, x[k]) for k in sorted(x, key=sort_key)], None),
        create=lambda t, a, c: State(dict(c)),
        set_key=lambda x, k, v: x.__setitem__(k, v),
        pop_key=lambda x, k: x.pop(k),
        identity=False,
    ),
)
