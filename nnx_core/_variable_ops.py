"""What every Variable class gets installed: array operators and its pytree registration.

Kept apart from ``_variables`` (the class and its accessor API); the functions here receive the
classes they act on, so this module does not import ``_variables``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax

from ._tracing import current_trace

_BINARY = (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
)


def _binary(op: Callable[[Any, Any], Any], base: type) -> tuple[Callable, Callable, Callable]:
    def forward(self: Any, other: Any) -> Any:
        value = other.get_value() if isinstance(other, base) else other  # type: ignore[attr-defined]
        return op(self.get_value(), value)

    def reflected(self: Any, other: Any) -> Any:
        return op(other, self.get_value())

    def inplace(self: Any, other: Any) -> Any:
        self.value = forward(self, other)
        return self

    return forward, reflected, inplace


def install_operators(base: type) -> None:
    """Arithmetic, comparison and unary operators of ``base`` that act on ``get_value()``.

    In-place operators (``v += 1``) write the result back into the same Variable. ``==`` and
    ``!=`` compare values too (elementwise, as in flax.nnx), while the hash stays the object's
    identity: a Variable is a graph object that may be shared, and is kept in sets and dicts.
    """
    for name in _BINARY:
        op = getattr(operator, f"{name}_" if name in ("and", "or") else name)
        forward, reflected, inplace = _binary(op, base)
        setattr(base, f"__{name}__", forward)
        setattr(base, f"__r{name}__", reflected)
        setattr(base, f"__i{name}__", inplace)
    for name in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(base, f"__{name}__", _binary(getattr(operator, name), base)[0])
    base.__hash__ = object.__hash__  # type: ignore[method-assign,assignment]
    for name in ("neg", "pos", "abs", "invert"):
        setattr(
            base,
            f"__{name}__",
            (lambda op: lambda self: op(self.get_value()))(getattr(operator, name)),
        )


class Aux:
    """Pytree aux data of a Variable: compared and hashed by its metadata key only."""

    __slots__ = ("key", "meta")

    def __init__(self, key: tuple[Any, ...], meta: dict[str, Any]):
        self.key = key
        self.meta = meta

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Aux) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return repr(self.meta)


def register_pytree(cls: type) -> None:
    """Register the Variable class ``cls`` with JAX: one child (the raw value, key ``.value``),
    aux data its kind and cached metadata key."""
    key = jax.tree_util.GetAttrKey("value")
    set_raw_value = cls._raw_value.__set__  # type: ignore[attr-defined]
    set_private = cls._private.__set__  # type: ignore[attr-defined]
    set_meta = cls._meta.__set__  # type: ignore[attr-defined]
    set_meta_key = cls._meta_key.__set__  # type: ignore[attr-defined]
    set_trace = cls._trace.__set__  # type: ignore[attr-defined]

    def flatten_with_keys(v: Any) -> tuple[tuple[tuple[Any, Any], ...], Aux]:
        return ((key, v._value),), Aux(v.meta_key(), v._meta)

    def flatten(v: Any) -> tuple[tuple[Any], Aux]:
        return (v._value,), Aux(v.meta_key(), v._meta)

    def unflatten(aux: Aux, children: Any) -> Any:
        new: Any = object.__new__(cls)
        set_raw_value(new, children[0])
        set_private(new, False)
        set_meta(new, dict(aux.meta))
        set_meta_key(new, aux.key)
        set_trace(new, current_trace())
        return new

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
