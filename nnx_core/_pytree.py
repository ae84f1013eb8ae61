"""Pytree: mutable Python objects that are graph nodes and, by default, JAX pytrees.

``Module`` is a ``Pytree``; so are non-Module containers written for flax.nnx
(``class Metric(nnx.Pytree)``). ``Object`` (and ``class X(nnx.Pytree, pytree=False)``) is a
graph node only.

As a JAX pytree an object is *one* node for its whole graph: its children are the graph's
Variables and raw arrays (each shared one once, in the order of ``nnx_core.state``) and its aux
data is the hashable ``GraphDef`` (every static attribute included). The cached flattening of the
graph API is reused, so plain ``jax.jit`` pays only for the values; shared Variables stay shared
and reference cycles survive ``jax.tree.map`` and ``jax.jit``.
"""

from __future__ import annotations

from typing import Any

import jax

from ._data_attrs import CLASS_MARKS, MARKS_ATTR, Marked, check_static, class_marks, set_mark
from ._graph import (
    PLAN_ATTR,
    TRACE_ATTR,
    GraphDef,
    NodeImpl,
    bump_epoch,
    is_array,
    plan_for,
    register_internal,
)
from ._graph import Unflattener as GraphUnflattener
from ._state import format_path
from ._tracing import TraceContextError, current_trace
from ._values import _describe
from ._variables import Variable, has_tracer

_MISSING = object()
_UNEXPECTED = "Found unexpected data on value of type"
HIDDEN = frozenset({TRACE_ATTR, PLAN_ATTR})  # bookkeeping in __dict__, not attributes


