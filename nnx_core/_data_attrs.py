"""flax.nnx's explicit data / static attribute marks: ``nnx.data(x)``, ``nnx.static(x)``,
``nnx.Data[T]`` / ``nnx.Static[T]`` annotations and ``nnx.dataclass``.

Here an attribute is state or static by its value's type (arrays, Variables and nodes are
state), so a mark matters only where it changes that: ``nnx.data(1)`` makes a Python value a
leaf of the pytree (as an array would be), and ``nnx.static(...)`` keeps a value static, which
is an error for a value that holds state. The marks of an object are a static attribute of it
(``_nnx_data_marks``, part of its GraphDef), class-level marks (annotations, dataclass fields)
are kept per class; the traversal reads both.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, TypeVar

import jax

from ._nodes import ARRAY, STATIC, impl_for, is_array
from ._variables import Variable

A = TypeVar("A")
T = TypeVar("T", bound=type)
MARKS_ATTR = "_nnx_data_marks"  # (name, is_data) pairs set by nnx.data / nnx.static
_FIELD_KEY = "nnx_data"  # dataclass field metadata: True (data) / False (static)
CLASS_MARKS: dict[type, dict[str, bool]] = {}  # per class: annotated / dataclass-field marks
_MISSING: Any = dataclasses.MISSING


class _DataMark:
    """What ``Data[T]`` annotates with."""


class _StaticMark:
    """What ``Static[T]`` annotates with."""


Data = Annotated[A, _DataMark]
Static = Annotated[A, _StaticMark]


class ListMarks(typing.NamedTuple):
    """The marked items of an ``nnx.List`` (its GraphDef aux): indices marked data, static."""

    data: frozenset[int]
    static: frozenset[int]


class Marked:
    """A value with a mark, to be assigned to an attribute (which takes the mark)."""

    __slots__ = ("value", "is_data")

    def __init__(self, value: Any, is_data: bool):
        self.value = value
        self.is_data = is_data

    def __repr__(self) -> str:
        return f"{'data' if self.is_data else 'static'}({self.value!r})"


def _field_or_mark(value: Any, kwargs: dict[str, Any], is_data: bool, name: str) -> Any:
    if value is not _MISSING and kwargs:
        raise TypeError(
            f"nnx.{name}() takes either a value (to assign to an attribute) or dataclass field "
            f"arguments (default=, default_factory=, ...), not both; got {sorted(kwargs)}."
        )
    if value is _MISSING:
        metadata = dict(kwargs.pop("metadata", None) or {})
        metadata[_FIELD_KEY] = is_data
        return dataclasses.field(**kwargs, metadata=metadata)
    if not is_data:
        check_static(value, "nnx.static")
    return Marked(value, is_data)


def data(value: Any = _MISSING, /, **field_kwargs: Any) -> Any:
    """Mark an attribute as pytree data: ``self.count = nnx.data(0)`` makes ``0`` a leaf.

    Without a value it is a dataclass field specifier: ``a: int = nnx.data(default=3)``.

    Example:
        >>> import jax
        >>> import nnx_core as nnx
        >>> class Foo(nnx.Pytree):
        ...     def __init__(self):
        ...         self.a = nnx.data(1)
        ...         self.b = nnx.static(2)
        >>> jax.tree.leaves(Foo())
        [1]

    Raises:
        TypeError: a value and dataclass field arguments at once.
    """
    return _field_or_mark(value, field_kwargs, True, "data")


def static(value: Any = _MISSING, /, **field_kwargs: Any) -> Any:
    """Mark an attribute as static (part of the GraphDef, never a leaf).

    Raises:
        ValueError: the value holds state (an array, a Variable, a Module).
        TypeError: a value and dataclass field arguments at once.
    """
    return _field_or_mark(value, field_kwargs, False, "static")


def is_data(value: Any, /) -> bool:
    """Whether ``value`` is state by its type: an array, a Variable or a graph node (a Module;
    plain lists, tuples and dicts are containers, not data).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> nnx.is_data(jnp.ones(1)), nnx.is_data(nnx.Param(1)), nnx.is_data(1)
        (True, True, False)
    """
    t = type(value)
    node = impl_for(t) is not None and t not in (list, tuple, dict)  # containers are not data
    return node or isinstance(value, Variable) or is_array(value)


def has_data(value: Any, /) -> list[Any]:
    """The arrays, Variables and graph nodes found in ``value`` (a pytree of them).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> len(nnx.has_data([1, "a", jnp.ones(1)])), nnx.has_data((1, 2))
        (1, [])
    """
    leaves = jax.tree_util.tree_leaves(value, is_leaf=is_data)
    return [x for x in leaves if is_data(x)]


def check_static(value: Any, where: str, phrase: str = "Found data in value of type") -> None:
    found = [value] if is_data(value) else has_data(value)
    if found:
        raise ValueError(
            f"{where}: {phrase} {type(value).__name__} "
            f"({type(found[0]).__name__}): a static attribute cannot hold arrays, Variables or "
            "Modules. Assign it without nnx.static, or wrap the array in a Variable."
        )


def set_mark(d: dict[str, Any], name: str, is_data: bool) -> tuple[tuple[str, bool], ...] | None:
    """The object's new marks with ``name`` marked, or None if they do not change."""
    marks = dict(d.get(MARKS_ATTR, ()))
    if marks.get(name) is is_data:
        return None
    marks[name] = is_data
    return tuple(sorted(marks.items()))


