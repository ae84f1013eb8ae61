"""``nnx.Dict``: a Module whose entries are its attributes, as flax.nnx's ``nnx.Dict``.

A plain ``dict`` of layers needs no wrapper here (it is traversed as it is); ``nnx.Dict`` is for
code written for flax.nnx, which reads entries as attributes (``d.encoder``) as well as items.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from ._data_attrs import MARKS_ATTR
from ._module import Module
from ._pytree import HIDDEN


class Dict(Module, MutableMapping):  # type: ignore[misc]
    """A mapping from names to values (layers, Variables, arrays, ...) kept as attributes.

    Entries are state or static by their value as any Module attribute, are read as items or
    attributes, and are ordered by name in the state (as flax.nnx's).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> d = nnx.Dict(b=nnx.Param(jnp.ones(2)), a=3)
        >>> d["b"] is d.b, sorted(d), list(nnx.state(d))
        (True, ['a', 'b'], ['b'])

    Raises:
        TypeError: a key that is not a string (an attribute name).
        KeyError: reading or deleting a missing entry.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __getitem__(self, key: str) -> Any:
        d = vars(self)
        if key in d and key not in HIDDEN and key != MARKS_ATTR:
            return d[key]
        raise KeyError(key)

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(
                f"nnx.Dict keys are attribute names (strings), got {key!r} of type "
                f"{type(key).__name__}. Use a plain dict for other keys."
            )
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        self[key]  # noqa: B018 - KeyError for a missing entry
        delattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter([k for k in vars(self) if k not in HIDDEN and k != MARKS_ATTR])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = Module.__hash__