class Pytree:
    """Base class of mutable objects whose attributes form a graph (``Module`` is one).

    Attributes holding Variables, arrays, other Pytrees and plain lists / tuples / dicts of them
    are state; anything else is static. A subclass is also registered as a JAX pytree, so plain
    ``jax.jit``, ``jax.tree.map`` and ``jax.tree.leaves`` accept it; pass ``pytree=False`` in
    the class statement for a graph node that JAX should treat as a leaf.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Counter(nnx.Pytree):
        ...     def __init__(self):
        ...         self.count = nnx.Variable(jnp.array(0))
        ...         self.name = "steps"
        >>> c = Counter()
        >>> jax.tree.leaves(c)
        [Array(0, dtype=int32, weak_type=True)]
        >>> bumped = jax.tree.map(lambda x: x + 1, c)
        >>> int(bumped.count.value), int(c.count.value), bumped.name
        (1, 0, 'steps')
    """

    def __init_subclass__(cls, *, pytree: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        class_marks(cls)  # Data[...] / Static[...] annotations
        if pytree:
            jax.tree_util.register_pytree_with_keys(cls, _flatten_with_keys, _unflatten, _flatten)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = object.__new__(cls)
        object.__setattr__(obj, TRACE_ATTR, current_trace())
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if type(value) is Marked:  # nnx.data(x) / nnx.static(x): the attribute takes the mark
            marks = set_mark(d, name, value.is_data)
            value = value.value
            if marks is not None:
                bump_epoch()
                object.__setattr__(self, MARKS_ATTR, marks)
        elif MARKS_ATTR in d and dict(d[MARKS_ATTR]).get(name) is False:
            where = f"{type(self).__name__}.{name} (marked nnx.static)"
            check_static(value, where, "Found data on value of type")
        elif CLASS_MARKS and CLASS_MARKS.get(type(self), {}).get(name) is False:
            if name not in dict(d.get(MARKS_ATTR, ())):
                check_static(value, f"{type(self).__name__}.{name} (a static field)", _UNEXPECTED)
        old = d.get(name, _MISSING)
        if old is not value and not (
            is_array(old) and is_array(value) and type(old) is type(value)
        ):  # an array replaced by an array of the same type changes values only
            bump_epoch()
        if has_tracer(value) and d.get(TRACE_ATTR) != current_trace():
            raise TraceContextError(
                f"Cannot set the traced value {name!r} on {type(self).__name__}: the module was "
                "created outside the JAX transform that is running now. Pass it as an argument "
                "of the transform (e.g. nnx_core.jit(f)(model, x)) instead of capturing it."
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        bump_epoch()
        object.__delattr__(self, name)

    def __getstate__(self) -> dict[str, Any]:
        # copy, deepcopy and pickle: the attributes only (the trace token is not picklable)
        return {k: v for k, v in self.__dict__.items() if k not in HIDDEN}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return _repr(self, 0, set())


class Object(Pytree, pytree=False):
    """A graph node that JAX treats as a leaf (not a pytree), as flax.nnx's ``Object``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Box(nnx.Object):
        ...     def __init__(self): self.w = nnx.Param(jnp.ones(2))
        >>> box = Box()
        >>> jax.tree.leaves(box)[0] is box, list(nnx.state(box))
        (True, ['w'])

    Raises:
        ValueError: a subclass asks for ``pytree=True``.
    """

    def __init_subclass__(cls, *, pytree: bool = False, **kwargs: Any) -> None:
        if pytree:
            raise ValueError(
                f"{cls.__name__} derives from nnx_core.Object, which is never a pytree, but its "
                "class statement passes pytree=True. Derive from nnx_core.Pytree instead."
            )
        super().__init_subclass__(pytree=False, **kwargs)


# -- the JAX pytree protocol -----------------------------------------------------------------------
class PathKey:
    """A JAX key-path entry for one leaf of a Pytree: its path inside the graph.

    ``str(key)`` reads like JAX's own keys (``.layers[0].kernel``), so
    ``jax.tree_util.keystr`` of a Variable's leaf gives ``.layers[0].kernel.value``;
    ``key.path`` is the tuple of attribute names and indices that ``nnx_core.state`` uses.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.layers = [nnx.Param(jnp.ones(2))]
        >>> (key, value_key), = [p for p, _ in jax.tree_util.tree_leaves_with_path(M())]
        >>> key.path, str(key), jax.tree_util.keystr((key, value_key))
        (('layers', 0), '.layers[0]', '.layers[0].value')
    """

    __slots__ = ("path", "text")

    def __init__(self, path: tuple[Any, ...], text: str):
        self.path = path
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"PathKey({format_path(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PathKey) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)


_KEYS: dict[GraphDef, tuple[PathKey, ...]] = {}


def _leaf_keys(graphdef: GraphDef) -> tuple[PathKey, ...]:
    """One key per leaf, from its path: names read ``.name`` and indices ``[i]``, as flax.nnx
    writes the paths of Modules, ``nnx.List`` and ``nnx.Dict``."""
    keys = _KEYS.get(graphdef)
    if keys is None:
        if len(_KEYS) >= 256:
            _KEYS.clear()
        keys = _KEYS[graphdef] = tuple(PathKey(p, _path_text(p)) for p in graphdef.paths)
    return keys


def _path_text(path: tuple[Any, ...]) -> str:
    return "".join(
        f".{k}" if isinstance(k, str) else f"[{k}]" if isinstance(k, int) else f"[{k!r}]"
        for k in path
    )


def _flatten(node: Pytree) -> tuple[list[Any], GraphDef]:
    plan = plan_for(node)
    return plan.current_leaves(), plan.graphdef


def _flatten_with_keys(node: Pytree) -> tuple[list[tuple[PathKey, Any]], GraphDef]:
    plan = plan_for(node)
    return list(zip(_leaf_keys(plan.graphdef), plan.current_leaves())), plan.graphdef


class _Unflattener(GraphUnflattener):
    """Rebuilds a Pytree from JAX's children: a Variable child is used as it is (JAX rebuilt it
    from the mapped leaf); any other child stands where the Variable was, as in flax.nnx (e.g.
    ``jax.tree.map(lambda v: v.shape, model, is_leaf=...)`` puts shapes in the new Module)."""

    __slots__ = ()

    def variable(self, leaf: Any, payload: tuple[Any, ...]) -> Any:
        if isinstance(leaf, Variable):
            return super().variable(leaf, payload)
        self.objs[payload[2]] = leaf
        return leaf


def _unflatten(graphdef: GraphDef, children: Any) -> Any:
    return _Unflattener(children, None, True).run(graphdef.program())


# -- graph node registration -------------------------------------------------------------------
def _node_flatten(m: Pytree) -> tuple[list[tuple[str, Any]], None]:
    return sorted(kv for kv in vars(m).items() if kv[0] not in HIDDEN), None


def _node_create_empty(t: type, aux: Any) -> Pytree:
    obj: Pytree = object.__new__(t)
    object.__setattr__(obj, TRACE_ATTR, current_trace())
    return obj


def _node_fill(m: Pytree, children: Any) -> None:
    d = vars(m)
    trace = d.get(TRACE_ATTR)
    d.clear()
    d[TRACE_ATTR] = trace
    d.update(children)


NODE_IMPL = NodeImpl(
    flatten=_node_flatten,
    create_empty=_node_create_empty,
    fill=_node_fill,
    set_key=lambda m, k, v: vars(m).__setitem__(k, v),
    pop_key=lambda m, k: vars(m).pop(k),
    subclasses=True,
    mutable=False,  # attribute changes go through __setattr__, which bumps the epoch
    plan_attr=PLAN_ATTR,
    attributes=HIDDEN,
)
register_internal(Pytree, NODE_IMPL)


# -- display -----------------------------------------------------------------------------------
def _repr(x: Any, indent: int, seen: set[int]) -> str:
    pad = "  " * (indent + 1)
    if isinstance(x, Pytree):
        if id(x) in seen:
            return f"{type(x).__name__}(...)"
        seen.add(id(x))
        items = sorted(kv for kv in vars(x).items() if kv[0] not in HIDDEN and kv[0] != MARKS_ATTR)
        if not items:
            return f"{type(x).__name__}()"
        body = "".join(f"{pad}{k}={_repr(v, indent + 1, seen)},\n" for k, v in items)
        return f"{type(x).__name__}(\n{body}{'  ' * indent})"
    if isinstance(x, (list, tuple)) and any(_is_state(v) for v in x):
        open_, close = ("[", "]") if isinstance(x, list) else ("(", ")")
        body = "".join(f"{pad}{_repr(v, indent + 1, seen)},\n" for v in x)
        return f"{open_}\n{body}{'  ' * indent}{close}"
    if isinstance(x, dict) and any(_is_state(v) for v in x.values()):
        body = "".join(f"{pad}{k!r}: {_repr(v, indent + 1, seen)},\n" for k, v in x.items())
        return f"{{\n{body}{'  ' * indent}}}"
    if is_array(x):
        return _describe(x)
    return repr(x)


def _is_state(v: Any) -> bool:
    return isinstance(v, (Pytree, Variable)) or is_array(v)
