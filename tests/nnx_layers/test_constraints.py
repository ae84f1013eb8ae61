"""The constraints layers declare for configs agree with the checks the layers make themselves."""

import inspect
import typing

import annotated_types
import pytest

from nnx_core import Rngs
from nnx_layers import (
    BatchNorm,
    Conv,
    ConvTranspose,
    Dropout,
    Embed,
    LayerNorm,
    Linear,
    PositionEmbed,
    RMSNorm,
)
from nnx_layers._constraints import MAX_SIZE, Rate, Size
from nnx_layers.activations import celu

ARGUMENTS = {
    Linear: {"in_features": 2, "out_features": 2},
    Embed: {"num_embeddings": 2, "features": 2},
    Conv: {"in_features": 2, "out_features": 2, "kernel_size": 3},
    ConvTranspose: {"in_features": 2, "out_features": 2, "kernel_size": 3},
    BatchNorm: {"num_features": 2},
    LayerNorm: {"num_features": 2},
    RMSNorm: {"num_features": 2},
    Dropout: {"rate": 0.5},
    PositionEmbed: {"max_length": 2, "features": 2},
}


def intervals(annotation):
    """The ``Interval``/``Gt``/``Ge`` bounds in an ``Annotated`` annotation (or a union)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return [
            m
            for m in annotation.__metadata__
            if isinstance(m, (annotated_types.BaseMetadata, annotated_types.GroupedMetadata))
        ]
    return []


def just_outside(bound):
    low = getattr(bound, "ge", None)
    if low is None:
        low = getattr(bound, "gt", None)
    return low - 1 if isinstance(low, int) and not isinstance(low, bool) else low - 0.5


CASES = [
    (cls, name)
    for cls in ARGUMENTS
    for name, parameter in inspect.signature(cls.__init__).parameters.items()
    if intervals(typing.get_type_hints(cls.__init__, include_extras=True).get(name))
]


def test_the_constraints_are_declared():
    declared = {(cls.__name__, name) for cls, name in CASES}
    assert {
        ("Linear", "in_features"),
        ("Dropout", "rate"),
        ("BatchNorm", "momentum"),
        ("BatchNorm", "epsilon"),
        ("Conv", "feature_group_count"),
    } <= declared


@pytest.mark.parametrize(("cls", "name"), CASES, ids=[f"{c.__name__}.{n}" for c, n in CASES])
def test_a_value_below_the_declared_range_is_refused_by_the_layer_too(cls, name):
    hints = typing.get_type_hints(cls.__init__, include_extras=True)
    (bound,) = [
        b for b in intervals(hints[name]) if getattr(b, "ge", getattr(b, "gt", None)) is not None
    ]
    kwargs = {**ARGUMENTS[cls], name: just_outside(bound)}
    args = {"rngs": Rngs(0)} if "rngs" in inspect.signature(cls.__init__).parameters else {}
    with pytest.raises(ValueError, match=name):
        cls(**kwargs, **args)


def test_rates_above_one_are_refused():
    assert typing.get_args(Rate)[1].le == 1
    with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\]"):
        Dropout(1.01)
    with pytest.raises(ValueError, match=r"momentum must be a number in \[0, 1\]"):
        BatchNorm(2, momentum=1.01, rngs=Rngs(0))


def test_sizes_and_function_arguments():
    assert typing.get_args(Size)[1].le == MAX_SIZE == 2**31 - 1
    hint = typing.get_type_hints(celu, include_extras=True)["alpha"]
    assert [type(m).__name__ for m in intervals(hint)] == ["Gt"]
