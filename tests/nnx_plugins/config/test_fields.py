"""Config models derived from __init__ signatures."""

from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from nnx_core import Module, Rngs
from nnx_layers import Linear, Sequential, initializers, relu
from nnx_plugins import layer_spec


class Everything(Module):
    def __init__(
        self,
        size: int,
        block: Module,
        *,
        head: Module | None = None,
        towers: list[Module] = (),
        named: dict[str, Module] | None = None,
        act: Callable[..., Any] = relu,
        weight_init: Any = initializers.ones,
        compute_dtype: Any = None,
        fn: Callable = print,
        untyped=(1, 2),
        rngs: Rngs,
        **extra: Any,
    ):
        pass


def test_field_kinds():
    spec = layer_spec("test.Everything", Everything)
    kinds = {f.name: f.kind for f in spec.fields}
    assert kinds == {
        "size": "plain",
        "block": "layer",
        "head": "layer",
        "towers": "layers",
        "named": "layer_map",
        "act": "activation",
        "weight_init": "initializer",
        "compute_dtype": "dtype",
        "fn": "opaque",
        "untyped": "plain",
    }
    assert spec.required == ("size", "block") and spec.takes_rngs
    assert spec.field("head").optional and not spec.field("block").optional
    assert "fn" not in {f.alias for f in spec.model.model_fields.values()}


def test_sequential_varargs_are_layers():
    (field,) = layer_spec("Sequential", Sequential).fields
    assert (field.name, field.kind, field.required) == ("layers", "layers", False)


def test_activation_spec_has_no_fields():
    spec = layer_spec("relu", relu)
    assert spec.is_activation and spec.fields == ()


def test_defaults_are_normalized():
    model = layer_spec("Linear", Linear).model
    fields = {f.alias: f for f in model.model_fields.values()}
    assert fields["param_dtype"].default == "float32"
    assert fields["bias_init"].default == {"type": "zeros"}


class Custom(Module):
    class config_model(pydantic.BaseModel):  # noqa: N801 - the attribute name is the protocol
        width: int = 2

    def __init__(self, width: int = 2, *, rngs: Rngs):
        self.width = width


def test_custom_config_model_is_used():
    spec = layer_spec("test.Custom", Custom)
    assert spec.custom and spec.model is Custom.config_model


def test_custom_config_model_must_be_pydantic():
    class Wrong(Module):
        config_model = dict

        def __init__(self):
            pass

    with pytest.raises(
        TypeError, match=r"Wrong.config_model must be a pydantic BaseModel subclass"
    ):
        layer_spec("test.Wrong", Wrong)