def data_names(t: type, d: dict[str, Any]) -> frozenset[str] | None:
    """The attributes of an object of type ``t`` (its ``__dict__`` is ``d``) marked as data;
    None when it has no marks (the common case: two dict lookups)."""
    cls = CLASS_MARKS.get(t)
    own = d.get(MARKS_ATTR)
    if cls is None and own is None:
        return None
    marks = {**(cls or {}), **dict(own or ())}
    return frozenset(k for k, v in marks.items() if v)


def mark_kinds(
    keys: tuple[Any, ...], kinds: tuple[int, ...], names: frozenset[Any]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``kinds`` with the static children named in ``names`` made leaves (like arrays)."""
    new = tuple(ARRAY if k == STATIC and key in names else k for key, k in zip(keys, kinds))
    return new, tuple(j for j, k in enumerate(new) if k != STATIC)


def class_marks(cls: type) -> None:
    """Record the ``Data[...]`` / ``Static[...]`` annotations and ``nnx.data()`` /
    ``nnx.static()`` dataclass fields of ``cls`` (and its bases)."""
    marks: dict[str, bool] = {}
    for base in reversed(cls.__mro__):
        marks.update(CLASS_MARKS.get(base, {}))
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # unresolvable forward references: annotations are optional here
        hints = {}
    for name, hint in hints.items():
        extras = getattr(hint, "__metadata__", ())
        if _DataMark in extras or _StaticMark in extras:
            marks[name] = _DataMark in extras
    for f in getattr(cls, "__dataclass_fields__", {}).values():
        if _FIELD_KEY in f.metadata:
            marks[f.name] = f.metadata[_FIELD_KEY]
    if marks:
        CLASS_MARKS[cls] = marks


def dataclass(cls: T | None = None, /, **kwargs: Any) -> Any:
    """``dataclasses.dataclass`` for a Pytree or Module whose fields may be ``nnx.data()`` /
    ``nnx.static()`` (as flax.nnx's ``nnx.dataclass``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> @nnx.dataclass
        ... class Foo(nnx.Pytree):
        ...     a: int = nnx.data()
        ...     b: int = nnx.static()
        ...     c: jax.Array
        >>> len(jax.tree.leaves(Foo(a=1, b=2, c=jnp.ones(2))))
        2
    """
    kwargs.setdefault("repr", False)  # the Pytree's own repr

    def wrap(c: T) -> T:
        out: Any = dataclasses.dataclass(c, **kwargs)
        class_marks(out)
        return typing.cast(T, out)

    return wrap if cls is None else wrap(cls)
