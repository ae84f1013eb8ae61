"""Reading YAML/JSON/mappings with positions."""

import pytest

from nnx_plugins import ConfigError
from nnx_plugins.config._source import read_source, source_from

YAML = """\
model:
  type: Sequential
  layers:
    - {type: Linear, in_features: 2, out_features: 3}
    - type: relu
"""


def test_yaml_positions_of_values_and_keys():
    src = read_source(YAML, name="m.yaml")
    assert src.data["model"]["layers"][1] == {"type": "relu"}
    assert src.value_position(("model", "layers", 0, "out_features")) == (4, 52)
    assert src.key_position(("model", "layers", 1, "type")) == (5, 7)
    assert src.value_position(("model", "layers", 0, "missing", 3)) == (4, 7)
    assert src.problem(("model", "type"), "x").location == "m.yaml:2:9"


def test_json_borrows_positions():
    src = read_source(
        '{"model": {"type": "Linear",\n "in_features": 2}}', name="m.json", syntax="json"
    )
    assert src.data == {"model": {"type": "Linear", "in_features": 2}}
    assert src.value_position(("model", "in_features")) == (2, 17)


@pytest.mark.parametrize(
    ("text", "syntax", "message"),
    [
        ("model: [1, 2\n", "yaml", r"m:2:1: <root>: invalid YAML: .*expected ',' or ']'"),
        ("a: 1\na: 2\n", "yaml", r"m:2:1: a: duplicate key 'a'"),
        (
            "x: !!python/object:os.system {}\n",
            "yaml",
            r"m:1:4: x: unsupported YAML tag 'tag:yaml.org,2002:python/object:os.system'",
        ),
        (
            "x: !!python/name:os.system ''\n",
            "yaml",
            r"m:1:4: <root>: invalid YAML: .*could not determine a constructor",
        ),
        ('{"model": }', "json", r"m:1:11: <root>: invalid JSON: Expecting value"),
    ],
)
def test_syntax_errors_have_positions(text, syntax, message):
    with pytest.raises(ConfigError, match=message):
        read_source(text, name="m", syntax=syntax)


def test_too_deep_nesting_is_an_error():
    with pytest.raises(ConfigError, match="nested too deeply"):
        read_source("[" * 300 + "]" * 300, name="deep")


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match=r"missing.yaml: <root>: cannot read the config"):
        source_from(tmp_path / "missing.yaml")
    (tmp_path / "m.yml").write_text(YAML)
    assert source_from(tmp_path / "m.yml").name.endswith("m.yml")
    assert source_from({"a": 1}).name == "<dict>"


def test_unreadable_characters_are_yaml_errors():
    with pytest.raises(
        ConfigError, match=r"m:1:8: <root>: invalid YAML: .*special characters are not allowed"
    ):
        read_source("model: \x07\n", name="m")
