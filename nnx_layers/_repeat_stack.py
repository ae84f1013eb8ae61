"""Stacks of equal layers: the leading layer axis, stacking, unstacking and comparing layers.

A stack is one Module whose Variables carry a leading axis with one entry per layer (the layout
``vmap`` gives a Module built from a batch of keys). Logical axis names ride along: a Variable
that names its axes (``sharding_names``) gets one more name, for the layer axis, in front.
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from nnx_core import Module, State, Variable, format_path, graphdef, iter_graph, merge, state

from ._axis_names import NAME_KEYS

__all__ = [
    "has_layer_axis",
    "add_layer_axis",
    "first_difference",
    "stack_layers",
    "unstack_layers",
]


def add_layer_axis(block: Module, name: str | None) -> None:
    """Put ``name`` in front of the axis names of every Variable of ``block`` that has them."""
    for _, variable in state(block).flat_state():
        for key in NAME_KEYS:
            names = variable.get_metadata(key, None)
            if names:
                variable.set_metadata(key, (name, *names))


def drop_layer_axis(variable: Variable) -> None:
    """The inverse of `add_layer_axis` for one Variable (a layer taken out of the stack)."""
    for key in NAME_KEYS:
        names = variable.get_metadata(key, None)
        if names:
            variable.set_metadata(key, tuple(names)[1:])


def has_layer_axis(value: Any, count: int) -> bool:
    """Whether every array of ``value`` has a leading axis of size ``count``."""
    leaves = jax.tree.leaves(value)
    return bool(leaves) and all(jnp.ndim(x) and jnp.shape(x)[0] == count for x in leaves)


def _leaves(layer: Module) -> list[Any]:
    return [leaf for _, leaf in state(layer).flat_state()]


def _raw(leaf: Any) -> Any:
    return leaf.value if isinstance(leaf, Variable) else leaf


def stack_layers(layers: Sequence[Module]) -> Module:
    """One Module holding ``layers`` (all of the structure of ``layers[0]``) on a leading axis.

    A Variable that every layer of several shares (the same object, e.g. an ``Rngs`` given to
    each layer's constructor) stays one shared Variable; one layer's are all stacked (a new
    Variable each: the layer itself is left as it was).
    """
    template = graphdef(layers[0])
    stacked = []
    for column in zip(*(_leaves(layer) for layer in layers)):
        if len(column) > 1 and all(leaf is column[0] for leaf in column):
            stacked.append(column[0])
        else:
            stacked.append(jax.tree.map(lambda *xs: jnp.stack(xs), *map(_raw, column)))
    return merge(template, State.from_flat_state(zip(template.paths, stacked)))


def unstack_layers(block: Module, count: int) -> list[Module]:
    """``count`` Modules, layer ``i`` holding entry ``i`` of every Variable with the layer axis;
    the Variables without it are shared by all of them, as in the stack."""
    template = graphdef(block)
    leaves = _leaves(block)
    layers = []
    for i in range(count):
        taken = [
            jax.tree.map(lambda x, i=i: x[i], _raw(leaf))
            if has_layer_axis(_raw(leaf), count)
            else leaf
            for leaf in leaves
        ]
        layer = merge(template, State.from_flat_state(zip(template.paths, taken)))
        for leaf, variable in zip(leaves, _leaves(layer)):
            if variable is not leaf:
                drop_layer_axis(variable)
        layers.append(layer)
    return layers


def _spell(variable: Variable) -> str:
    shapes = [
        f"{getattr(leaf.dtype, 'name', leaf.dtype)}{list(leaf.shape)}"
        for leaf in jax.tree.leaves(variable.value)
        if hasattr(leaf, "shape")
    ]
    value = ", ".join(shapes) if shapes else repr(variable.value)
    return f"{type(variable).__name__}({value})"


def _what(value: Any) -> str:
    if isinstance(value, Variable):
        return _spell(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array {getattr(value.dtype, 'name', value.dtype)}{list(value.shape)}"
    return f"a {type(value).__name__}"


_MISSING = object()


def _show(value: Any) -> str:
    if value is _MISSING:
        return "missing"
    if isinstance(value, (Module, Variable)) or hasattr(value, "shape"):
        return _what(value)
    return repr(value)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare to a bool differ
        return a is b


def _node_difference(
    path: tuple[Any, ...],
    a: Any,
    b: Any,
    children: tuple[set[Any], set[Any]],
    names: tuple[str, str],
) -> str | None:
    first, other = names
    here = format_path(path) if path else "the layer itself"
    if type(a) is not type(b):
        return f"{here} is {_what(a)} in {first} and {_what(b)} in {other}"
    if isinstance(a, Variable):
        if _spell(a) != _spell(b):
            return f"{here} is {_spell(a)} in {first} and {_spell(b)} in {other}"
        if a.metadata != b.metadata:
            return f"{here} has metadata {a.metadata} in {first} and {b.metadata} in {other}"
        return None
    if not isinstance(a, Module) and hasattr(a, "shape"):
        if _what(a) != _what(b):
            return f"{here} is {_what(a)} in {first} and {_what(b)} in {other}"
        return None
    if not isinstance(a, Module):
        return None
    ours, theirs = vars(a), vars(b)
    for key in sorted(k for k in set(ours) | set(theirs) if not k.startswith("_")):
        mine, yours = key in children[0], key in children[1]
        if mine and yours:
            continue  # (compared at its own path)
        left, right = ours.get(key, _MISSING), theirs.get(key, _MISSING)
        if mine != yours or not _equal(left, right):
            where = format_path((*path, key))
            return f"{where} is {_show(left)} in {first} and {_show(right)} in {other}"
    return None


def _children(nodes: dict[tuple[Any, ...], Any]) -> dict[tuple[Any, ...], set[Any]]:
    children: dict[tuple[Any, ...], set[Any]] = {}
    for path in nodes:
        if path:
            children.setdefault(path[:-1], set()).add(path[-1])
    return children


def first_difference(
    a: Module, b: Module, names: tuple[str, str] = ("the first", "the other")
) -> str | None:
    """Where ``b`` differs in structure from ``a`` (a path and both sides), or None if alike.

    Example:
        >>> from nnx_core import Rngs
        >>> from nnx_layers import Linear
        >>> from nnx_layers._repeat_stack import first_difference
        >>> first_difference(Linear(2, 3, rngs=Rngs(0)), Linear(2, 3, rngs=Rngs(1))) is None
        True
        >>> first_difference(Linear(2, 3, rngs=Rngs(0)), Linear(2, 4, rngs=Rngs(0)))
        'out_features is 3 in the first and 4 in the other'
    """
    nodes_a, nodes_b = dict(iter_graph(a)), dict(iter_graph(b))
    children_a, children_b = _children(nodes_a), _children(nodes_b)
    for path, value in nodes_a.items():
        if path not in nodes_b:
            return f"{format_path(path)} is {_what(value)} in {names[0]} and missing in {names[1]}"
        sides = (children_a.get(path, set()), children_b.get(path, set()))
        found = _node_difference(path, value, nodes_b[path], sides, names)
        if found is not None:
            return found
    for path, value in nodes_b.items():
        if path not in nodes_a:
            return f"{format_path(path)} is missing in {names[0]} and {_what(value)} in {names[1]}"
    if graphdef(a) != graphdef(b):
        return "their structures differ (equal paths, Variables and attributes; other sharing)"
    return None
