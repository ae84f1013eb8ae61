"""``nnx.List``: a list whose items may carry ``nnx.data`` / ``nnx.static`` marks, as flax.nnx's.

A plain ``list`` attribute is traversed already, so a List matters only where a mark does:
``nnx.List([nnx.data(1), nnx.static("a")])`` makes ``1`` a leaf (for JAX's pytree functions and
for ``split``/``state``) and keeps ``"a"`` static. Unmarked items are leaves when they hold
arrays, Variables or Modules, static otherwise (as flax.nnx's List). The marks follow the items
through ``append``, ``insert``, ``pop``, slicing assignments and ``sort``, and travel in the
GraphDef, so ``merge`` and the transforms rebuild a List with the same marks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, SupportsIndex

import jax

from ._data_attrs import ListMarks, Marked, has_data, is_data
from ._nodes import NodeImpl, register_internal


def _unwrap(value: Any) -> tuple[Any, bool | None]:
    if type(value) is Marked:
        return value.value, value.is_data
    return value, None


class List(list):  # type: ignore[type-arg]
    """A list whose items may be marked ``nnx.data(...)`` / ``nnx.static(...)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> ls = nnx.List([nnx.data(1), nnx.static("tag"), jnp.ones(2)])
        >>> ls[0], ls[1], len(jax.tree.leaves(ls))
        (1, 'tag', 2)
        >>> jax.tree.map(lambda x: x * 2, ls)[:2]
        [2, 'tag']
    """

    def __init__(self, items: Iterable[Any] = (), /):
        super().__init__()
        self.extend(items)

    # -- marks ---------------------------------------------------------------------------------
    @property
    def _marks(self) -> list[bool | None]:
        marks: list[bool | None] | None = self.__dict__.get("_nnx_marks")
        if marks is None or len(marks) != len(self):  # e.g. items appended by pickle first
            marks = self.__dict__["_nnx_marks"] = (marks or []) + [None] * (
                len(self) - len(marks or [])
            )
        return marks

    def is_data_at(self, i: int) -> bool:
        """Whether item ``i`` is a leaf: its mark, or whether it holds state."""
        mark = self._marks[i]
        if mark is not None:
            return mark
        item = self[i]
        return is_data(item) or bool(has_data(item))

    def marks(self) -> ListMarks:
        """The explicit marks, as the hashable record the GraphDef keeps."""
        marks = self._marks
        return ListMarks(
            frozenset(i for i, m in enumerate(marks) if m is True),
            frozenset(i for i, m in enumerate(marks) if m is False),
        )

    def _marked(self, values: Iterable[Any]) -> tuple[list[Any], list[bool | None]]:
        items, marks = [], []
        for v in values:
            value, mark = _unwrap(v)  # (nnx.static refused a value holding state already)
            items.append(value)
            marks.append(mark)
        return items, marks

    # -- the list operations that add, remove or move items ------------------------------------
    def append(self, value: Any, /) -> None:
        self.extend((value,))

    def extend(self, values: Iterable[Any], /) -> None:
        marks = self._marks
        items, new = self._marked(values)
        list.extend(self, items)
        marks.extend(new)

    def insert(self, index: SupportsIndex, value: Any, /) -> None:
        marks = self._marks
        (item,), (mark,) = self._marked((value,))
        list.insert(self, index, item)
        marks.insert(index, mark)

    def pop(self, index: SupportsIndex = -1, /) -> Any:
        marks = self._marks
        item = list.pop(self, index)
        marks.pop(index)
        return item

    def remove(self, value: Any, /) -> None:
        self.pop(self.index(value))

    def clear(self) -> None:
        list.clear(self)
        self._marks.clear()

    def reverse(self) -> None:
        marks = self._marks
        list.reverse(self)
        marks.reverse()

    def sort(self, *, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
        by = key if key is not None else (lambda x: x)
        pairs = sorted(zip(self, self._marks), key=lambda p: by(p[0]), reverse=reverse)
        list.__setitem__(self, slice(None), [p[0] for p in pairs])
        self.__dict__["_nnx_marks"] = [p[1] for p in pairs]

    def __setitem__(self, index: Any, value: Any) -> None:
        marks = self._marks
        if isinstance(index, slice):
            items, new = self._marked(value)
            list.__setitem__(self, index, items)
            marks[index] = new
        else:
            (item,), (mark,) = self._marked((value,))
            list.__setitem__(self, index, item)
            marks[index] = mark

    def __delitem__(self, index: Any) -> None:
        marks = self._marks
        list.__delitem__(self, index)
        del marks[index]

    def __iadd__(self, values: Iterable[Any]) -> List:  # type: ignore[override,misc]
        self.extend(values)
        return self

    def __imul__(self, n: SupportsIndex) -> List:  # type: ignore[override]
        marks = list(self._marks)
        list.__imul__(self, n)
        self.__dict__["_nnx_marks"] = marks * int(n)
        return self

    def __repr__(self) -> str:
        return f"List({list.__repr__(self)})"


def _with_marks(items: list[Any], marks: ListMarks) -> List:
    out = List()
    list.extend(out, items)
    out.__dict__["_nnx_marks"] = [
        True if i in marks.data else False if i in marks.static else None for i in range(len(items))
    ]
    return out


# -- JAX: a pytree whose children are the data items ---------------------------------------------
def _jax_flatten(x: List) -> tuple[list[Any], tuple[Any, ...]]:
    data = [i for i in range(len(x)) if x.is_data_at(i)]
    static = tuple((i, x[i]) for i in range(len(x)) if i not in set(data))
    return [x[i] for i in data], (len(x), tuple(data), static, x.marks())


def _jax_flatten_with_keys(x: List) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
    children, aux = _jax_flatten(x)
    keys = [jax.tree_util.SequenceKey(i) for i in aux[1]]
    return list(zip(keys, children)), aux


def _jax_unflatten(aux: tuple[Any, ...], children: Iterable[Any]) -> List:
    n, data, static, marks = aux
    items: list[Any] = [None] * n
    for i, c in zip(data, children):
        items[i] = c
    for i, v in static:
        items[i] = v
    return _with_marks(items, marks)


jax.tree_util.register_pytree_with_keys(List, _jax_flatten_with_keys, _jax_unflatten, _jax_flatten)

# -- the graph: a list node whose marks are part of the GraphDef ---------------------------------
register_internal(
    List,
    NodeImpl(
        flatten=lambda x: (list(enumerate(x)), x.marks()),
        create=lambda t, marks, children: _with_marks([c for _, c in children], marks),
        set_key=lambda x, k, v: list.__setitem__(x, k, v),
        pop_key=lambda x, k: x.pop(k),
        identity=False,
    ),
)

__all__ = ["List"]
