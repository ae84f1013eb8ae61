"""ConfigError formatting, paths and suggestions."""

import pytest

from nnx_plugins import ConfigError, Problem
from nnx_plugins._text import format_path, suggest


def test_error_lists_every_problem():
    problems = [Problem(("model", "type"), "bad", "m.yaml", 2, 9), Problem(("model",), "worse")]
    error = ConfigError(problems)
    assert str(error).splitlines() == [
        "2 problems in <dict>, m.yaml:",
        "  m.yaml:2:9: model.type: bad",
        "  <dict>: model: worse",
    ]
    assert error.problems == tuple(problems) and isinstance(error, ValueError)


def test_empty_error_is_refused():
    with pytest.raises(ValueError, match="needs at least one Problem"):
        ConfigError([])


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), "<root>"),
        (("model", "layers", 0), "model.layers[0]"),
        ((3,), "[3]"),
        (("model", "branches", "x-y", "type"), "model.branches['x-y'].type"),
    ],
)
def test_format_path(path, text):
    assert format_path(path) == text


def test_suggest():
    assert suggest("relu", []) == ""
    assert suggest("Lienar", ["Linear", "LayerNorm"]) == " Did you mean 'Linear'?"
    assert suggest("zzz", ["Linear"]) == ""
