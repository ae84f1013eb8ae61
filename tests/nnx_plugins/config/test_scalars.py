"""strict_type: strict scalars inside any annotation, lax containers, constraints kept."""

import typing
from collections.abc import Sequence

import annotated_types
import pydantic
import pytest

from nnx_plugins.config._scalars import INT_MAX, strict_type


def validate(annotation, value):
    return pydantic.TypeAdapter(strict_type(annotation)).validate_python(value)


@pytest.mark.parametrize(
    ("annotation", "value", "message"),
    [
        (int, True, "Input should be a valid integer"),
        (int, "4", "Input should be a valid integer"),
        (int, 4.0, "Input should be a valid integer"),
        (int, INT_MAX + 1, "Input should be less than or equal to 9223372036854775807"),
        (float, False, "Input should be a valid number"),
        (float, float("nan"), "Input should be a finite number"),
        (float, float("-inf"), "Input should be a finite number"),
        (bool, 1, "Input should be a valid boolean"),
        (str, 3, "Input should be a valid string"),
        (list[int], [1, True], "Input should be a valid integer"),
        (dict[str, float], {"a": float("inf")}, "Input should be a finite number"),
        (typing.Optional[tuple[int, ...]], [1, "2"], "Input should be a valid integer"),  # noqa: UP045
        (
            typing.Annotated[float, annotated_types.Interval(ge=0, le=1)],
            1.5,
            "less than or equal to 1",
        ),
    ],
)
def test_scalars_are_strict_everywhere(annotation, value, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        validate(annotation, value)


def test_containers_stay_lax_and_values_pass_through():
    assert validate(tuple[int, float], [1, 2]) == (1, 2.0)
    assert validate(Sequence[int], (1, 2)) == (1, 2)
    assert validate(float, 3) == 3.0
    assert validate(typing.Literal["a", "b"] | int, "b") == "b"
    assert validate(int | None, None) is None


def test_constraints_reach_the_json_schema():
    schema = pydantic.TypeAdapter(
        strict_type(typing.Annotated[int, annotated_types.Interval(ge=1, le=8)])
    ).json_schema()
    assert (schema["minimum"], schema["maximum"], schema["type"]) == (1, 8, "integer")


def test_unknown_annotations_are_unchanged():
    assert strict_type(typing.Any) is typing.Any
    assert strict_type(bytes) is bytes


def test_an_int_mapping_key_accepts_the_json_spelling_only():
    assert validate(dict[int, int], {"0": 3, 1: 4, "-2": 5}) == {0: 3, 1: 4, -2: 5}
    for bad in ({"zero": 3}, {True: 3}, {"1.5": 3}):
        with pytest.raises(pydantic.ValidationError, match="valid integer"):
            validate(dict[int, int], bad)
