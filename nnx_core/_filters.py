"""Filters select Variables by kind, path or predicate; they compose with All/Any/Not.

Every filter form is turned into a predicate ``(path, value) -> bool`` by :func:`to_predicate`,
where ``path`` is the tuple of attribute names / indices from the root and ``value`` the
Variable (or raw array).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._kinds import find_variable_type
from ._variables import Variable, variable_type

Path = tuple[Any, ...]
Predicate = Callable[[Path, Any], bool]
Filter = Any


@dataclass(frozen=True)
class OfType:
    """Match values that are instances of ``type``.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> nnx.OfType(nnx.Param)((), nnx.Param(jnp.zeros(1)))
        True
    """

    type: type

    def __call__(self, path: Path, value: Any) -> bool:
        return isinstance(value, self.type)

    def __repr__(self) -> str:
        return f"OfType({self.type.__name__})"


@dataclass(frozen=True)
class PathContains:
    """Match values whose path contains ``key`` (an attribute name or an index).

    With ``exact=False`` a path part matches when ``str(key)`` is a substring of it, so
    ``PathContains("attn", exact=False)`` matches ``encoder.self_attn.kernel``.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.PathContains("encoder")(("encoder", "kernel"), None)
        True
        >>> nnx.PathContains("attn", exact=False)(("self_attn", "kernel"), None)
        True
    """

    key: Any
    exact: bool = True

    def __call__(self, path: Path, value: Any) -> bool:
        if self.exact:
            return self.key in path
        key = str(self.key)
        return any(key in str(part) for part in path)

    def __repr__(self) -> str:
        exact = "" if self.exact else ", exact=False"
        return f"PathContains(key={self.key!r}{exact})"


@dataclass(frozen=True)
class WithTag:
    """Filter: Variables (and Rng streams) whose ``tag`` is ``tag``, e.g. an Rng stream's.

    A plain string that names no registered Variable kind means the same (as in flax.nnx,
    where a string filter always means a tag): ``nnx.state(rngs, "dropout")``.

    Example:
        >>> import nnx_core as nnx
        >>> rngs = nnx.Rngs(params=0, dropout=1)
        >>> [nnx.format_path(p) for p, _ in nnx.state(rngs, nnx.WithTag("dropout")).flat_state()]
        ['dropout.count', 'dropout.key']
        >>> list(nnx.state(rngs, "dropout")) == list(nnx.state(rngs, nnx.WithTag("dropout")))
        True
    """

    tag: str

    def __call__(self, path: Path, value: Any) -> bool:
        return getattr(value, "tag", None) == self.tag


class Any_:
    """Match if any of the filters matches. Exported as ``Any``.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> nnx.Any(nnx.Param, nnx.BatchStat)((), nnx.BatchStat(jnp.zeros(1)))
        True
    """

    def __init__(self, *filters: Filter):
        self.filters = filters
        self.predicates = tuple(to_predicate(f) for f in filters)

    def __call__(self, path: Path, value: Any) -> bool:
        return any(p(path, value) for p in self.predicates)

    def __repr__(self) -> str:
        return f"Any({', '.join(map(_show, self.filters))})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.predicates == self.predicates  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.predicates))


class All(Any_):
    """Match if every filter matches.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> nnx.All(nnx.Param, nnx.PathContains("bias"))(("bias",), nnx.Param(jnp.zeros(1)))
        True
    """

    def __call__(self, path: Path, value: Any) -> bool:
        return all(p(path, value) for p in self.predicates)

    def __repr__(self) -> str:
        return f"All({', '.join(map(_show, self.filters))})"


class Not:
    """Match if the filter does not match.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> nnx.Not(nnx.Param)((), nnx.BatchStat(jnp.zeros(1)))
        True
    """

    def __init__(self, filter: Filter):  # noqa: A002 - mirrors the public name
        self.filter = filter
        self.predicate = to_predicate(filter)

    def __call__(self, path: Path, value: Any) -> bool:
        return not self.predicate(path, value)

    def __repr__(self) -> str:
        return f"Not({_show(self.filter)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Not) and other.predicate == self.predicate

    def __hash__(self) -> int:
        return hash((Not, self.predicate))


class _Constant:
    """A filter that matches everything or nothing.

    It is used bare (``nnx.Everything``) or called with no arguments (``nnx.Everything()``,
    as flax.nnx code writes it); both are the same object.
    """

    def __init__(self, result: bool, name: str):
        self.result = result
        self.name = name

    def __call__(self, *args: Any) -> Any:
        if not args:
            return self
        if len(args) != 2:
            raise TypeError(
                f"{self.name} is a filter: use it as {self.name} or {self.name}() and let the "
                f"graph API call it with (path, value); got {len(args)} argument(s)."
            )
        return self.result

    def __repr__(self) -> str:
        return self.name


Everything = _Constant(True, "Everything")
Nothing = _Constant(False, "Nothing")


def _show(f: Any) -> str:
    if isinstance(f, type):
        return f.__name__
    if f is Ellipsis:
        return "..."
    return repr(f)


def to_predicate(filter: Filter) -> Predicate:  # noqa: A002 - mirrors flax's public name
    """Turn any filter form into a predicate ``(path, value) -> bool``.

    Forms: a type (``isinstance``), ``...``/``True`` (everything), ``None``/``False`` (nothing),
    a string naming a registered Variable kind (else, without a dot, a ``tag`` as in flax.nnx,
    e.g. an Rng stream's: ``WithTag``), a tuple or list (any of), or a callable
    ``(path, value) -> bool``.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> p = nnx.to_predicate(("BatchStat", nnx.Cache))
        >>> p((), nnx.BatchStat(jnp.zeros(1))), p((), nnx.Param(jnp.zeros(1)))
        (True, False)

    Raises:
        TypeError: the filter is none of the forms above.
        KeyError: a dotted string (a namespaced kind name) that names no registered kind.
    """
    if filter is Ellipsis or filter is True:
        return Everything
    if filter is None or filter is False:
        return Nothing
    if isinstance(filter, type):
        return OfType(filter)
    if isinstance(filter, str):
        kind = find_variable_type(filter)
        if kind is not None:
            return OfType(kind)
        if "." in filter:  # a namespaced kind name (acme.LoRAParam) is never a tag
            variable_type(filter)  # raises, listing the registered kinds
        return WithTag(filter)
    if isinstance(filter, (tuple, list)):
        return Any_(*filter)
    if callable(filter):
        return filter
    raise TypeError(
        f"Invalid filter {filter!r} of type {type(filter).__name__}. A filter is a Variable "
        "type, a registered kind name, ..., True, None, False, a tuple of filters, or a "
        "callable (path, value) -> bool."
    )


def check_filters(filters: tuple[Filter, ...]) -> tuple[Predicate, ...]:
    """Predicates for a ``split``: ``...`` is only allowed as the last filter."""
    for i, f in enumerate(filters[:-1]):
        if f is Ellipsis or f is True:
            raise ValueError(
                f"`...` or `True` can only be used as the last filters: `...` (everything) may "
                f"only be the last filter, but it is filter {i} of {len(filters)}: "
                f"{tuple(map(_show, filters))}. Move it to the end."
            )
    return tuple(to_predicate(f) for f in filters)


def is_variable(value: Any) -> bool:
    return isinstance(value, Variable)
