"""Variables: the state-carrying leaves of a model, and the kind name <-> type table."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import numpy as np

from ._tracing import TraceContextError, Tracer, current_trace

V = TypeVar("V", bound="Variable")

_NAME_TO_TYPE: dict[str, type[Variable]] = {}
_TYPE_TO_NAME: dict[type[Variable], str] = {}
_AUTO_NAMES: set[str] = set()
_SLOTS = frozenset({"_value", "_raw_value", "_meta", "_meta_key", "_trace", "_private"})
_structure_listeners: list[Callable[[], None]] = []


class _ById:
    """Hashable stand-in for an unhashable static value: equal only to the same object."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ById) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return repr(self.obj)


def hashable(value: Any) -> Any:
    """Return ``value`` if it is hashable, else a wrapper that hashes by identity."""
    try:
        hash(value)
    except TypeError:
        return _ById(value)
    return value


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
    return False


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return repr(value)
    dims = ",".join(str(d) for d in shape)
    if shape == () and not isinstance(value, Tracer) and not jax.dtypes.issubdtype(
        dtype, jax.dtypes.prng_key
    ):
        try:
            return f"{dtype}[]={np.asarray(value).item()!r}"
        except RuntimeError:  # e.g. a donated (deleted) buffer: show the type only
            pass
    return f"{dtype}[{dims}]"


