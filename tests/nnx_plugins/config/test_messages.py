"""condense: one message per failing value, union members merged."""

import typing
from collections.abc import Sequence

import pydantic
import pytest

from nnx_plugins.config._messages import clean_loc, condense
from nnx_plugins.config._scalars import strict_type

PADDING = typing.Literal["SAME", "VALID"] | int | Sequence[int | tuple[int, int]]


def errors(annotation, value):
    model = pydantic.create_model("M", x=(strict_type(annotation), ...))
    with pytest.raises(pydantic.ValidationError) as info:
        model.model_validate({"x": value})
    return condense(info.value.errors())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("same", [(("x",), "Input should be 'SAME' or 'VALID'")]),
        (True, [(("x",), "Input should be 'SAME' or 'VALID', an integer or a list")]),
        ([[1, "a"]], [(("x", 0, 1), "Input should be a valid integer")]),
        (2.5, [(("x",), "Input should be 'SAME' or 'VALID', an integer or a list")]),
    ],
)
def test_union_errors_become_one_message(value, expected):
    assert [(loc, message) for loc, message, _ in errors(PADDING, value)] == expected


def test_a_broken_bound_beats_a_wrong_type():
    (only,) = errors(int | list[typing.Annotated[int, pydantic.Field(ge=1)]], [1, 0])
    assert only == (("x", 1), "Input should be greater than or equal to 1", 0)


def test_separate_values_stay_separate():
    model = pydantic.create_model("M", a=(strict_type(int), ...), b=(strict_type(float), ...))
    with pytest.raises(pydantic.ValidationError) as info:
        model.model_validate({"a": "x", "b": float("nan")})
    assert [loc for loc, _, _ in condense(info.value.errors())] == [("a",), ("b",)]


def test_two_types_are_joined_with_or():
    with pytest.raises(pydantic.ValidationError) as info:
        pydantic.TypeAdapter(strict_type(int | str)).validate_python(1.5)
    assert condense(info.value.errors(), keep=0) == [
        ((), "Input should be an integer, or a string", 1.5)
    ]


def test_clean_loc_keeps_field_names_and_indexes():
    assert clean_loc(("padding", "constrained-int", 0, "tuple[int, int]", 1)) == ("padding", 0, 1)
    assert clean_loc(("int", 2), keep=0) == (2,)
