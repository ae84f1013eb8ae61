"""JSON Schema of the config format, for editors (YAML language servers read it too).

Composition is part of the format: the top-level ``include`` list is a property, ``model`` is
not required (a base file included by others may leave it out; `load_config` reports a missing
model), and every value may instead be a whole ``${dotted.path}`` interpolation
(``$defs/Interpolation``), so editors do not flag composed configs.

Example:
    >>> from nnx_plugins import config_schema
    >>> schema = config_schema()
    >>> schema["properties"]["model"]
    {'$ref': '#/$defs/Layer'}
    >>> schema["$defs"]["Linear"]["required"]
    ['type', 'in_features', 'out_features']
    >>> schema["$defs"]["Linear"]["properties"]["in_features"]["anyOf"][-1]
    {'$ref': '#/$defs/Interpolation'}
"""

from __future__ import annotations

from typing import Any

from ..registry._registry import Registry, default_registry
from ._fields import layer_spec
from ._sections import PluginsSection, registered_sections
from ._types import LAYER_REF

__all__ = ["config_schema"]

_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_LAYER = {"$ref": "#/$defs/Layer"}
_INTERPOLATION = {"$ref": "#/$defs/Interpolation"}
_VALUE_LISTS = ("prefixItems",)
_VALUE_MAPS = ("properties", "patternProperties", "$defs")
_VALUES = ("items", "additionalProperties")
_ANNOTATIONS = ("default", "title", "description", "examples", "deprecated")


def _link(schema: Any) -> Any:
    if isinstance(schema, dict) and set(LAYER_REF) <= set(schema):
        rest = {k: v for k, v in schema.items() if k not in LAYER_REF}
        return {"$ref": "#/$defs/Layer", **rest}
    if isinstance(schema, dict):
        return {key: _link(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_link(value) for value in schema]
    return schema


def _model_schema(model: Any, defs: dict[str, Any]) -> dict[str, Any]:
    schema = _link(model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}"))
    defs.update(schema.pop("$defs", {}))
    return schema


def _or_interpolation(schema: Any) -> Any:
    """``schema`` (transformed inside) or a whole ``${...}`` string; Layer refs already allow it."""
    inner = _interpolable(schema)
    if not isinstance(inner, dict) or inner == _LAYER or inner == {}:
        return inner
    if "anyOf" in inner and set(inner) <= {"anyOf", *_ANNOTATIONS}:
        return {**inner, "anyOf": [*inner["anyOf"], _INTERPOLATION]}
    # annotations (the default, the title) stay on the property, where editors show them
    notes = {k: v for k, v in inner.items() if k in _ANNOTATIONS}
    kept = {k: v for k, v in inner.items() if k not in _ANNOTATIONS}
    return {**notes, "anyOf": [kept, _INTERPOLATION]}


def _interpolable(schema: Any) -> Any:
    """Let every value described inside ``schema`` be an interpolation."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in _VALUE_MAPS and isinstance(value, dict) and key != "$defs":
            out[key] = {  # (a layer's ``type`` names it: always written out)
                name: _interpolable(item) if name == "type" else _or_interpolation(item)
                for name, item in value.items()
            }
        elif key in _VALUES and isinstance(value, dict):
            out[key] = _or_interpolation(value)
        elif key in _VALUE_LISTS and isinstance(value, list):
            out[key] = [_or_interpolation(item) for item in value]
        elif isinstance(value, dict):
            out[key] = _interpolable(value)
        elif isinstance(value, list):
            out[key] = [_interpolable(item) for item in value]
        else:
            out[key] = value
    return out


def config_schema(*, registry: Registry | None = None) -> dict[str, Any]:
    """Return the JSON Schema of a whole config file, covering every loadable layer.

    Loads every enabled plugin (a failed one is warned about and left out). Each layer has a
    definition named after it under ``$defs``; ``$defs/Layer`` is the union of them all,
    discriminated by ``type``.
    """
    registry = registry or default_registry()
    defs: dict[str, Any] = {}
    refs = []
    for name, obj in sorted(registry.load_kind("layer").items()):
        spec = layer_spec(name, obj, registry=registry)
        schema = _model_schema(spec.model, defs)
        if spec.custom:
            schema.setdefault("properties", {})["type"] = {"const": name}
            schema["required"] = ["type", *schema.get("required", [])]
        schema["title"] = name
        defs[name] = schema
        refs.append({"$ref": f"#/$defs/{name}"})
    defs = {name: _interpolable(schema) for name, schema in defs.items()}
    defs["Interpolation"] = {
        "type": "string",
        "pattern": r"^\$\{[^{}]+\}$",
        "description": "${dotted.path}: the value at that path of the config",
    }
    defs["Layer"] = {"oneOf": [*refs, _INTERPOLATION]}
    properties: dict[str, Any] = {
        "include": {
            "description": "files merged under this one, in order (paths relative to it)",
            "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}],
        },
        "model": dict(_LAYER),
        "plugins": _interpolable(_model_schema(PluginsSection, defs)),
    }
    for section, model in sorted(registered_sections(registry).items()):
        properties[section] = _interpolable(_model_schema(model, defs))
    return {
        "$schema": _DIALECT,
        "title": "nnx config",
        "type": "object",
        "properties": properties,
        "$defs": defs,
    }