class Variable:
    """A mutable box around one array (or any value) plus metadata; subclasses are *kinds*.

    ``v.value`` and ``v[...]`` read and write the value, array operators and ``jnp.asarray(v)``
    work on it, and keyword metadata (e.g. ``sharding_names``) rides along through
    ``split``/``merge`` and the transforms. A subclass is a new kind that filters match by
    ``isinstance``; give it a stable registered name with ``kind=``.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> v = nnx.Param(jnp.ones((2, 3)), sharding_names=("in", "out"))
        >>> v
        Param(float32[2,3], sharding_names=('in', 'out'))
        >>> (v + 1)[0, 0].item(), v.shape, v.sharding_names
        (2.0, (2, 3), ('in', 'out'))
        >>> v[...] = jnp.zeros((2, 3)); float(v.value.sum())
        0.0
        >>> class LoRAParam(nnx.Param, kind="example.LoRAParam"): pass
        >>> nnx.variable_name(LoRAParam), nnx.variable_type("example.LoRAParam") is LoRAParam
        ('example.LoRAParam', True)
    """

    # ``_private`` is True only while the value is an array that nnx_core.jit wrote as a fresh
    # output and that nothing has read since: reading ``_value`` (which every public read goes
    # through) clears it, and every other write stores False. jit donates such a buffer without
    # a copy; see docs/design/transforms.md.
    __slots__ = ("_raw_value", "_meta", "_meta_key", "_trace", "_private")
    _raw_value: Any
    _meta: dict[str, Any]
    _meta_key: tuple[Any, ...] | None
    _trace: Any
    _private: bool

    def __init_subclass__(cls, *, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register_pytree(cls)
        if kind is not None:
            register_variable_type(cls, kind)
        else:
            _register_auto(cls)

    def __init__(self, value: Any, **metadata: Any):
        if isinstance(value, Variable):
            value = value._value
        _set_value_slot(self, value)
        _set_meta_slot(self, metadata)
        _set_meta_key_slot(self, None)
        _set_trace_slot(self, current_trace())

    # -- value -------------------------------------------------------------------------------
    @property
    def _value(self) -> Any:
        """The value, read by something that may keep it (so it is no longer private)."""
        _set_private_slot(self, False)
        return self._raw_value

    @property
    def value(self) -> Any:
        """The wrapped value (usually a ``jax.Array``)."""
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        if has_tracer(value) and self._trace != current_trace():
            raise TraceContextError(
                f"Cannot set a traced value on {type(self).__name__}({_describe(self._raw_value)}): "
                "it was created outside the JAX transform that is running now. Pass the Module "
                "that owns it as an argument of the transform (e.g. nnx_core.jit(f)(model, x)) "
                "instead of capturing it from an enclosing scope."
            )
        if isinstance(value, Variable):
            value = value._value
        _set_value_slot(self, value)

    def __getitem__(self, index: Any) -> Any:
        return self._value if index is Ellipsis else self._value[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        if index is Ellipsis:
            self.value = value
        else:
            self.value = self._value.at[index].set(value)

    # -- metadata ----------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the metadata dict."""
        return dict(self._meta)

    def set_metadata(self, **metadata: Any) -> None:
        """Add or replace metadata entries."""
        self._meta.update(metadata)
        _set_meta_key_slot(self, None)
        for listener in _structure_listeners:
            listener()

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
        else:
            self.set_metadata(**{name: value})

    # -- copies ------------------------------------------------------------------------------
    def replace(self: V, value: Any = None, **metadata: Any) -> V:
        """Return a new Variable of the same kind with ``value`` and updated metadata."""
        new = object.__new__(type(self))
        _set_value_slot(new, self._value if value is None else value)
        _set_meta_slot(new, {**self._meta, **metadata})
        _set_meta_key_slot(new, None if metadata else self._meta_key)
        _set_trace_slot(new, current_trace())
        return new

    def copy(self: V) -> V:
        """A new Variable sharing the value array, with a copy of the metadata."""
        return self.replace()

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
        return self._value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self._value, dtype=dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._raw_value.shape

    @property
    def dtype(self) -> Any:
        return self._raw_value.dtype

    @property
    def ndim(self) -> int:
        return self._raw_value.ndim

    @property
    def size(self) -> int:
        return self._raw_value.size

    def __len__(self) -> int:
        return len(self._raw_value)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._value)

    def __bool__(self) -> bool:
        return bool(self._raw_value)

    def __float__(self) -> float:
        return float(self._raw_value)

    def __int__(self) -> int:
        return int(self._raw_value)

    def __index__(self) -> int:
        return operator.index(self._raw_value)

    def __repr__(self) -> str:
        parts = [_describe(self._raw_value)]
        parts += [f"{k}={v!r}" for k, v in self._meta.items()]
        return f"{type(self).__name__}({', '.join(parts)})"


_set_raw_value_slot = Variable._raw_value.__set__  # type: ignore[attr-defined,misc,union-attr]
_set_private_slot = Variable._private.__set__  # type: ignore[attr-defined,misc,union-attr]


def _set_value_slot(v: Variable, value: Any) -> None:
    """Store a value that something else may also hold (every write but jit's fresh outputs)."""
    _set_raw_value_slot(v, value)
    _set_private_slot(v, False)


_set_meta_slot = Variable._meta.__set__  # type: ignore[attr-defined,misc,union-attr]
_set_meta_key_slot = Variable._meta_key.__set__  # type: ignore[attr-defined,misc,union-attr]
_set_trace_slot = Variable._trace.__set__  # type: ignore[attr-defined,misc,union-attr]


def _binary(op: Callable[[Any, Any], Any]) -> tuple[Callable, Callable, Callable]:
    def forward(self: Variable, other: Any) -> Any:
        return op(self._value, other._value if isinstance(other, Variable) else other)

    def reflected(self: Variable, other: Any) -> Any:
        return op(other, self._value)

    def inplace(self: Variable, other: Any) -> Variable:
        self.value = forward(self, other)
        return self

    return forward, reflected, inplace


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
              "xor", "lshift", "rshift"):
    _op = getattr(operator, _name if _name not in ("and", "or") else f"{_name}_")
    _f, _r, _i = _binary(_op)
    setattr(Variable, f"__{_name}__", _f)
    setattr(Variable, f"__r{_name}__", _r)
    setattr(Variable, f"__i{_name}__", _i)
for _name in ("lt", "le", "gt", "ge"):
    setattr(Variable, f"__{_name}__", _binary(getattr(operator, _name))[0])
for _name in ("neg", "pos", "abs", "invert"):
    setattr(Variable, f"__{_name}__", (lambda op: lambda self: op(self._value))(getattr(operator, _name)))


class _Aux:
    """Pytree aux data of a Variable: compared and hashed by its metadata key only."""

    __slots__ = ("key", "meta")

    def __init__(self, key: tuple[Any, ...], meta: dict[str, Any]):
        self.key = key
        self.meta = meta

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Aux) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return repr(self.meta)


def _register_pytree(cls: type[Variable]) -> None:
    key = jax.tree_util.GetAttrKey("value")

    def flatten_with_keys(v: Variable) -> tuple[tuple[tuple[Any, Any], ...], _Aux]:
        return ((key, v._value),), _Aux(v.meta_key(), v._meta)

    def flatten(v: Variable) -> tuple[tuple[Any], _Aux]:
        return (v._value,), _Aux(v.meta_key(), v._meta)

    def unflatten(aux: _Aux, children: Any) -> Variable:
        new = object.__new__(cls)
        _set_value_slot(new, children[0])
        _set_meta_slot(new, dict(aux.meta))
        _set_meta_key_slot(new, aux.key)
        _set_trace_slot(new, current_trace())
        return new

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)


