"""Arguments that are functions, optional initializers, scalar ``*_init`` and Variable kinds.

A layer argument that takes a function (``gate_fn``, ``attention_fn``) is written as a name or
as ``{type: name, ...arguments}``; a function that stands in for a default must take the same
inputs. ``*_init`` arguments annotated as numbers stay numbers; ``Initializer | None`` takes
``null``; a Variable class default makes the argument a Variable kind's name.
"""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

import nnx_core as nnx
from nnx_core import Module, Param, Rngs
from nnx_layers import MultiHeadAttention, dot_product_attention, initializers, leaky_relu
from nnx_layers.initializers import Initializer
from nnx_plugins import (
    ConfigError,
    build,
    config_schema,
    layer_spec,
    load_config,
    register_layer,
    to_config,
)
from nnx_plugins.config._bound import BoundFunction
from nnx_plugins.testing import isolated_registry

CELL = {"type": "LSTMCell", "in_features": 4, "hidden_features": 4}
ATTENTION = {"type": "MultiHeadAttention", "num_heads": 2, "in_features": 4, "decode": False}


def test_a_function_argument_takes_its_own_arguments():
    node = {**CELL, "gate_fn": {"type": "leaky_relu", "negative_slope": 0.1}}
    cell = build(node)
    assert cell.gate_fn == BoundFunction(leaky_relu, {"negative_slope": 0.1})
    x = jnp.linspace(-2.0, 2.0, 8)
    np.testing.assert_array_equal(cell.gate_fn(x), leaky_relu(x, negative_slope=0.1))
    config = to_config(cell)
    assert config["gate_fn"] == {"type": "leaky_relu", "negative_slope": 0.1}
    assert build(config).gate_fn == cell.gate_fn
    assert nnx.graphdef(build(config)) == nnx.graphdef(cell)


def test_a_function_argument_equal_to_the_defaults_is_its_name():
    node = {**CELL, "gate_fn": {"type": "leaky_relu", "negative_slope": 0.01}}
    assert load_config({"model": node}).model["gate_fn"] == "leaky_relu"
    assert build(node).gate_fn is leaky_relu


def scaled_attention(query, key, value, *, temperature: float = 1.0, **kwargs):
    """Attention with a softmax temperature: a plugin's stand-in for dot_product_attention."""
    return dot_product_attention(query / temperature, key, value, **kwargs)


def test_attention_fn_with_arguments_matches_the_python_layer():
    with isolated_registry():
        register_layer("fa.scaled_attention")(scaled_attention)
        node = {**ATTENTION, "attention_fn": {"type": "fa.scaled_attention", "temperature": 2.0}}
        built = build(node)
        direct = MultiHeadAttention(
            2,
            4,
            decode=False,
            rngs=Rngs(0),
            attention_fn=functools.partial(scaled_attention, temperature=2.0),
        )
        x = jnp.arange(24.0).reshape(1, 6, 4) / 24
        np.testing.assert_allclose(built(x), direct(x), rtol=1e-6)
        default = build(ATTENTION)
        assert not np.allclose(built(x), default(x))
        assert to_config(built)["attention_fn"] == node["attention_fn"]
        assert to_config(direct)["attention_fn"] == node["attention_fn"]


@pytest.mark.parametrize(
    ("node", "match"),
    [
        (
            {**ATTENTION, "attention_fn": "relu"},
            r"model\.attention_fn: 'relu' cannot stand in here: it takes \(x\), and this "
            r"argument is called with \(query, key, value\)",
        ),
        (
            {**CELL, "gate_fn": {"type": "leaky_relu", "negative_slop": 0.1}},
            r"model\.gate_fn: invalid arguments for 'leaky_relu': unknown argument "
            r"'negative_slop'\. Did you mean 'negative_slope'\?",
        ),
        (
            {**CELL, "gate_fn": {"type": "leaky_relu", "negative_slope": "steep"}},
            r"model\.gate_fn: invalid arguments for 'leaky_relu': negative_slope: Input should "
            r"be a valid number \(got 'steep'\)",
        ),
        (
            {**CELL, "gate_fn": 3},
            r"model\.gate_fn: expected a function's name such as 'relu', or its name and "
            r"arguments such as \{type: leaky_relu, negative_slope: 0\.2\}, got 3\.",
        ),
        ({**CELL, "gate_fn": "Linear"}, r"model\.gate_fn: 'Linear' is a layer, not a function"),
        ({**CELL, "gate_fn": "sigmod"}, r"model\.gate_fn: .*'sigmod'.*sigmoid"),
    ],
)
def test_bad_function_arguments_are_located(node, match):
    with pytest.raises(ConfigError, match=match):
        load_config({"model": node})


def test_the_schema_accepts_a_function_with_arguments():
    schema = config_schema()
    cell = schema["$defs"]["LSTMCell"]["properties"]["gate_fn"]
    kinds = {choice.get("type") for choice in cell["anyOf"]}
    assert {"string", "object", "null"} <= kinds


class Scaled(Module):
    """A layer with a scalar ``*_init``, an optional initializer and a Variable kind."""

    def __init__(
        self,
        features: int,
        *,
        scale_init: float = 1.0,
        bias_init: Initializer | None = None,
        kind: type[nnx.Variable] = Param,
        rngs: Rngs,
    ):
        self.features, self.scale_init, self.bias_init, self.kind = (
            features,
            scale_init,
            bias_init,
            kind,
        )
        self.scale = kind(jnp.full((features,), scale_init))
        self.bias = None if bias_init is None else kind(bias_init(rngs.params(), (features,)))


def test_scalar_init_optional_initializer_and_variable_kind_fields():
    with isolated_registry():
        register_layer("fa.Scaled")(Scaled)
        kinds = {f.name: f.kind for f in layer_spec("fa.Scaled", Scaled).fields}
        assert kinds == {
            "features": "plain",
            "scale_init": "plain",
            "bias_init": "initializer",
            "kind": "variable",
        }
        plain = build({"type": "fa.Scaled", "features": 3, "scale_init": 0.5})
        assert plain.bias is None and type(plain.scale) is Param
        np.testing.assert_array_equal(plain.scale.get_value(), [0.5, 0.5, 0.5])
        assert to_config(plain)["kind"] == "Param" and to_config(plain)["bias_init"] is None
        node = {"type": "fa.Scaled", "features": 2, "bias_init": "ones", "kind": "BatchStat"}
        built = build(node)
        assert type(built.scale) is nnx.BatchStat and type(built.bias) is nnx.BatchStat
        assert to_config(built)["kind"] == "BatchStat"
        assert to_config(built)["bias_init"] == {"type": "ones"}
        with pytest.raises(ConfigError, match=r"model\.kind: .*'BatchStats'"):
            load_config({"model": {**node, "kind": "BatchStats"}})
        with pytest.raises(ConfigError, match=r"model\.kind: expected a Variable kind's name"):
            load_config({"model": {**node, "kind": 3}})
        with pytest.raises(ConfigError, match=r"model\.scale_init: Input should be a valid number"):
            load_config({"model": {**node, "scale_init": "zeros"}})


def test_a_layer_default_of_an_optional_initializer_round_trips():
    layer = build({**ATTENTION, "out_kernel_init": None})
    assert build(to_config(layer)).out_kernel_init == layer.out_kernel_init
    assert isinstance(initializers.get("zeros"), Initializer)
