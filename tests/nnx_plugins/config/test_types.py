"""dtype, initializer and activation field types."""

import jax.numpy as jnp
import numpy as np
import pytest
from pydantic_core import PydanticCustomError

from nnx_layers import initializers
from nnx_plugins.config._types import normalize_dtype, normalize_initializer, to_json, tuplify


@pytest.mark.parametrize(
    ("value", "name"),
    [(jnp.float32, "float32"), (np.dtype("int8"), "int8"), ("bfloat16", "bfloat16"), (None, None)],
)
def test_dtypes_by_name(value, name):
    assert normalize_dtype(value) == name


def test_unknown_dtype_suggests():
    with pytest.raises(
        PydanticCustomError, match=r"unknown dtype 'flaot32'\. Did you mean 'float32'"
    ):
        normalize_dtype("flaot32")


@pytest.mark.parametrize(
    ("value", "normal"),
    [
        ("zeros", {"type": "zeros"}),
        ({"type": "normal", "stddev": 0.5}, {"type": "normal", "stddev": 0.5}),
        (initializers.constant(2.0), {"type": "constant", "value": 2.0}),
        (
            {"type": "variance_scaling", "batch_axis": [0]},
            {
                "type": "variance_scaling",
                "scale": 1.0,
                "mode": "fan_in",
                "distribution": "truncated_normal",
                "in_axis": -2,
                "out_axis": -1,
                "batch_axis": [0],
            },
        ),
    ],
)
def test_initializers_normalize(value, normal):
    assert normalize_initializer(value) == normal
    assert normalize_initializer(normal) == normal


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, r"expected an initializer name, or a mapping with its name under 'type' .* got 3"),
        ("nromal", r"unknown initializer 'nromal'\. Did you mean 'normal'"),
        ({"type": "normal", "sigma": 1}, r"invalid arguments for initializer 'normal'"),
    ],
)
def test_bad_initializers(value, message):
    with pytest.raises(PydanticCustomError, match=message):
        normalize_initializer(value)


def test_json_conversion():
    assert to_json({"a": (1, [jnp.bfloat16])}) == {"a": [1, ["bfloat16"]]}
    assert tuplify([1, [2], {"k": [3]}]) == (1, (2,), {"k": (3,)})
    with pytest.raises(TypeError, match="has no config spelling"):
        to_json(object())
