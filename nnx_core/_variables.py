"""Variables: the state-carrying leaves of a model, their accessor API and the built-in kinds.

The kind name <-> type table lives in ``_kinds``; this module registers each new subclass there.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, cast

import jax
import numpy as np

from ._kinds import (
    register_auto,
    register_name,
    registered_variable_types,
    variable_name,
    variable_type,
)
from ._tracing import TraceContextError, Tracer, current_trace
from ._values import MISSING, _ById, _describe, hashable
from ._variable_metadata import VariableMetadata
from ._variable_ops import install_operators, register_pytree

A = TypeVar("A")
V = TypeVar("V", bound="Variable[Any]")

_SLOTS = frozenset({"_value", "_raw_value", "_meta", "_meta_key", "_trace", "_private"})
_structure_listeners: list[Callable[[], None]] = []

__all__ = [  # private helpers are re-exported for the graph modules
    "A",
    "MISSING",
    "BatchStat",
    "Cache",
    "Intermediate",
    "Param",
    "Perturbation",
    "Variable",
    "_ById",
    "_describe",
    "has_tracer",
    "hashable",
    "register_variable_type",
    "registered_variable_types",
    "variable_name",
    "variable_type",
]


# types seen by has_tracer that are neither tracers nor containers (concrete arrays, scalars):
# a value of one of these holds no tracer, which hot paths check with one set lookup
UNTRACED: set[type] = set()


def has_tracer(value: Any) -> bool:
    """True if ``value`` is a tracer or a plain container (e.g. a sown tuple) holding one."""
    if isinstance(value, Tracer):
        return True
    if isinstance(value, Variable):
        return has_tracer(value._raw_value)
    if isinstance(value, (tuple, list)):
        return any(has_tracer(x) for x in value)
    if isinstance(value, dict):
        return any(has_tracer(x) for x in value.values())
    UNTRACED.add(type(value))
    return False


def _notify_structure_change() -> None:
    for listener in _structure_listeners:
        listener()


class Variable(Generic[A]):
    """A mutable box around one array (or any value) plus metadata; subclasses are *kinds*.

    ``v.value``, ``v[...]``, ``get_value``/``set_value`` read and write the value, array
    operators and ``jnp.asarray(v)`` work on it, and keyword metadata (e.g. ``sharding_names``)
    rides along through ``split``/``merge`` and the transforms. A subclass is a new kind that
    filters match by ``isinstance``; give it a stable registered name with ``kind=``. A subclass
    may override ``create_value`` (run once, at construction), ``get_value`` and ``set_value``
    (every user read and write) to transform values; the graph API and the transforms move raw
    values (``get_raw_value``) and do not call them.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> v = nnx.Param(jnp.ones((2, 3)), sharding_names=("in", "out"))
        >>> v
        Param(float32[2,3], sharding_names=('in', 'out'))
        >>> (v + 1)[0, 0].item(), v.shape, v.sharding_names
        (2.0, (2, 3), ('in', 'out'))
        >>> v[...] = jnp.zeros((2, 3)); float(v.get_value().sum())
        0.0
        >>> class Count(nnx.Variable[nnx.A], kind="example.Count"): pass
        >>> nnx.variable_name(Count), nnx.variable_type("example.Count") is Count
        ('example.Count', True)
    """

    # ``_private`` is True only while the value is an array that nnx_core.jit wrote as a fresh
    # output and that nothing has read since: reading ``_value`` (which every read that may keep
    # the value goes through) clears it, and every other write stores False. jit donates such a
    # buffer without a copy; see docs/design/transforms.md.
    __slots__ = ("_raw_value", "_meta", "_meta_key", "_trace", "_private")
    _raw_value: Any
    _private: bool
    _meta: dict[str, Any]
    _meta_key: tuple[Any, ...] | None
    _trace: Any

    def __init_subclass__(cls, *, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_pytree(cls)
        if kind is not None:
            register_variable_type(cls, kind)
        else:
            register_auto(cls)

    def __init__(self, value: A | VariableMetadata[A], **metadata: Any):
        if isinstance(value, VariableMetadata):
            metadata = {**metadata, **value.metadata}
            value = value.raw_value
        if isinstance(value, Variable):
            value = value._value
        value = cast(A, value)
        _set_value_slot(self, value)
        _set_meta_slot(self, metadata)
        _set_meta_key_slot(self, None if metadata else ())  # (no metadata: its key is known)
        _set_trace_slot(self, current_trace())
        _set_value_slot(self, self.create_value(value))

    @classmethod
    def from_metadata(cls: type[V], value: Any, metadata: dict[str, Any]) -> V:
        """A Variable of this kind with ``value`` and ``metadata``, without running ``create_value``.

        Example:
            >>> import nnx_core as nnx
            >>> nnx.Param.from_metadata(1.0, {"note": "x"})
            Param(1.0, note='x')
        """
        new = object.__new__(cls)
        _set_value_slot(new, value)
        _set_meta_slot(new, dict(metadata))
        _set_meta_key_slot(new, None if metadata else ())
        _set_trace_slot(new, current_trace())
        return new

    @property
    def var_type(self) -> type[Variable[Any]]:
        """The kind of this Variable (its class)."""
        return type(self)

    # -- value -------------------------------------------------------------------------------
    @property
    def _value(self) -> Any:
        """The value, read by something that may keep it (so it is no longer private)."""
        _set_private_slot(self, False)
        return self._raw_value

    def _peek(self) -> Any:
        """The value for a read that keeps no reference to it (shape, dtype, conversions)."""
        if type(self).get_value is Variable.get_value:
            return self._raw_value
        return self.get_value()

    def create_value(self, value: A) -> A:
        """Hook run once on the value given to the constructor; returns the value to store."""
        return value

    def get_value(self, *, index: Any = MISSING) -> A:
        """The value, or ``value[index]`` when ``index`` is given (``...`` is the whole value).

        Example:
            >>> import jax.numpy as jnp
            >>> import nnx_core as nnx
            >>> v = nnx.Param(jnp.arange(3.0))
            >>> v.get_value().tolist(), v.get_value(index=1).item()
            ([0.0, 1.0, 2.0], 1.0)
        """
        value = self._value
        if index is MISSING or index is Ellipsis:
            return value
        return value[index]  # type: ignore[no-any-return]

    def set_value(self, value: A, *, index: Any = MISSING) -> None:
        """Replace the value, or write ``value`` into ``value[index]``.

        With ``index``, a ``jax.Array`` is updated functionally (``.at[index].set``, so the
        shape and dtype are kept and ``value`` broadcasts); ``index=...`` with an array of the
        same shape, dtype and sharding simply replaces it. Other values (numpy arrays, lists)
        are assigned into in place.

        Example:
            >>> import jax.numpy as jnp
            >>> import nnx_core as nnx
            >>> v = nnx.Param(jnp.zeros(3))
            >>> v.set_value(1.0, index=1); v.get_value().tolist()
            [0.0, 1.0, 0.0]
            >>> v.set_value(2.0, index=...); v.get_value().tolist()
            [2.0, 2.0, 2.0]

        Raises:
            TraceContextError: ``value`` is traced under a transform this Variable was not
                created under.
            TypeError: the value cannot be assigned into by index (e.g. a tuple).
        """
        if isinstance(value, Variable):
            value = value._value
        if index is MISSING:
            self.set_raw_value(value)
            return
        old = self._raw_value
        if isinstance(old, jax.Array):
            if index is Ellipsis and _same_array_type(old, value):
                self.set_raw_value(value)
            else:
                self._check_trace(value)
                _set_value_slot(self, old.at[index].set(value))
            return
        if index is Ellipsis and not isinstance(old, np.ndarray):
            self.set_raw_value(value)
            return
        self._check_trace(value)
        try:
            old[index] = value
        except TypeError:
            raise TypeError(
                f"{type(self).__name__} holds a {type(old).__name__}, which cannot be assigned "
                f"into at index {index!r}. Replace the whole value instead: v.set_value(new)."
            ) from None

    def get_raw_value(self) -> A:
        """The stored value, bypassing any ``get_value`` override.

        Example:
            >>> import nnx_core as nnx
            >>> v = nnx.Param(1.0); v.set_raw_value(2.0); v.get_raw_value()
            2.0
        """
        return self._value  # type: ignore[no-any-return]

    def set_raw_value(self, value: A) -> None:
        """Store ``value`` as is, bypassing any ``set_value`` override.

        Raises:
            TraceContextError: ``value`` is traced under a transform this Variable was not
                created under.
        """
        self._check_trace(value)
        _set_value_slot(self, value)

    def _check_trace(self, value: Any) -> None:
        if has_tracer(value) and self._trace != current_trace():
            raise TraceContextError(
                f"Cannot set a traced value on {type(self).__name__}({_describe(self._raw_value)}): "
                "it was created outside the JAX transform that is running now. Pass the Module "
                "that owns it as an argument of the transform (e.g. nnx_core.jit(f)(model, x)) "
                "instead of capturing it from an enclosing scope."
            )

    @property
    def value(self) -> A:
        """The wrapped value (usually a ``jax.Array``); reads ``get_value()``, writes ``set_value``."""
        return self.get_value()

    @value.setter
    def value(self, value: A) -> None:
        self.set_value(value)

    def __getitem__(self, index: Any) -> Any:
        return self.get_value(index=index)

    def __setitem__(self, index: Any, value: Any) -> None:
        self.set_value(value, index=index)

    # -- metadata ----------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the metadata dict."""
        return dict(self._meta)

    def get_metadata(self, name: str | None = None, default: Any = MISSING) -> Any:
        """A copy of all metadata, or the entry ``name`` (``default`` if it is absent).

        Example:
            >>> import nnx_core as nnx
            >>> v = nnx.Param(1.0, note="x")
            >>> v.get_metadata(), v.get_metadata("note"), v.get_metadata("lr", 0.1)
            ({'note': 'x'}, 'x', 0.1)

        Raises:
            KeyError: ``name`` is absent and no ``default`` was given.
            TypeError: a ``default`` without a ``name``.
        """
        if name is None:
            if default is not MISSING:
                raise TypeError(
                    f"get_metadata got default={default!r} but no name; pass the name of the "
                    "entry, e.g. v.get_metadata('sharding_names', None)."
                )
            return dict(self._meta)
        if name in self._meta:
            return self._meta[name]
        if default is not MISSING:
            return default
        raise KeyError(
            f"{type(self).__name__} has no metadata {name!r}; metadata keys: "
            f"{sorted(self._meta)}. Pass a default: v.get_metadata({name!r}, None)."
        )

    def set_metadata(self, *args: Any, **metadata: Any) -> None:
        """Change metadata: ``set_metadata(key=value, ...)`` or ``set_metadata("key", value)``
        add or replace entries; ``set_metadata({...})`` replaces all metadata.

        Example:
            >>> import nnx_core as nnx
            >>> v = nnx.Param(1.0, a=1)
            >>> v.set_metadata(b=2); v.set_metadata("c", 3); v.metadata
            {'a': 1, 'b': 2, 'c': 3}
            >>> v.set_metadata({"only": True}); v.metadata
            {'only': True}

        Raises:
            TypeError: positional and keyword arguments mixed, or no / too many arguments.
        """
        if args and metadata:
            raise TypeError(
                f"set_metadata takes keyword arguments or positional ones, not both; got "
                f"{args!r} and {sorted(metadata)}."
            )
        if len(args) == 1 and isinstance(args[0], dict):
            self._meta.clear()
            self._meta.update(args[0])
        elif len(args) == 2 and isinstance(args[0], str):
            self._meta[args[0]] = args[1]
        elif metadata and not args:
            self._meta.update(metadata)
        else:
            raise TypeError(
                f"set_metadata expects set_metadata(key=value, ...), set_metadata('key', value) "
                f"or set_metadata({{...}}), got the positional arguments {args!r}."
            )
        _set_meta_key_slot(self, None)
        _notify_structure_change()

    def has_metadata(self, name: str) -> bool:
        """Whether the metadata has an entry ``name``."""
        return name in self._meta

    def del_metadata(self, name: str) -> None:
        """Remove the metadata entry ``name``.

        Example:
            >>> import nnx_core as nnx
            >>> v = nnx.Param(1.0, note="x"); v.del_metadata("note"); v.has_metadata("note")
            False

        Raises:
            KeyError: there is no such entry.
        """
        if name not in self._meta:
            raise KeyError(
                f"{type(self).__name__} has no metadata {name!r} to delete; metadata keys: "
                f"{sorted(self._meta)}."
            )
        del self._meta[name]
        _set_meta_key_slot(self, None)
        _notify_structure_change()

    def meta_key(self) -> tuple[Any, ...]:
        """Hashable, order-independent form of the metadata (cached)."""
        key = self._meta_key
        if key is None:
            key = tuple(sorted((k, hashable(v)) for k, v in self._meta.items()))
            _set_meta_key_slot(self, key)
        return key

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _SLOTS:
            raise AttributeError(name)
        meta = self._meta
        if name in meta:
            return meta[name]
        try:
            return getattr(self._value, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no metadata {name!r} and its value of type "
                f"{type(self._raw_value).__name__} has no attribute {name!r}; metadata keys: "
                f"{sorted(meta)}"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "value":
            object.__setattr__(self, name, value)
        elif name in _SLOTS:
            raise AttributeError(f"{name} is internal to Variable; set `.value` instead")
        elif name.startswith("__"):  # e.g. typing's __orig_class__ from Variable[int](...)
            raise AttributeError(
                f"{type(self).__name__} does not store the special attribute {name!r}; "
                "metadata names may not start with '__'."
            )
        else:
            self.set_metadata(**{name: value})

    # -- copies ------------------------------------------------------------------------------
    def replace(self: V, value: Any = MISSING, **metadata: Any) -> V:
        """A new Variable of the same kind with ``value`` (default: the same) and updated metadata.

        Example:
            >>> import nnx_core as nnx
            >>> nnx.Param(1.0, a=1).replace(2.0, b=2)
            Param(2.0, a=1, b=2)
        """
        new = object.__new__(type(self))
        _set_value_slot(new, self._value if value is MISSING else value)
        _set_meta_slot(new, {**self._meta, **metadata})
        _set_meta_key_slot(new, None if metadata else self._meta_key)
        _set_trace_slot(new, current_trace())
        return new

    def copy(self: V, value: Any = MISSING, **metadata: Any) -> V:
        """A new Variable sharing the value array, with a copy of the metadata (see ``replace``)."""
        return self.replace(value, **metadata)

    def copy_from(self, other: Variable[A]) -> None:
        """Take the value and the metadata of ``other``, a Variable of the same kind, in place.

        Example:
            >>> import nnx_core as nnx
            >>> a, b = nnx.Param(1.0), nnx.Param(2.0, note="b")
            >>> a.copy_from(b); a
            Param(2.0, note='b')

        Raises:
            ValueError: ``other`` is of another kind.
        """
        if type(other) is not type(self):
            raise ValueError(
                f"copy_from: cannot copy a {type(other).__name__} into a "
                f"{type(self).__name__}; both must be the same kind. Use "
                f"v.set_value(other.get_value()) to copy only the value."
            )
        if other is self:
            return
        self.set_raw_value(other._value)
        if other._meta != self._meta:
            self.set_metadata(dict(other._meta))

    def update_from_state(self, state: Variable[A]) -> None:
        """Take the value and metadata of ``state`` (any kind) in place."""
        self.set_raw_value(state._value)
        if state._meta != self._meta:
            self.set_metadata(dict(state._meta))

    def __getstate__(self) -> tuple[Any, dict[str, Any]]:
        # copy, deepcopy and pickle: value and metadata only (the trace is not picklable)
        return self._value, self._meta

    def __setstate__(self, state: tuple[Any, dict[str, Any]]) -> None:
        _set_value_slot(self, state[0])
        _set_meta_slot(self, dict(state[1]))
        _set_meta_key_slot(self, None)
        _set_trace_slot(self, current_trace())

    # -- array protocol ----------------------------------------------------------------------
    def __jax_array__(self) -> Any:
        return self.get_value()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.get_value(), dtype=dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._peek().shape  # type: ignore[no-any-return]

    @property
    def dtype(self) -> Any:
        return self._peek().dtype

    @property
    def ndim(self) -> int:
        return self._peek().ndim  # type: ignore[no-any-return]

    @property
    def size(self) -> int:
        return self._peek().size  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._peek())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get_value())  # type: ignore[call-overload]

    def __contains__(self, item: Any) -> bool:
        return item in self.get_value()  # type: ignore[operator]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.get_value()(*args, **kwargs)  # type: ignore[operator]

    def __bool__(self) -> bool:
        return bool(self._peek())

    def __float__(self) -> float:
        return float(self._peek())

    def __int__(self) -> int:
        return int(self._peek())

    def __index__(self) -> int:
        return operator.index(self._peek())

    def __repr__(self) -> str:
        parts = [_describe(self._raw_value)]
        parts += [f"{k}={v!r}" for k, v in self._meta.items()]
        return f"{type(self).__name__}({', '.join(parts)})"


