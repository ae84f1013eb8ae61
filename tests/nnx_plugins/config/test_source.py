"""Reading YAML/JSON/mappings with positions; the reader's own problems are collected."""

import os

import pytest
import yaml

from nnx_plugins import ConfigError, ConfigLimits
from nnx_plugins.config import _source as source_module
from nnx_plugins.config._limits import Budget
from nnx_plugins.config._source import Source, loader_class, measure, read_source, source_from

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
    assert src.problems == []


def test_json_borrows_positions():
    src = read_source(
        '{"model": {"type": "Linear",\n "in_features": 2}}', name="m.json", syntax="json"
    )
    assert src.data == {"model": {"type": "Linear", "in_features": 2}}
    assert src.value_position(("model", "in_features")) == (2, 17)


def test_exponents_are_numbers_in_yaml_as_in_json():
    src = read_source('{"lr": 1e-3, "n": 3E5}', name="m.json", syntax="json")
    assert src.data == {"lr": 0.001, "n": 300000.0} and src.value_position(("lr",)) == (1, 8)
    assert read_source("a: [3e-3, -2e+2, 3, 1e, 1.5]").data == {"a": [0.003, -200.0, 3, "1e", 1.5]}


def test_json_keeps_its_own_numbers_when_yaml_reads_them_differently():
    src = read_source(r'{"a": "\ud83d\ude00"}', name="m.json", syntax="json")  # (a surrogate pair)
    assert src.data == {"a": "\U0001f600"} and src.values == {}  # (YAML reads two characters)


@pytest.mark.parametrize(
    ("text", "syntax", "message"),
    [
        ("model: [1, 2\n", "yaml", r"m:2:1: <root>: invalid YAML: .*expected ',' or ']'"),
        ('{"model": }', "json", r"m:1:11: <root>: invalid JSON: Expecting value"),
        ("a: 1\n---\nb: 2\n", "yaml", r"m:2:1: <root>: invalid YAML: expected a single document"),
        ("a: *nowhere\n", "yaml", r"m:1:4: <root>: invalid YAML: found undefined alias 'nowhere'"),
        ("a: &x [1, *x]\n", "yaml", r"m:1:11: <root>: invalid YAML: found undefined alias 'x'"),
        ('{"n": 1' + "0" * 5000 + "}", "json", r"m: <root>: invalid JSON: Exceeds the limit"),
    ],
)
def test_syntax_errors_have_positions(text, syntax, message):
    with pytest.raises(ConfigError, match=message):
        read_source(text, name="m", syntax=syntax)


@pytest.mark.parametrize(
    ("text", "syntax", "expected"),
    [
        ("a: 1\na: 2\n", "yaml", ["m:2:1: a: duplicate key 'a'; only one may be given."]),
        (
            '{"a": {"b": 1,\n "b": 2}}',
            "json",
            ["m:2:2: a.b: duplicate key 'b'; only one may be given."],
        ),
        (
            "x: !!python/object:os.system {}\n",
            "yaml",
            [
                "m:1:4: x: unsupported YAML tag 'tag:yaml.org,2002:python/object:os.system': "
                "configs hold plain data only."
            ],
        ),
        (
            "x: !!python/name:os.system ''\n",
            "yaml",
            [
                "m:1:4: x: unsupported YAML tag 'tag:yaml.org,2002:python/name:os.system': "
                "configs hold plain data only."
            ],
        ),
        (
            "x: !!binary aGk=\n",
            "yaml",
            ["m:1:4: x: unsupported YAML tag 'tag:yaml.org,2002:binary'"],
        ),
        ("x: !!int abc\n", "yaml", ["m:1:4: x: cannot read 'abc' as int"]),
        ("x: " + "9" * 5000 + "\n", "yaml", ["m:1:4: x: cannot read '9999"]),
        ("? [1, 2]\n: 3\n", "yaml", ["m:1:3: <root>: a mapping key must be a string or a number."]),
        ("a: &a 1\n<<: *a\n", "yaml", ["m:2:5: <root>: a '<<' merge key takes a mapping"]),
    ],
)
def test_reader_problems_are_collected_not_raised(text, syntax, expected):
    src = read_source(text, name="m", syntax=syntax)
    assert len(src.problems) == len(expected)
    for problem, start in zip(src.problems, expected):
        assert str(problem).startswith(start), str(problem)


def test_several_reader_problems_are_all_collected():
    src = read_source("a: 1\na: 2\nb: !!set {x}\nc: {d: 1, d: 2}\n", name="m")
    assert [str(p).split(": ", 2)[1] for p in src.problems] == ["a", "b", "c.d"]


