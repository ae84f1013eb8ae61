"""acme-layers conformance, through the real entry points and nnx_plugins.testing."""

import jax.numpy as jnp
import pytest

import nnx_core
from nnx_plugins import build, get_layer
from nnx_plugins.testing import check_layer, check_variable_type


@pytest.mark.parametrize(
    "config",
    [
        {"in_features": 4, "out_features": 3},
        {"in_features": 4, "out_features": 3, "lora_rank": 2, "gate_activation": "acme.Swish"},
        {"in_features": 4, "out_features": 3, "use_bias": False, "kernel_init": "zeros"},
    ],
)
def test_gated_dense_conforms(nnx_registry, config):
    report = check_layer("acme.GatedDense", config, input_shape=(2, 4))
    assert report.output_shape == (2, 3)


def test_swish_is_registered_by_the_hook(nnx_registry):
    check_layer("acme.Swish")
    assert float(get_layer("acme.Swish")(jnp.zeros(()))) == 0.0


def test_lora_param_kind(nnx_registry):
    cls = check_variable_type("acme.LoRAParam")
    model = build({"type": "acme.GatedDense", "in_features": 4, "out_features": 3, "lora_rank": 2})
    adapters = nnx_core.state(model, "acme.LoRAParam")
    assert issubclass(cls, nnx_core.Param)
    assert sorted(p[-1] for p, _ in adapters.flat_state()) == ["lora_a", "lora_b"]


def test_negative_rank_is_reported_with_its_path(nnx_registry):
    from nnx_plugins import ConfigError

    with pytest.raises(ConfigError, match=r"model: building acme.GatedDense raised ValueError"):
        build({"type": "acme.GatedDense", "in_features": 4, "out_features": 3, "lora_rank": -1})
