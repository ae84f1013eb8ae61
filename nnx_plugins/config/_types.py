"""Pydantic field types for the values a config names: dtypes, initializers and activations.

Each validator accepts the config spelling (a name, or ``{type: name, ...args}`` for an
initializer) and also the Python object a built layer holds, and returns the normalized
config spelling. That is what makes ``to_config(build(c)) == c`` hold.

Example:
    >>> import jax.numpy as jnp
    >>> from nnx_plugins.config._types import normalize_dtype, normalize_initializer
    >>> normalize_dtype(jnp.bfloat16), normalize_dtype("float32")
    ('bfloat16', 'float32')
    >>> normalize_initializer({"type": "normal", "stddev": 0.5})
    {'type': 'normal', 'stddev': 0.5}
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Annotated, Any

import jax.numpy as jnp
import numpy as np
import pydantic
from pydantic import PlainValidator, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError

from nnx_layers import initializers

from .._text import suggest
from ..registry._registry import default_registry
from ._messages import condense
from ._scalars import strict_type

__all__ = [
    "DTYPE_NAMES",
    "dtype_type",
    "initializer_type",
    "activation_type",
    "layer_type",
    "normalize_dtype",
    "normalize_initializer",
    "to_json",
    "tuplify",
]

DTYPE_NAMES = (
    "bool",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint4",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
#: placeholder for a nested layer in generated schemas; `config_schema` turns it into a $ref
LAYER_REF = {"x-nnx-layer": True}


def to_json(value: Any) -> Any:
    """Convert tuples to lists and dtypes to names, recursively; reject other objects.

    Raises:
        TypeError: a value has no config spelling.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if _is_dtype(value):
        return normalize_dtype(value)
    raise TypeError(f"{value!r} ({type(value).__name__}) has no config spelling")


def tuplify(value: Any) -> Any:
    """Turn lists into tuples recursively (the hashable form layers store)."""
    if isinstance(value, (list, tuple)):
        return tuple(tuplify(v) for v in value)
    if isinstance(value, Mapping):
        return {k: tuplify(v) for k, v in value.items()}
    return value


def _is_dtype(value: Any) -> bool:

    return isinstance(value, np.dtype) or (isinstance(value, type) and hasattr(value, "dtype"))


def normalize_dtype(value: Any) -> str | None:
    """Return the dtype name of ``value`` (a name, numpy dtype or jnp scalar type).

    Raises:
        PydanticCustomError: ``value`` names no known dtype.
    """
    if value is None:
        return None
    if isinstance(value, str) and value in DTYPE_NAMES:
        return value
    if _is_dtype(value):
        return jnp.dtype(value).name
    raise PydanticCustomError(
        "dtype",
        "unknown dtype {value}.{hint} Known dtypes: {known}.",
        {
            "value": repr(value),
            "hint": suggest(value, DTYPE_NAMES),
            "known": ", ".join(DTYPE_NAMES),
        },
    )


def normalize_initializer(value: Any) -> dict[str, Any]:
    """Return ``{"type": name, **arguments}`` for an initializer name, mapping or object.

    Raises:
        PydanticCustomError: unknown name, bad arguments, or an object with no name.
    """

    if hasattr(value, "name") and hasattr(value, "config") and not isinstance(value, Mapping):
        spec = {"type": value.name, **value.config()}
    elif isinstance(value, str):
        spec = {"type": value}
    elif isinstance(value, Mapping) and isinstance(value.get("type"), str):
        spec = dict(value)
    else:
        raise PydanticCustomError(
            "initializer",
            "expected an initializer name, or a mapping with its name under 'type' and its "
            "arguments, got {value}.",
            {"value": repr(value)},
        )
    name = spec.pop("type")
    if name not in initializers.names():
        raise PydanticCustomError(
            "initializer",
            "unknown initializer {name}.{hint} Known initializers: {known}.",
            {
                "name": repr(name),
                "hint": suggest(name, initializers.names()),
                "known": ", ".join(initializers.names()),
            },
        )
    try:
        init = initializers.get(name, **tuplify(spec))
    except Exception as error:  # noqa: BLE001 - report any bad argument as a config problem
        raise PydanticCustomError(
            "initializer",
            "invalid arguments for initializer {name}: {error}",
            {"name": repr(name), "error": str(error).split("\n")[0]},
        ) from None
    _check_initializer_arguments(name, type(init), spec)
    return {"type": init.name, **to_json(init.config())}


def _check_initializer_arguments(name: str, cls: type, arguments: Mapping[str, Any]) -> None:
    """Strict scalars for an initializer's arguments (typed by its dataclass fields)."""
    hints = typing.get_type_hints(cls)
    for key, value in arguments.items():
        if key not in hints:
            continue
        try:
            pydantic.TypeAdapter(strict_type(hints[key])).validate_python(value)
        except pydantic.ValidationError as error:
            _, message, _ = condense(error.errors(include_url=False), keep=0)[0]
            raise PydanticCustomError(
                "initializer",
                "invalid argument {key} for initializer {name}: {message} (got {value}).",
                {"key": repr(key), "name": repr(name), "message": message, "value": repr(value)},
            ) from None


def _normalize_activation(value: Any, info: ValidationInfo) -> str | None:
    context = info.context or {}
    registry, prefer = context.get("registry"), context.get("prefer")
    if registry is None:
        registry = default_registry()
    if value is None:
        return None
    if callable(value) and not isinstance(value, (str, type)):
        try:
            return registry.name_of(value)
        except Exception as error:  # noqa: BLE001
            raise PydanticCustomError("activation", "{error}", {"error": str(error)}) from None
    if not isinstance(value, str):
        raise PydanticCustomError(
            "activation",
            "expected an activation name such as 'relu', got {value}.",
            {"value": repr(value)},
        )
    try:
        obj = registry.get("layer", value, prefer=prefer)
    except Exception as error:  # noqa: BLE001 - unknown, colliding or failed: say which
        raise PydanticCustomError("activation", "{error}", {"error": str(error)}) from None
    if isinstance(obj, type):
        raise PydanticCustomError(
            "activation", "{value} is a layer, not an activation function.", {"value": repr(value)}
        )
    return value


def dtype_type() -> Any:
    """The field type of a dtype argument (a name or null)."""
    schema = {"anyOf": [{"enum": list(DTYPE_NAMES)}, {"type": "null"}]}
    return Annotated[Any, PlainValidator(normalize_dtype), WithJsonSchema(schema)]


def initializer_type() -> Any:
    """The field type of an initializer argument: ``name`` or ``{type: name, ...arguments}``."""

    schema = {
        "anyOf": [
            {"enum": list(initializers.names())},
            {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"]},
        ]
    }
    return Annotated[Any, PlainValidator(normalize_initializer), WithJsonSchema(schema)]


def activation_type() -> Any:
    """The field type of an activation argument: a registered activation name (or null)."""
    schema = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    return Annotated[Any, PlainValidator(_normalize_activation), WithJsonSchema(schema)]


def layer_type(shape: str) -> Any:
    """The field type of nested layers (``one``, ``optional``, ``list`` or ``dict``).

    Only the container shape is checked here; the nested configs are validated by the walker
    in `nnx_plugins.config._load`, which knows their paths and types.
    """
    one = Annotated[Any, WithJsonSchema(LAYER_REF)]
    optional = Annotated[Any, WithJsonSchema({"anyOf": [LAYER_REF, {"type": "null"}]})]
    return {"one": one, "optional": optional, "list": list[one], "dict": dict[str, one]}[shape]