def test_merge_keys_and_aliases():
    src = read_source(
        "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nlist: &l [1, 2]\nagain: *l\n", name="m"
    )
    assert src.data["use"] == {"x": 1, "y": 3}
    assert src.data["again"] == [1, 2] and src.data["again"] is not src.data["list"]
    assert src.value_position(("use", "x")) == (3, 7)  # (where '*b' is written)


def test_too_deep_nesting_is_an_error():
    with pytest.raises(
        ConfigError,
        match=r"deep:1:102: <root>: the config is nested deeper than max_depth=100 levels",
    ):
        read_source("[" * 300 + "]" * 300, name="deep")


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match=r"missing.yaml: <root>: cannot read the config"):
        source_from(tmp_path / "missing.yaml")
    (tmp_path / "m.yml").write_text(YAML)
    assert source_from(tmp_path / "m.yml").name.endswith("m.yml")
    assert source_from({"a": 1}).name == "<dict>"


def test_a_file_that_is_not_utf8(tmp_path):
    (tmp_path / "m.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigError, match=r"it is not UTF-8 text \(invalid start byte at byte 3\)"):
        source_from(tmp_path / "m.yaml")


def test_unreadable_characters_are_yaml_errors():
    with pytest.raises(
        ConfigError,
        match=r"m:1:8: <root>: invalid YAML: .*(special|control) characters are not allowed",
    ):
        read_source("model: \x07\n", name="m")


def test_a_mapping_is_copied_and_measured():
    data = {"a": [1, (2, 3)], "b": {"c": None}}
    copied = measure(data, Budget(ConfigLimits(), "<dict>"), "<dict>")
    assert copied == {"a": [1, [2, 3]], "b": {"c": None}} and copied["b"] is not data["b"]
    looped: dict = {}
    looped["self"] = looped
    with pytest.raises(
        ConfigError,
        match=r"<dict>: <root>: .*max_depth=100 levels \(here inside self.self.self.self ...\)",
    ):
        source_from(looped)


def test_a_problem_names_the_file_its_value_came_from():
    src = Source("main.yaml", {"a": {"b": 1}}, values={("a",): (1, 1), ("a", "b"): (3, 4)})
    src.files[("a", "b")] = "base.yaml"
    assert src.problem(("a", "b", "c"), "x").location == "base.yaml:3:4"
    assert src.problem(("a",), "x").location == "main.yaml:1:1"


def test_special_files_are_refused_before_reading(tmp_path):
    with pytest.raises(ConfigError, match=r"not a regular file \(a directory\)"):
        source_from(tmp_path)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"pipe.yaml: <root>: not a regular file \(a FIFO\)"):
        source_from(fifo)
    with pytest.raises(ConfigError, match=r"not a regular file \(a device or other special"):
        source_from("/dev/zero")


@pytest.mark.parametrize(
    "text",
    [
        YAML,
        "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nlist: &l [1e-3, 2]\nagain: *l\n",
        "a: 1\na: 2\nb: !!set {x}\nc: {d: 1, d: 2}\n? [1]\n: 2\n",
    ],
)
def test_the_pure_python_parser_reads_what_libyaml_reads(monkeypatch, text):
    fast = read_source(text, name="m")
    monkeypatch.setattr(source_module, "_LOADER", loader_class(yaml.SafeLoader))
    slow = read_source(text, name="m")
    assert (slow.data, slow.values, slow.keys, slow.problems) == (
        fast.data,
        fast.values,
        fast.keys,
        fast.problems,
    )


@pytest.mark.parametrize("levels", [1_001, 3_000])
def test_our_depth_limit_is_the_one_reported_however_deep_libyaml_reads(levels):
    # libyaml (PyYAML >= 6.0.4) refuses flow nesting past 1,000 levels with its own text;
    # the limit reported must be ours, located at the first bracket past it.
    for text, column in (("[" * levels + "]" * levels, 102), ("a: " + "{b: " * levels, 401)):
        with pytest.raises(ConfigError, match=rf"deep:1:{column}: .*max_depth=100 levels"):
            read_source(text, name="deep")


def test_a_raised_depth_limit_reads_nesting_libyaml_refuses():
    budget = Budget(ConfigLimits(max_depth=5_000), "deep")
    source = read_source("x: " + "[" * 2_000 + "1" + "]" * 2_000, name="deep", budget=budget)
    value, levels = source.data["x"], 0
    while isinstance(value, list):
        value, levels = value[0], levels + 1
    assert (value, levels) == (1, 2_000)


def test_a_syntax_error_in_deep_text_within_the_limit_is_reported_as_such():
    budget = Budget(ConfigLimits(max_depth=5_000), "deep")
    with pytest.raises(ConfigError, match=r"deep:1:\d+: <root>: invalid YAML: .*flow"):
        read_source("[" * 2_000 + "1", name="deep", budget=budget)
