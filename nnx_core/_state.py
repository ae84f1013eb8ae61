"""State: the values of a graph as a nested mapping and a pytree (one leaf per Variable value)."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

import jax
import numpy as np

from ._filters import Filter, Predicate, _show, check_filters, to_predicate
from ._variables import Variable, _describe

Path = tuple[Any, ...]


def sort_key(key: Any) -> tuple[int, Any]:
    """Integers (list positions) before names, each in natural order."""
    return (0, key) if isinstance(key, int) else (1, str(key))


def format_path(path: Path) -> str:
    """``('layers', 3, 'kernel')`` -> ``layers[3].kernel``."""
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out or "<root>"


class State(MutableMapping):
    """A nested mapping from attribute names / list indices to Variables (or raw arrays).

    It is a pytree with exactly one leaf per Variable value, so ``jax.tree.map`` and optax
    work on it directly, and it converts to a flat list of ``(path, leaf)`` pairs and to plain
    nested dicts of arrays.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> s = nnx.State({"layer": {"kernel": nnx.Param(jnp.ones((2, 2))), "count": nnx.Variable(jnp.array(0))}})
        >>> [nnx.format_path(p) for p, _ in s.flat_state()]
        ['layer.count', 'layer.kernel']
        >>> len(jax.tree_util.tree_leaves(s)), s.layer.kernel.shape
        (2, (2, 2))
        >>> params, rest = s.split(nnx.Param, ...)
        >>> list(params.to_pure_dict()["layer"])
        ['kernel']
    """

    __slots__ = ("_mapping",)
    _mapping: dict[Any, Any]

    def __init__(self, mapping: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = ()):
        items = mapping.items() if isinstance(mapping, Mapping) else mapping
        object.__setattr__(
            self,
            "_mapping",
            {
                k: State(v) if isinstance(v, Mapping) and not isinstance(v, State) else v
                for k, v in items
            },
        )

    # -- mapping protocol --------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        return self._mapping[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, Mapping) and not isinstance(value, State):
            value = State(value)
        self._mapping[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._mapping[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_mapping":  # _mapping: not yet set (copy, pickle)
            raise AttributeError(name)
        try:
            return self._mapping[name]
        except KeyError:
            raise AttributeError(
                f"State has no entry {name!r}; entries: {sorted(map(str, self._mapping))}"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __eq__(self, other: object) -> bool:
        """Equal paths with equal leaves (the same Variable, or Variables of one kind with
        equal metadata and values); a plain nested mapping compares as a State of it."""
        if not isinstance(other, Mapping):
            return NotImplemented
        mine = self.flat_state()
        theirs = (other if isinstance(other, State) else State(other)).flat_state()
        return [p for p, _ in mine] == [p for p, _ in theirs] and all(
            _same_leaf(a, b) for (_, a), (_, b) in zip(mine, theirs)
        )

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return State, (self._mapping,)

    def __repr__(self) -> str:
        return _repr(self, 0)

    # -- flat view ---------------------------------------------------------------------------
    def flat_state(self) -> list[tuple[Path, Any]]:
        """All leaves as ``(path, Variable-or-array)`` pairs, in sorted depth-first order."""
        out: list[tuple[Path, Any]] = []
        _flatten_into(self, (), out)
        return out

    @classmethod
    def from_flat_path(cls, items: Mapping[Path, Any] | Iterable[tuple[Path, Any]]) -> State:
        """:meth:`from_flat_state` under flax.nnx's other name."""
        return cls.from_flat_state(items)

    @classmethod
    def from_flat_state(cls, items: Mapping[Path, Any] | Iterable[tuple[Path, Any]]) -> State:
        """Rebuild a nested State from ``(path, leaf)`` pairs or a mapping from paths to leaves.

        Raises:
            ValueError: two pairs with one path, or a path that is a prefix of another.
        """
        root: dict[Any, Any] = {}
        for path, leaf in items.items() if isinstance(items, Mapping) else items:
            if not path:
                raise ValueError("A flat-state path must have at least one key, got ().")
            node = root
            for i, key in enumerate(path[:-1]):
                child = node.setdefault(key, {})
                if not isinstance(child, dict):
                    raise ValueError(
                        f"Flat state has a leaf at {format_path(path[: i + 1])} and also "
                        f"entries below it ({format_path(path)})."
                    )
                node = child
            if isinstance(node.get(path[-1]), dict):
                raise ValueError(
                    f"Flat state has a leaf at {format_path(path)} and also entries below it."
                )
            if path[-1] in node:
                raise ValueError(f"Flat state has two entries for {format_path(path)}.")
            node[path[-1]] = leaf
        return cls(root)

    # -- filtering ---------------------------------------------------------------------------
    def filter(self, *filters: Filter) -> Any:
        """The leaves matching each filter: one State per filter (a lone State for one filter).

        Unlike :meth:`split`, leaves matching no filter are dropped.
        """
        preds = check_filters(filters) if filters else (to_predicate(...),)
        parts = _partition(self.flat_state(), preds, exhaustive=False)
        states = tuple(State.from_flat_state(p) for p in parts)
        return states[0] if len(states) == 1 else states

    def split(self, *filters: Filter) -> Any:
        """Partition the leaves by the first matching filter; every leaf must match one.

        Raises:
            ValueError: some leaves match no filter (their paths are listed), or ``...`` is not last.
        """
        preds = check_filters(filters) if filters else (to_predicate(...),)
        parts = _partition(self.flat_state(), preds, exhaustive=True, filters=filters)
        states = tuple(State.from_flat_state(p) for p in parts)
        return states[0] if len(states) == 1 else states

    @staticmethod
    def merge(state: State, /, *states: State) -> State:
        """Union of states; later states win where paths coincide."""
        flat: dict[Path, Any] = {}
        for s in (state, *states):
            flat.update(s.flat_state())
        return State.from_flat_state(flat.items())

    # -- pure dicts --------------------------------------------------------------------------
    def to_pure_dict(self) -> dict[Any, Any]:
        """Nested plain dicts of raw values (Variables unwrapped); list indices stay ints."""
        return {
            k: v.to_pure_dict()
            if isinstance(v, State)
            else (v._value if isinstance(v, Variable) else v)
            for k, v in self._mapping.items()
        }

    def replace_by_pure_dict(self, pure: Mapping[Any, Any]) -> State:
        """A new State with this one's kinds and metadata and the values from ``pure``.

        Keys may be ints or their string form (as after a JSON round trip).

        Raises:
            KeyError: ``pure`` lacks a path of this state or has one it does not.
        """
        flat = dict(self.flat_state())
        given = dict(_flat_pure(pure, ()))
        by_str = {tuple(map(str, p)): p for p in flat}
        values: dict[Path, Any] = {}
        for path, value in given.items():
            target = path if path in flat else by_str.get(tuple(map(str, path)))
            if target is None:
                raise KeyError(f"Pure dict has an entry {format_path(path)} that the state lacks.")
            values[target] = value
        missing = [format_path(p) for p in flat if p not in values]
        if missing:
            raise KeyError(f"Pure dict lacks entries for: {', '.join(missing)}.")
        return State.from_flat_state(
            (p, leaf.replace(values[p]) if isinstance(leaf, Variable) else values[p])
            for p, leaf in flat.items()
        )


