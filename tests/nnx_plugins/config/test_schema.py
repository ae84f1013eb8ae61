"""The JSON Schema covers every layer, nested layers by reference, and registered sections."""

import json

import pydantic

from nnx_plugins import config_schema, register_section
from nnx_plugins.config._sections import _SECTIONS

from ..corpus import ARGUMENTS


def test_schema_covers_every_layer(nnx_registry):
    schema = config_schema()
    defs = schema["$defs"]
    assert set(ARGUMENTS) <= set(defs) and {"relu", "acme.Swish"} <= set(defs)
    assert {"$ref": "#/$defs/acme.GatedDense"} in defs["Layer"]["oneOf"]
    for name, args in ARGUMENTS.items():
        assert set(args) <= set(defs[name]["properties"]), name
        assert defs[name]["properties"]["type"]["const"] == name
    assert defs["Sequential"]["properties"]["layers"]["items"] == {"$ref": "#/$defs/Layer"}
    assert defs["Parallel"]["properties"]["branches"]["additionalProperties"] == {
        "$ref": "#/$defs/Layer"
    }
    assert "x-nnx-layer" not in json.dumps(schema)


def test_schema_includes_registered_sections(nnx_registry):
    class Train(pydantic.BaseModel):
        steps: int = 1

    register_section("train_schema_test", Train)
    try:
        assert (
            config_schema()["properties"]["train_schema_test"]["properties"]["steps"]["type"]
            == "integer"
        )
    finally:
        _SECTIONS.pop("train_schema_test")
