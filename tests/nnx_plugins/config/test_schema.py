"""The JSON Schema covers every layer, nested layers by reference, and registered sections."""

import json

import jsonschema
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
    assert defs["Sequential"]["properties"]["layers"]["anyOf"][0]["items"] == {
        "$ref": "#/$defs/Layer"
    }
    assert defs["Parallel"]["properties"]["branches"]["anyOf"][0]["additionalProperties"] == {
        "$ref": "#/$defs/Layer"
    }
    assert "x-nnx-layer" not in json.dumps(schema)


def test_schema_includes_registered_sections(nnx_registry):
    class Train(pydantic.BaseModel):
        steps: int = 1

    register_section("train_schema_test", Train)
    try:
        assert (
            config_schema()["properties"]["train_schema_test"]["properties"]["steps"]["anyOf"][0][
                "type"
            ]
            == "integer"
        )
    finally:
        _SECTIONS.pop("train_schema_test")


def test_schema_accepts_includes_and_interpolations(nnx_registry):
    schema = config_schema()
    interpolation = {"$ref": "#/$defs/Interpolation"}
    assert schema["$defs"]["Layer"]["oneOf"][-1] == interpolation
    assert schema["$defs"]["Linear"]["properties"]["in_features"]["anyOf"][-1] == interpolation
    assert schema["properties"]["train"]["properties"]["seed"]["anyOf"][-1] == interpolation
    assert "required" not in schema
    validator = jsonschema.Draft202012Validator(schema)
    composed = {
        "include": ["base.yaml"],
        "model": {
            "type": "Sequential",
            "layers": [
                {"type": "Linear", "in_features": "${train.seed}", "out_features": 3},
                "${model.layers[0]}",
            ],
        },
        "train": {"steps": "${train.seed}", "seed": 3},
    }
    assert list(validator.iter_errors(composed)) == []
    assert list(validator.iter_errors({"include": "base.yaml", "train": {"seed": 1}})) == []
    wrong = {"model": {"type": "Linear", "in_features": "four", "out_features": 3}}
    assert list(validator.iter_errors(wrong)) != []
    assert list(validator.iter_errors({"include": [3]})) != []


def test_every_reference_in_the_schema_resolves():
    # (a part whose arguments hold a pydantic model, e.g. the text dataset's masking, brings
    # its own definitions: they are inlined, never left as dangling references)
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                found.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    schema = config_schema()
    walk(schema)
    names = {ref.removeprefix("#/$defs/") for ref in found}
    assert "Layer" in names
    assert names <= set(schema["$defs"]), names - set(schema["$defs"])
    data = json.dumps(schema["properties"]["data"])
    assert "mask_token_id" in data