# -- the kind name <-> type table ----------------------------------------------------------------
def _auto_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _register_auto(cls: type[Variable]) -> None:
    name = _auto_name(cls)
    if name in _NAME_TO_TYPE and name not in _AUTO_NAMES:
        return  # an explicit registration owns this name; the class stays unnamed until registered
    old = _NAME_TO_TYPE.get(name)
    if old is not None:
        _TYPE_TO_NAME.pop(old, None)
    _NAME_TO_TYPE[name] = cls
    _TYPE_TO_NAME[cls] = name
    _AUTO_NAMES.add(name)


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
    holder = _NAME_TO_TYPE.get(name)
    # the same class defined again (a module reloaded or imported twice, a notebook cell
    # re-run) takes the name over; a different class is an error
    redefined = holder is not None and _auto_name(holder) == _auto_name(cls)
    if holder is not None and holder is not cls and name not in _AUTO_NAMES and not redefined:
        raise ValueError(
            f"Variable kind name {name!r} is already registered to "
            f"{_auto_name(holder)}; cannot also register {_auto_name(cls)}. "
            "Choose a namespaced name such as 'mypackage.MyKind'."
        )
    current = _TYPE_TO_NAME.get(cls)
    if current == name and name not in _AUTO_NAMES:
        return cls
    if current is not None and current != name:
        if current not in _AUTO_NAMES:
            raise ValueError(
                f"{_auto_name(cls)} is already registered as {current!r}; "
                f"it cannot also be registered as {name!r}."
            )
        del _NAME_TO_TYPE[current]
        _AUTO_NAMES.discard(current)
    if holder is not None and holder is not cls:
        _TYPE_TO_NAME.pop(holder, None)
    _AUTO_NAMES.discard(name)
    _NAME_TO_TYPE[name] = cls
    _TYPE_TO_NAME[cls] = name
    return cls


def variable_type(name: str) -> type[Variable]:
    """Return the Variable kind registered under ``name``.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.variable_type("Param") is nnx.Param
        True

    Raises:
        KeyError: no kind has that name; the message lists the registered names.
    """
    try:
        return _NAME_TO_TYPE[name]
    except KeyError:
        known = ", ".join(sorted(n for n in _NAME_TO_TYPE if n not in _AUTO_NAMES))
        raise KeyError(
            f"No Variable kind is registered as {name!r}. Registered kinds: {known}. "
            "A plugin's kinds are registered when nnx_plugins loads them."
        ) from None


def variable_name(cls: type[Variable]) -> str:
    """Return the registered name of the Variable kind ``cls``.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.variable_name(nnx.BatchStat)
        'BatchStat'
    """
    try:
        return _TYPE_TO_NAME[cls]
    except KeyError:
        raise KeyError(f"{cls!r} is not a registered Variable kind.") from None


def registered_variable_types() -> dict[str, type[Variable]]:
    """All registered kinds by name (explicit and automatic names)."""
    return dict(_NAME_TO_TYPE)


_register_pytree(Variable)
register_variable_type(Variable, "Variable")


class Param(Variable, kind="Param"):
    """A trainable parameter: what ``grad`` and ``Optimizer`` act on by default.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Param
        >>> Param(jnp.zeros(3)).shape
        (3,)
    """


class BatchStat(Variable, kind="BatchStat"):
    """A statistic updated during training (e.g. BatchNorm running mean), not by gradients.

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import BatchStat
        >>> BatchStat(jnp.ones(2)).value.tolist()
        [1.0, 1.0]
    """


class Cache(Variable, kind="Cache"):
    """Values cached between calls (e.g. attention key/value caches).

    Example:
        >>> import jax.numpy as jnp
        >>> from nnx_core import Cache
        >>> Cache(jnp.zeros((4, 2))).shape
        (4, 2)
    """


class Intermediate(Variable, kind="Intermediate"):
    """Values recorded with ``Module.sow`` for inspection.

    Example:
        >>> from nnx_core import Intermediate
        >>> Intermediate(()).value
        ()
    """
