"""flax.nnx's free functions over States: the same operations as the State methods."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._filters import Filter
from ._state import State
from ._variables import Variable

Path = tuple[Any, ...]


def _as_state(state: Mapping[Any, Any]) -> State:
    return state if isinstance(state, State) else State(state)


class FlatState(list):  # type: ignore[type-arg]
    """``(path, leaf)`` pairs, with flax.nnx's ``paths`` and ``leaves`` views."""

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(p for p, _ in self)

    @property
    def leaves(self) -> tuple[Any, ...]:
        return tuple(v for _, v in self)


def to_flat_state(state: Mapping[Any, Any]) -> FlatState:
    """``state.flat_state()``: ``(path, leaf)`` pairs in sorted depth-first order.

    Example:
        >>> import nnx_core as nnx
        >>> flat = nnx.to_flat_state({"a": {"b": 1}, "c": 2})
        >>> list(flat), flat.paths, flat.leaves
        ([(('a', 'b'), 1), (('c',), 2)], (('a', 'b'), ('c',)), (1, 2))
    """
    return FlatState(_as_state(state).flat_state())


def from_flat_state(
    flat_state: Mapping[Path, Any] | Iterable[tuple[Path, Any]], *, cls: type[State] = State
) -> State:
    """A nested State from ``(path, leaf)`` pairs or a mapping from paths to leaves.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.from_flat_state({("a", "b"): 1}).to_pure_dict()
        {'a': {'b': 1}}
    """
    items = flat_state.items() if isinstance(flat_state, Mapping) else flat_state
    return cls.from_flat_state(items)


def to_pure_dict(
    state: Mapping[Any, Any], extract_fn: Callable[[Any], Any] | None = None
) -> dict[Any, Any]:
    """Nested plain dicts of raw values (``extract_fn(leaf)`` when given).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> nnx.to_pure_dict(nnx.State({"w": nnx.Param(jnp.array(1.0))}))
        {'w': Array(1., dtype=float32, weak_type=True)}
    """
    if extract_fn is None:
        return _as_state(state).to_pure_dict()
    return _to_nested(((p, extract_fn(v)) for p, v in _as_state(state).flat_state()))


def _to_nested(items: Iterable[tuple[Path, Any]]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for path, value in items:
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def replace_by_pure_dict(
    state: State,
    pure_dict: Mapping[Any, Any],
    replace_fn: Callable[[Any, Any], Any] | None = None,
) -> None:
    """Write the values of ``pure_dict`` into ``state``'s leaves in place (as flax.nnx does):
    a Variable takes the value (``replace_fn(leaf, value)`` when given); keys may be the
    string form of list indices.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> s = nnx.State({"w": nnx.Param(jnp.zeros(2))})
        >>> nnx.replace_by_pure_dict(s, {"w": jnp.ones(2)}); s["w"].value.tolist()
        [1.0, 1.0]

    Raises:
        KeyError: ``pure_dict`` lacks a path of the state or has one it does not.
    """
    new = state.replace_by_pure_dict(pure_dict)
    targets = dict(state.flat_state())
    for path, leaf in new.flat_state():
        old = targets[path]
        value = leaf._value if isinstance(leaf, Variable) else leaf
        if replace_fn is not None:
            _put(state, path, replace_fn(old, value))
        elif isinstance(old, Variable):
            old.set_value(value)
        else:
            _put(state, path, value)


def _put(state: State, path: Path, value: Any) -> None:
    node: Any = state
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def restore_int_paths(pure_dict: Mapping[Any, Any]) -> dict[Any, Any]:
    """``pure_dict`` with keys that are the string form of an int (``"0"``) made ints again.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.restore_int_paths({"layers": {"0": {"w": 1}}})
        {'layers': {0: {'w': 1}}}
    """
    return {
        (int(k) if isinstance(k, str) and k.isdigit() else k): (
            restore_int_paths(v) if isinstance(v, Mapping) else v
        )
        for k, v in pure_dict.items()
    }


def map_state(f: Callable[[Path, Any], Any], state: Mapping[Any, Any]) -> State:
    """A State of ``f(path, leaf)`` for each leaf.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.map_state(lambda p, x: x * 10, {"a": 1, "b": {"c": 2}}).to_pure_dict()
        {'a': 10, 'b': {'c': 20}}
    """
    return State.from_flat_state((p, f(p, v)) for p, v in _as_state(state).flat_state())


def filter_state(state: Mapping[Any, Any], first: Filter, /, *filters: Filter) -> Any:
    """``state.filter(first, *filters)``."""
    return _as_state(state).filter(first, *filters)


def split_state(state: Mapping[Any, Any], first: Filter, /, *filters: Filter) -> Any:
    """``state.split(first, *filters)``."""
    return _as_state(state).split(first, *filters)


def merge_state(
    state: Mapping[Any, Any], /, *states: Mapping[Any, Any], cls: type[State] = State
) -> State:
    """``State.merge(state, *states)``: later States win where paths coincide."""
    return cls.merge(_as_state(state), *map(_as_state, states))


def diff(state: Mapping[Any, Any], other: Mapping[Any, Any]) -> State:
    """The leaves of ``state`` whose paths ``other`` lacks.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.statelib.diff({"a": 1, "b": 2}, {"a": 5}).to_pure_dict()
        {'b': 2}
    """
    theirs = {p for p, _ in _as_state(other).flat_state()}
    return State.from_flat_state(
        (p, v) for p, v in _as_state(state).flat_state() if p not in theirs
    )