def _same_array_type(old: jax.Array, new: Any) -> bool:
    return (
        isinstance(new, jax.Array)
        and new.shape == old.shape
        and new.dtype == old.dtype
        and _sharding(new) == _sharding(old)
    )


def _sharding(x: Any) -> Any:
    """A concrete array's sharding; None for a tracer, without asking it: a tracer's
    ``.sharding`` raises an error whose message scans every equation traced so far, which made
    ``v[...] = x`` for each of n Variables inside a transform cost O(n^2)."""
    return None if isinstance(x, Tracer) else getattr(x, "sharding", None)


_set_raw_value_slot = Variable._raw_value.__set__  # type: ignore[attr-defined,misc,union-attr]
_set_private_slot = Variable._private.__set__  # type: ignore[attr-defined,misc,union-attr]


def _set_value_slot(v: Variable[Any], value: Any) -> None:
    """Store a value that something else may also hold (every write but jit's fresh outputs)."""
    _set_raw_value_slot(v, value)
    _set_private_slot(v, False)


_set_meta_slot = Variable._meta.__set__  # type: ignore[attr-defined,misc,union-attr]
_set_meta_key_slot = Variable._meta_key.__set__  # type: ignore[attr-defined,misc,union-attr]
_set_trace_slot = Variable._trace.__set__  # type: ignore[attr-defined,misc,union-attr]


