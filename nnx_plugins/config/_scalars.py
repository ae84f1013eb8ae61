"""Strict scalars for config values: no bool as a number, finite floats, bounded integers.

YAML turns ``on``/``yes`` into booleans and ``.nan``/``.inf`` into floats; pydantic's lax mode
would then accept ``rate: on`` as ``1.0`` and ``in_features: yes`` as ``1``. `strict_type`
rewrites an annotation so that every ``int``, ``float``, ``bool`` and ``str`` inside it (in
unions, sequences, tuples, mappings, ``Annotated``) is strict: a number is never a bool or a
string, a float is finite, an int fits in 64 bits. Containers stay lax (a YAML list fills a
tuple), and the constraints an annotation carries (``annotated_types.Interval``, ``Literal``)
are kept, so they are checked and shown in the JSON Schema.

Example:
    >>> from pydantic import TypeAdapter, ValidationError
    >>> from nnx_plugins.config._scalars import strict_type
    >>> adapter = TypeAdapter(strict_type(int | tuple[float, float]))
    >>> adapter.validate_python([1, 2.5])
    (1.0, 2.5)
    >>> try:
    ...     adapter.validate_python(True)
    ... except ValidationError as error:
    ...     print(error.errors()[0]["msg"])
    Input should be a valid integer
"""

from __future__ import annotations

import collections.abc as cabc
import functools
import operator
import types
import typing
from typing import Annotated, Any

from annotated_types import Interval
from pydantic import AllowInfNan, BeforeValidator, Strict

__all__ = ["INT_MIN", "INT_MAX", "strict_type", "STRICT_INT", "STRICT_FLOAT"]

INT_MIN, INT_MAX = -(2**63), 2**63 - 1

STRICT_INT = Annotated[int, Strict(), Interval(ge=INT_MIN, le=INT_MAX)]
STRICT_FLOAT = Annotated[float, Strict(), AllowInfNan(False)]
_SCALARS: dict[Any, Any] = {
    int: STRICT_INT,
    float: STRICT_FLOAT,
    bool: Annotated[bool, Strict()],
    str: Annotated[str, Strict()],
}


def _int_key(value: Any) -> Any:
    """A mapping key written as a JSON key (``"0"``) read as the integer it spells."""
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 20:
        return int(value)
    return value


# JSON object keys are strings, and normalized configs are JSON: an ``int`` mapping key
# accepts ``"3"`` as well as ``3`` (but still never a bool or ``"three"``).
_INT_KEY = Annotated[int, BeforeValidator(_int_key), Strict(), Interval(ge=INT_MIN, le=INT_MAX)]
_UNIONS = (typing.Union, types.UnionType)
_CONTAINERS = {
    list: list,
    tuple: tuple,
    dict: dict,
    set: set,
    frozenset: frozenset,
    cabc.Sequence: cabc.Sequence,
    cabc.Mapping: cabc.Mapping,
}


def strict_type(annotation: Any) -> Any:
    """Return ``annotation`` with every scalar inside it made strict (see the module doc).

    Anything it does not know (``Any``, ``Literal``, classes) is returned unchanged.
    """
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        inner = strict_type(args[0])
        return Annotated[(inner, *annotation.__metadata__)]
    if origin in _UNIONS:
        return functools.reduce(operator.or_, [strict_type(a) for a in args])
    if origin in _CONTAINERS and args:
        items = tuple(a if a is Ellipsis else strict_type(a) for a in args)
        if origin in (dict, cabc.Mapping) and args[0] is int:
            items = (_INT_KEY, *items[1:])
        return _CONTAINERS[origin][items if len(items) > 1 else items[0]]
    return annotation
