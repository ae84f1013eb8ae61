"""pydantic's validation errors as one clear message per config value.

A value checked against a union (``padding: "SAME" | int | [int or (low, high), ...]``) fails
once per member of the union, at locations that name pydantic's internal schemas. `condense`
keeps one error per value: the one that got furthest (a bound broken inside a list beats "not an
integer"), or, when every member only says "wrong type", one message listing what would do.

Example:
    >>> from typing import Literal
    >>> from pydantic import TypeAdapter, ValidationError
    >>> try:
    ...     TypeAdapter(Literal["SAME", "VALID"] | int).validate_python(True, strict=True)
    ... except ValidationError as error:
    ...     print(condense(error.errors(), keep=0))
    [((), "Input should be 'SAME' or 'VALID', or an integer", True)]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["condense", "clean_loc"]

#: error types that only say "not this type" (what would do is listed instead)
_KINDS = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "string_type": "a string",
    "none_required": "null",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "is_instance_of": "a list",
    "sequence_str": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "literal_error": "",
}
_TAG_WORDS = {"int", "float", "str", "bool", "none", "list", "tuple", "dict", "set", "any"}


def _is_tag(key: Any) -> bool:
    """Whether a location element names one of pydantic's schemas (a union member)."""
    return isinstance(key, str) and (
        "[" in key
        or key.startswith(("constrained-", "function-", "json-or-python"))
        or key in _TAG_WORDS
    )


def clean_loc(loc: Iterable[Any], keep: int = 1) -> tuple[Any, ...]:
    """``loc`` without the union-member tags pydantic inserts after its first ``keep`` keys
    (1 for a model's errors: the field name; 0 for a bare type's)."""
    loc = tuple(loc)
    return loc[:keep] + tuple(k for k in loc[keep:] if not _is_tag(k))


def _kind(item: dict[str, Any]) -> str | None:
    """What a type-only error asks for, or ``None`` if the error says more than the type."""
    kind = item["type"]
    if kind == "literal_error":
        return None if isinstance(item.get("input"), str) else item["ctx"]["expected"]
    return _KINDS.get(kind)


def _choose(items: list[dict[str, Any]], keep: int) -> tuple[tuple[Any, ...], str, Any]:
    scored = [((_kind(i) is None, len(clean_loc(i["loc"], keep))), i) for i in items]
    best = max(score for score, _ in scored)
    chosen = [i for score, i in scored if score == best]
    first = chosen[0]
    if best[0] or len(chosen) == 1:
        return clean_loc(first["loc"], keep), first["msg"], first.get("input")
    wanted: list[str] = []
    for item in chosen:
        kind = _kind(item)
        if kind and kind not in wanted:
            wanted.append(kind)
    text = "Input should be " + (
        ", or ".join(wanted) if len(wanted) < 3 else ", ".join(wanted[:-1]) + " or " + wanted[-1]
    )
    return clean_loc(first["loc"], keep), text, first.get("input")


def condense(
    errors: Iterable[dict[str, Any]], *, keep: int = 1
) -> list[tuple[tuple[Any, ...], str, Any]]:
    """``(location, message, input)`` per failing value, in the order pydantic found them.

    Args:
        errors: ``ValidationError.errors()``.
        keep: how many leading location keys are never union tags: 1 for a model's errors
            (the field name), 0 for a ``TypeAdapter``'s.
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for item in errors:
        loc = tuple(item["loc"])
        tagged = next((n for n, key in enumerate(loc) if n >= keep and _is_tag(key)), None)
        key = clean_loc(loc[:tagged], keep) if tagged is not None else (loc, len(groups))
        groups.setdefault(key, []).append(item)
    return [_choose(items, keep) for items in groups.values()]