def register_variable_type(cls: type[Variable], name: str) -> type[Variable]:
    """Give the Variable kind ``cls`` the stable name ``name`` used by string filters and files.

    Registering the same pair again is a no-op, and a class defined again under the same
    module and qualified name (a reloaded module, a re-run notebook cell) takes its name over.
    A name held by another type, or a type that already has another explicit name, is an
    error naming both.

    Example:
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Variable): pass
        >>> nnx.register_variable_type(Scale, "docs.Scale").__name__
        'Scale'
        >>> nnx.variable_name(Scale)
        'docs.Scale'

    Raises:
        TypeError: ``cls`` is not a Variable subclass or ``name`` is not a non-empty string.
        ValueError: the name or the type is already registered to something else.
    """
    if not (isinstance(cls, type) and issubclass(cls, Variable)):
        raise TypeError(
            f"register_variable_type expects a subclass of nnx_core.Variable, got {cls!r}. "
            "Define it as `class MyKind(nnx_core.Variable): ...`."
        )
    if not isinstance(name, str) or not name:
        raise TypeError(f"A Variable kind name must be a non-empty string, got {name!r}.")
    register_name(cls, name)
    return cls


install_operators(Variable)
register_pytree(Variable)
register_variable_type(Variable, "Variable")


class Param(Variable[A], kind="Param"):
    """A trainable parameter: what ``grad`` and ``Optimizer`` act on by default.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Param
        >>> Param(jnp.zeros(3)).shape
        (3,)
    """


class BatchStat(Variable[A], kind="BatchStat"):
    """A statistic updated during training (e.g. BatchNorm running mean), not by gradients.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import BatchStat
        >>> BatchStat(jnp.ones(2)).value.tolist()
        [1.0, 1.0]
    """


class Cache(Variable[A], kind="Cache"):
    """Values cached between calls (e.g. attention key/value caches).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Cache
        >>> Cache(jnp.zeros((4, 2))).shape
        (4, 2)
    """


class Intermediate(Variable[A], kind="Intermediate"):
    """Values recorded with ``Module.sow`` for inspection.

    Example:
        >>> from nnx_core import Intermediate
        >>> Intermediate(()).value
        ()
    """


class Perturbation(Intermediate[A], kind="Perturbation"):
    """A zero added to an intermediate value by ``Module.perturb``, whose gradient is the
    gradient with respect to that value.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Intermediate, Perturbation
        >>> isinstance(Perturbation(jnp.zeros(2)), Intermediate)
        True
    """
