"""Small value helpers shared by the core: the MISSING sentinel, identity-hashed statics, short reprs."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ._tracing import Tracer

__all__ = ["MISSING", "_ById", "_describe", "hashable"]


class _Missing:
    """Marks an argument that was not given (``None`` is a valid value)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


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


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return repr(value)
    dims = ",".join(str(d) for d in shape)
    if (
        shape == ()
        and not isinstance(value, Tracer)
        and not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    ):
        try:
            return f"{dtype}[]={np.asarray(value).item()!r}"
        except RuntimeError:  # e.g. a donated (deleted) buffer: show the type only
            pass
    return f"{dtype}[{dims}]"