def _same_leaf(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, Variable) or isinstance(b, Variable):
        if type(a) is not type(b) or a.metadata.keys() != b.metadata.keys():
            return False
        same_meta = all(_same_value(a.metadata[k], b.metadata[k]) for k in a.metadata)
        return same_meta and _same_value(a._value, b._value)
    return _same_value(a, b)


def _same_value(a: Any, b: Any) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if not operator.eq(ta, tb):  # PyTreeDef's == is untyped
        return False
    for x, y in zip(la, lb):
        if hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        if hasattr(y, "dtype") and jax.dtypes.issubdtype(y.dtype, jax.dtypes.prng_key):
            y = jax.random.key_data(y)
        if not np.array_equal(np.asarray(x), np.asarray(y)):
            return False
    return True


def _flatten_into(state: State, prefix: Path, out: list[tuple[Path, Any]]) -> None:
    for key in sorted(state._mapping, key=sort_key):
        value = state._mapping[key]
        if isinstance(value, State):
            _flatten_into(value, (*prefix, key), out)
        else:
            out.append(((*prefix, key), value))


def _flat_pure(pure: Mapping[Any, Any], prefix: Path) -> Iterator[tuple[Path, Any]]:
    for key, value in pure.items():
        if isinstance(value, Mapping):
            yield from _flat_pure(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _partition(
    flat: list[tuple[Path, Any]],
    preds: tuple[Predicate, ...],
    *,
    exhaustive: bool,
    filters: tuple[Filter, ...] = (),
) -> list[list[tuple[Path, Any]]]:
    parts: list[list[tuple[Path, Any]]] = [[] for _ in preds]
    unmatched = []
    for path, leaf in flat:
        for i, pred in enumerate(preds):
            if pred(path, leaf):
                parts[i].append((path, leaf))
                break
        else:
            unmatched.append((path, leaf))
    if exhaustive and unmatched:
        raise_unmatched(unmatched, filters)
    return parts


def raise_unmatched(unmatched: list[tuple[Path, Any]], filters: tuple[Filter, ...]) -> None:
    shown = ", ".join(f"{format_path(p)} ({type(v).__name__})" for p, v in unmatched[:10])
    more = f" and {len(unmatched) - 10} more" if len(unmatched) > 10 else ""
    raise ValueError(
        f"Non-exhaustive filters, got a non-empty remainder: split filters "
        f"{tuple(map(_show, filters))} leave {len(unmatched)} value(s) unmatched: "
        f"{shown}{more}. Add a filter for them or end the filters with `...`."
    )


def _repr(state: State, indent: int) -> str:
    if not state._mapping:
        return "State({})"
    pad = "  " * (indent + 1)
    lines = ["State({"]
    for key in sorted(state._mapping, key=sort_key):
        value = state._mapping[key]
        shown = (
            _repr(value, indent + 1)
            if isinstance(value, State)
            else (repr(value) if isinstance(value, Variable) else _describe(value))
        )
        lines.append(f"{pad}{key!r}: {shown},")
    lines.append("  " * indent + "})")
    return "\n".join(lines)


def _state_flatten_with_keys(state: State) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
    keys = tuple(sorted(state._mapping, key=sort_key))
    m = state._mapping
    return [(jax.tree_util.DictKey(k), m[k]) for k in keys], keys


def _state_flatten(state: State) -> tuple[list[Any], tuple[Any, ...]]:
    keys = tuple(sorted(state._mapping, key=sort_key))
    m = state._mapping
    return [m[k] for k in keys], keys


def _state_unflatten(keys: tuple[Any, ...], children: Iterable[Any]) -> State:
    new = object.__new__(State)
    object.__setattr__(new, "_mapping", dict(zip(keys, children)))
    return new


jax.tree_util.register_pytree_with_keys(
    State, _state_flatten_with_keys, _state_unflatten, _state_flatten
)
