"""${dotted.path}: whole values keep their type, text is substituted, every failure located."""

import tracemalloc

import pytest

from nnx_plugins import ConfigError, ConfigLimits, load_config
from nnx_plugins.config._interpolate import escape, interpolate
from nnx_plugins.config._limits import Budget
from nnx_plugins.config._source import read_source


def resolved(text, limits=None):
    source = read_source(text, name="m.yaml")
    failed = interpolate(source, Budget(limits or ConfigLimits(), "m.yaml"))
    return source, failed


def test_whole_values_keep_their_type_and_text_is_substituted():
    source, failed = resolved(
        "a: {w: 4, flag: true, none: null, lr: 0.5, node: {type: relu}, list: [1, 2]}\n"
        "b: ${a.w}\n"
        "c: ${a.node}\n"
        "d: ${a.list}\n"
        "e: 'w=${a.w} f=${a.flag} n=${a.none} lr=${a.lr} name=${a.node.type}'\n"
        "f: ${ a.list[-1] }\n"
        "g: '\\${a.w} costs $5 and ${a.w}'\n"
        "h: ${c.type}\n"
    )
    assert failed == frozenset()
    data = source.data
    assert data["b"] == 4 and data["c"] == {"type": "relu"} and data["d"] == [1, 2]
    assert data["e"] == "w=4 f=true n=null lr=0.5 name=relu"
    assert data["f"] == 2 and data["g"] == "${a.w} costs $5 and 4" and data["h"] == "relu"
    data["c"]["type"] = "gelu"
    assert data["a"]["node"] == {"type": "relu"}  # (a copy, not the same object)


def test_references_resolve_through_other_references_in_any_order():
    source, _ = resolved("x: ${y}\nz: ${x.k}\ny: {k: '${w}'}\nw: 9\n")
    assert source.data == {"x": {"k": 9}, "z": 9, "y": {"k": 9}, "w": 9}


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ("a: ${b}\nb: ${a}\n", "m.yaml:2:4", "b: interpolation cycle: a -> b -> a. A value cannot"),
        ("a: ${a}\n", "m.yaml:1:4", "a: interpolation cycle: a -> a."),
        ("m: {x: '${m}'}\n", "m.yaml:1:8", "m.x: interpolation cycle: m.x -> m."),
        (
            "a: ${modle.x}\nmodel: {x: 1}\n",
            "m.yaml:1:4",
            "a: '${modle.x}' names no value of the config: the top level has no key 'modle'. "
            "Did you mean 'model'? Only values written in the config (its files and "
            "overrides) can be referenced, not defaults.",
        ),
        (
            "a: [1]\nb: ${a[3]}\n",
            "m.yaml:2:4",
            "b: '${a[3]}' names no value of the config: a has 1 item, no index 3.",
        ),
        (
            "a: {b: 1}\nc: ${a.b.c}\n",
            "m.yaml:2:4",
            "c: '${a.b.c}' names no value of the config: a.b is int 1.",
        ),
        (
            "l: [1, 2]\nb: x${l}\n",
            "m.yaml:2:4",
            "b: '${l}' is list [1, 2]; only a number, string, bool or null can be part of a "
            "longer string. Make the string exactly '${l}' to take the value itself.",
        ),
        (
            "a: ${oc.env:HOME}\n",
            "m.yaml:1:4",
            "a: '${oc.env:HOME}' is not a config path: unexpected ':HOME' after the path "
            "'oc.env'. Resolvers such as oc.env are not supported",
        ),
        ("a: ${}\n", "m.yaml:1:4", "a: '${}' is not a config path: expected a key path"),
        ("a: x${b\n", "m.yaml:1:4", "a: '${' without a closing '}' (or with a nested '${')"),
        ("b: 1\na: ${a${b}}\n", "m.yaml:2:4", "a: '${' without a closing '}'"),
    ],
)
def test_failures_are_located_at_the_string(text, location, message):
    source, failed = resolved(text)
    (problem,) = source.problems
    assert f"{problem.location}: {str(problem).split(': ', 1)[1]}".startswith(
        f"{location}: {message}"
    )
    assert problem.path in failed


def test_a_failure_is_reported_once_where_the_bad_reference_is():
    source, failed = resolved("a: ${b}\nb: ${nope}\nc: ${b}\n")
    assert [str(p)[:30] for p in source.problems] == ["m.yaml:2:4: b: '${nope}' names"]
    assert failed == {("a",), ("b",), ("c",)}


@pytest.mark.parametrize(
    ("text", "limits", "message"),
    [
        (
            "a: [1, 1, 1, 1]\nb: ['${a}', '${a}', '${a}']\n",
            ConfigLimits(max_nodes=12),
            r"m.yaml:2:\d+: b\[2\]: the config holds more than max_nodes=12 values",
        ),
        (
            "a: xxxxxxxxxx\nb: ${a}${a}${a}\n",
            ConfigLimits(max_bytes=25),
            r"m.yaml:2:4: b: string interpolation produces more than max_bytes=25 characters",
        ),
        (
            "a: ${b}\nb: ${c}\nc: ${d}\nd: 1\n",
            ConfigLimits(max_depth=2),
            r"m.yaml:3:4: <root>: the config is nested deeper than max_depth=2 levels .*chains",
        ),
    ],
)
def test_interpolation_counts_toward_the_limits(text, limits, message):
    with pytest.raises(ConfigError, match=message):
        resolved(text, limits)


def test_interpolation_is_refused_as_its_output_grows_not_after(tmp_path):
    """100,000 copies of a 400 KB string inside one string: refused at the third copy, with
    a few megabytes in use (building it first would take 40 GB)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(
        "model: {type: relu}\nw: '" + "x" * 400_000 + "'\nb: '" + "${w}" * 100_000 + "'\n"
    )
    tracemalloc.start()
    try:
        with pytest.raises(
            ConfigError,
            match=r"bomb.yaml:3:4: b: string interpolation produces more than max_bytes=1,048,576",
        ):
            load_config(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20


def test_whole_value_copies_of_a_string_count_its_characters():
    with pytest.raises(
        ConfigError,
        match=r"m.yaml:4:4: d: string interpolation produces more than max_bytes=25 characters",
    ):
        resolved("a: xxxxxxxxxx\nb: ${a}\nc: ${a}\nd: ${a}\n", ConfigLimits(max_bytes=25))


def test_escape():
    assert escape("a ${b} \\${c}") == "a \\${b} \\\\${c}"
    source, _ = resolved(f"x: '{escape('cost: ${5}')}'\n")
    assert source.data == {"x": "cost: ${5}"}
