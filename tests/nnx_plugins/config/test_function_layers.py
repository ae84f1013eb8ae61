"""Function layers with arguments, and nested sub-layer specs, end to end through configs."""

import functools

import jax.numpy as jnp
import pytest

import nnx_core as nnx
from nnx_core import Module
from nnx_layers import Linear, Sequential, leaky_relu, softmax
from nnx_layers.activations import celu, elu, glu
from nnx_plugins import ConfigError, build, config_schema, layer_spec, load_config, to_config
from nnx_plugins.config._bound import BoundFunction
from nnx_plugins.testing import fake_distribution, isolated_registry

from ..conftest import installed

WITH_ARGUMENTS = [
    ({"type": "leaky_relu", "negative_slope": 0.2}, leaky_relu, {"negative_slope": 0.2}),
    ({"type": "elu", "alpha": 0.5}, elu, {"alpha": 0.5}),
    ({"type": "celu", "alpha": 2.0}, celu, {"alpha": 2.0}),
    ({"type": "softmax", "axis": 0}, softmax, {"axis": 0}),
    ({"type": "glu", "axis": -2}, glu, {"axis": -2}),
]


@pytest.mark.parametrize(("node", "function", "arguments"), WITH_ARGUMENTS)
def test_a_function_takes_its_arguments_from_the_config(node, function, arguments):
    built = build(node)
    assert built == BoundFunction(function, arguments)
    x = jnp.linspace(-2.0, 2.0, 16).reshape(4, 4)
    assert jnp.array_equal(built(x), function(x, **arguments))
    assert to_config(built) == load_config({"model": node}).model == node
    assert build(to_config(built)) == built


def test_arguments_equal_to_the_defaults_normalize_away():
    config = load_config({"model": {"type": "leaky_relu", "negative_slope": 0.01}})
    assert config.model == {"type": "leaky_relu"}
    assert build(config) is leaky_relu
    assert load_config({"model": {"type": "elu", "alpha": 1}}).model == {"type": "elu"}


def test_two_builds_give_equal_graphdefs_and_jit_does_not_retrace():
    config = {
        "type": "Sequential",
        "layers": [
            {"type": "Linear", "in_features": 4, "out_features": 4},
            {"type": "leaky_relu", "negative_slope": 0.2},
            {"type": "softmax", "axis": -1},
        ],
    }
    first, second = build(config), build(config)
    assert nnx.graphdef(first) == nnx.graphdef(second)
    assert hash(nnx.graphdef(first)) == hash(nnx.graphdef(second))
    traces = []

    @nnx.jit
    def forward(model, x):
        traces.append(1)
        return model(x)

    forward(first, jnp.ones((2, 4)))
    forward(second, jnp.ones((2, 4)))
    assert len(traces) == 1
    assert to_config(first) == load_config({"model": config}).model


def test_to_config_reads_a_functools_partial():
    model = Sequential(Linear(2, 2, rngs=nnx.Rngs(0)), functools.partial(softmax, axis=0))
    assert to_config(model)["layers"][1] == {"type": "softmax", "axis": 0}


def test_function_arguments_are_validated_and_in_the_schema():
    with pytest.raises(
        ConfigError,
        match=r"model\.negative_slop: unknown key 'negative_slop' "
        r"for leaky_relu\. Did you mean 'negative_slope'\?",
    ):
        load_config({"model": {"type": "leaky_relu", "negative_slop": 0.2}})
    with pytest.raises(ConfigError, match=r"model\.axis: Input should be a valid integer"):
        load_config({"model": {"type": "softmax", "axis": "last"}})
    schema = config_schema()["$defs"]["leaky_relu"]["properties"]["negative_slope"]
    assert schema == {
        "default": 0.01,
        "title": "Negative Slope",
        "anyOf": [{"type": "number"}, {"$ref": "#/$defs/Interpolation"}],
    }


def test_a_function_without_a_signature_has_no_fields():
    assert layer_spec("test.abs", abs).fields == ()


class Cell(Module):
    def __init__(self, size: int):
        self.size = size

    def __call__(self, x):
        return x


class Wrapper(Module):
    def __init__(self, cell: Cell, *, others: list[Cell] | None = None):
        self.cell = cell
        self.others = others


@pytest.fixture
def cells(fake_modules):
    fake_modules.Cell, fake_modules.Wrapper = Cell, Wrapper
    pack = fake_distribution(
        "cells",
        entry_points={
            "nnx.layers": {"test.Cell": "fakepack:Cell", "test.Wrapper": "fakepack:Wrapper"}
        },
    )
    with isolated_registry(distributions=[*installed("nnx-jax"), pack]) as registry:
        yield registry


def test_a_nested_spec_must_be_of_the_annotated_class(cells):
    good = {"type": "test.Wrapper", "cell": {"type": "test.Cell", "size": 2}}
    assert isinstance(build(good).cell, Cell)
    bad = {
        "type": "test.Wrapper",
        "cell": {"type": "Linear", "in_features": 2, "out_features": 2},
        "others": [{"type": "relu"}],
    }
    with pytest.raises(ConfigError) as info:
        load_config({"model": bad})
    assert [str(p) for p in info.value.problems] == [
        "<dict>: model.cell.type: test.Wrapper.cell takes a Cell layer, got 'Linear' (Linear). "
        "Give a layer whose class is a Cell.",
        "<dict>: model.others[0].type: test.Wrapper.others takes a Cell layer, got 'relu' (a "
        "function). Give a layer whose class is a Cell.",
    ]
