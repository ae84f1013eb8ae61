"""The key path grammar of overrides and interpolations: the inverse of format_path."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnx_plugins._text import format_path
from nnx_plugins.config._paths import PathSyntaxError, parse_path, path_prefix


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("model", ("model",)),
        ("model.layers[1].out_features", ("model", "layers", 1, "out_features")),
        ("model.layers.1.out_features", ("model", "layers", 1, "out_features")),
        ("model.layers[-1]", ("model", "layers", -1)),
        ("plugins.prefer['acme.GatedDense']", ("plugins", "prefer", "acme.GatedDense")),
        ('a["b c"][ 2 ]', ("a", "b c", 2)),
        ("x-y.z", ("x-y", "z")),
    ],
)
def test_paths(text, path):
    assert parse_path(text) == path


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("", r"expected a key path such as model.layers\[0\].out_features at ''", 1),
        (".a", r"expected a key path .* at '.a'", 1),
        ("1.a", r"expected a key path .* at '1.a'", 1),
        ("a..b", r"unexpected '..b' after the path 'a'", 2),
        ("a.[1]", r"unexpected '.\[1\]' after the path 'a'", 2),
        ("a b", r"unexpected ' b' after the path 'a'", 2),
        ("oc.env:HOME", r"unexpected ':HOME' after the path 'oc.env'", 7),
        ("a[x]", r"unexpected '\[x\]' after the path 'a'", 2),
    ],
)
def test_bad_paths(text, message, column):
    with pytest.raises(PathSyntaxError, match=message) as info:
        parse_path(text)
    assert info.value.column == column


keys = st.one_of(
    st.text(min_size=1, max_size=8).filter(lambda k: "\x00" not in k),
    st.integers(min_value=-5, max_value=50),
)


@given(st.tuples(st.text(min_size=1, max_size=8), st.lists(keys, max_size=5)))
def test_parse_path_reads_what_format_path_writes(parts):
    first, rest = parts
    path = (first, *rest)
    assert parse_path(format_path(path)) == path


def test_path_prefix_stops_at_the_first_character_after_the_path():
    assert path_prefix("a.b=c=d") == (("a", "b"), [1, 3], 3)
    assert path_prefix("model.x=1") == (("model", "x"), [1, 7], 7)
    assert path_prefix("a[0]=") == (("a", 0), [1, 2], 4)
