"""JSON Schema of the config format, for editors (YAML language servers read it too).

Example:
    >>> from nnx_plugins import config_schema
    >>> schema = config_schema()
    >>> schema["properties"]["model"]
    {'$ref': '#/$defs/Layer'}
    >>> schema["$defs"]["Linear"]["required"]
    ['type', 'in_features', 'out_features']
"""

from __future__ import annotations

from typing import Any

from ..registry._registry import Registry, default_registry
from ._fields import layer_spec
from ._sections import PluginsSection, registered_sections
from ._types import LAYER_REF

__all__ = ["config_schema"]

_DIALECT = "https://json-schema.org/draft/2020-12/schema"


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
    defs["Layer"] = {"oneOf": refs}
    properties: dict[str, Any] = {
        "model": {"$ref": "#/$defs/Layer"},
        "plugins": _model_schema(PluginsSection, defs),
    }
    for section, model in sorted(registered_sections(registry).items()):
        properties[section] = _model_schema(model, defs)
    return {
        "$schema": _DIALECT,
        "title": "nnx config",
        "type": "object",
        "properties": properties,
        "required": ["model"],
        "$defs": defs,
    }
