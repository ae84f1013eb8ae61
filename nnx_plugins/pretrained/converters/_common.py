"""What every converter reads from a ``config.json`` the same way: sizes, activations, RoPE.

A value the layers cannot reproduce is refused with `Unsupported` (a ``ValueError``) naming the
field, its value and what is supported; the importer reports it at ``config.json``.

Example:
    >>> from nnx_plugins.pretrained.converters._common import activation, rope
    >>> activation({"hidden_act": "gelu"}, "hidden_act")
    {'type': 'gelu', 'approximate': False}
    >>> rope({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
    ...       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    ...       "original_max_position_embeddings": 8192}})["scaling"]
    'llama3'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["Unsupported", "size", "number", "flag", "activation", "rope", "reject", "shown"]


class Unsupported(ValueError):
    """A config.json value the converter cannot import (the message names field and value)."""


_ACTIVATIONS: dict[str, Any] = {
    "silu": "silu",
    "swish": "silu",
    "relu": "relu",
    "gelu": {"type": "gelu", "approximate": False},
    "gelu_new": {"type": "gelu", "approximate": True},
    "gelu_pytorch_tanh": {"type": "gelu", "approximate": True},
}


def shown(value: Any) -> str:
    """A config.json value as an error shows it: its ``repr``, cut short when long (a
    400-digit number, a long list).

    Example:
        >>> from nnx_plugins.pretrained.converters._common import shown
        >>> shown("gelu"), shown(10**100)
        ("'gelu'", '1000000000000000000000000000000000000000... (101 characters)')
    """
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text):,} characters)"


def size(config: Mapping[str, Any], key: str, default: Any = None) -> int:
    """``config[key]`` as a positive int (``default`` when absent and a default is given)."""
    if key not in config and default is None:
        raise Unsupported(f"'{key}' is missing: give it (a positive whole number)")
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Unsupported(f"'{key}' must be a positive whole number, got {shown(value)}")
    return value


def number(config: Mapping[str, Any], key: str, default: float) -> float:
    """``config[key]`` as a finite float >= 0 (``default`` when absent): NaN, Infinity and a
    number past a float's range (a 400-digit integer) are refused naming ``key``."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unsupported(f"'{key}' must be a number >= 0, got {shown(value)}")
    try:
        result = float(value)
    except OverflowError:  # (an integer past a float's range)
        result = math.inf
    if not math.isfinite(result):
        raise Unsupported(f"'{key}' must be a finite number >= 0, got {shown(value)}")
    if result < 0:
        raise Unsupported(f"'{key}' must be a number >= 0, got {shown(value)}")
    return result


def flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise Unsupported(f"'{key}' must be true or false, got {shown(value)}")
    return value


def reject(config: Mapping[str, Any], key: str, allowed: Any, why: str) -> None:
    """Refuse ``config[key]`` unless it is absent or one of ``allowed`` (a tuple), compared
    with its type: ``true`` is not ``1``, nor ``0`` ``false``."""
    if key in config and not any(_same(config[key], a) for a in allowed):
        raise Unsupported(
            f"'{key}' is {shown(config[key])}, which this converter does not support ({why}); "
            f"supported: {', '.join(map(repr, allowed))}"
        )


def _same(value: Any, allowed: Any) -> bool:
    return type(value) is type(allowed) and value == allowed


def activation(config: Mapping[str, Any], key: str, default: str = "gelu") -> Any:
    """The registered activation (name, or ``{type, ...arguments}``) of ``config[key]``."""
    name = config.get(key, default)
    if not isinstance(name, str) or name not in _ACTIVATIONS:
        what = "an activation this converter does not support"
        if not isinstance(name, str):  # (a list, an object: unhashable, it was a TypeError)
            what = "not an activation this converter supports (a name is)"
        raise Unsupported(
            f"'{key}' is {shown(name)}, {what}; supported: {', '.join(sorted(_ACTIVATIONS))}"
        )
    return _ACTIVATIONS[name]


_ROPE_FIELDS = {"rope_type", "type", "rope_theta", "factor", "partial_rotary_factor"}
"""Fields of one RoPE's settings: ``rope_parameters`` holding one is not per layer type."""


def _rope_fields(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The RoPE settings (transformers 5's ``rope_parameters``, or the older ``rope_theta`` +
    ``rope_scaling``), and the field they came from."""
    parameters = config.get("rope_parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise Unsupported(f"'rope_parameters' must be an object or null, got {shown(parameters)}")
    if parameters:
        if not _ROPE_FIELDS & set(parameters) and all(
            isinstance(v, Mapping) for v in parameters.values()
        ):
            raise Unsupported(
                "'rope_parameters' gives one RoPE per layer type, which this converter does "
                "not support (one RoPE for every layer is)"
            )
        return {"rope_theta": config.get("rope_theta", 10000.0), **parameters}, "rope_parameters"
    scaling = config.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, Mapping):
        raise Unsupported(f"'rope_scaling' must be an object or null, got {shown(scaling)}")
    return {"rope_theta": config.get("rope_theta", 10000.0), **(scaling or {})}, "rope_scaling"


def rope(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `RoPE` layer spec of ``config``.

    Raises:
        Unsupported: a scaling other than ``default``/``llama3`` (naming the field and value),
            a partial rotary factor, a bad theta.
    """
    fields, where = _rope_fields(config)
    kind = fields.get("rope_type", fields.get("type", "default"))
    if kind not in ("default", "llama3"):
        key = "rope_type" if "rope_type" in fields else "type"
        raise Unsupported(
            f"'{where}.{key}' is {shown(kind)}: this converter supports the RoPE scalings 'default' "
            "and 'llama3' only"
        )
    partial = fields.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if isinstance(partial, bool) or partial != 1.0:
        raise Unsupported(
            f"'partial_rotary_factor' is {shown(partial)}: only a RoPE over whole heads (1.0) is "
            "supported"
        )
    spec: dict[str, Any] = {"type": "RoPE", "theta": number(fields, "rope_theta", 10000.0)}
    if kind == "llama3":
        spec.update(
            scaling="llama3",
            factor=number(fields, "factor", 8.0),
            low_freq_factor=number(fields, "low_freq_factor", 1.0),
            high_freq_factor=number(fields, "high_freq_factor", 4.0),
            original_max_position_embeddings=size(
                fields,
                "original_max_position_embeddings",
                config.get("max_position_embeddings", 8192),
            ),
        )
    return spec
