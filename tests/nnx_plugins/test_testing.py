"""The conformance kit itself: it passes good layers and names every problem of bad ones."""

import pytest

import nnx_core
from nnx_core import Module, Rngs
from nnx_plugins.testing import (
    LayerCheckError,
    check_layer,
    check_variable_type,
    fake_distribution,
    isolated_registry,
)

from .conftest import installed


class Normalizing(Module):
    """Breaks the round trip: stores ``sizes`` as a tuple of its own making."""

    def __init__(self, sizes: int | list[int], *, rngs: Rngs):
        self.sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)


def test_check_layer_passes_builtins_and_activations(nnx_registry):
    assert check_layer(
        "Conv",
        {"in_features": 1, "out_features": 2, "kernel_size": [3, 3]},
        input_shape=(1, 5, 5, 1),
    ).output_shape == (1, 5, 5, 2)
    assert check_layer("relu").spec.is_activation


def test_check_layer_reports_round_trip_differences(fake_modules):
    fake_modules.Normalizing = Normalizing
    pack = fake_distribution(
        "norm-pack", entry_points={"nnx.layers": {"norm.Normalizing": "fakepack:Normalizing"}}
    )
    with isolated_registry(distributions=[*installed("nnx-jax"), pack]):
        check_layer("norm.Normalizing", {"sizes": [2]})
        with pytest.raises(LayerCheckError, match=r"round trip differs at sizes: \[3\] != 3"):
            check_layer("norm.Normalizing", {"sizes": 3})


def test_check_variable_type(nnx_registry, monkeypatch):
    assert check_variable_type("acme.LoRAParam").__name__ == "LoRAParam"
    monkeypatch.setattr(nnx_core, "variable_name", lambda cls: "wrong")
    with pytest.raises(
        LayerCheckError, match=r"nnx_core.variable_name\(LoRAParam\) is not 'acme.LoRAParam'"
    ):
        check_variable_type("acme.LoRAParam")


class Fragile(Module):
    """Stores its argument under another name (to_config fails) and cannot run forward."""

    def __init__(self, features: int, *, rngs: Rngs):
        self.size = features

    def __call__(self, x):
        raise ValueError("forward is broken")


class Unbuildable(Module):
    def __init__(self, features: int, *, rngs: Rngs):
        raise RuntimeError("init is broken")


def test_check_layer_collects_the_failures_of_the_layers_own_code(nnx_registry):
    from nnx_plugins import register_layer

    register_layer("kit.Fragile")(Fragile)
    register_layer("kit.Unbuildable")(Unbuildable)
    with pytest.raises(LayerCheckError) as info:
        check_layer("kit.Fragile", {"features": 3}, input_shape=(2, 3))
    assert str(info.value).splitlines() == [
        "check_layer('kit.Fragile') failed:",
        "  to_config(layer) failed: ValueError: to_config cannot read Fragile.features at model: "
        "store each constructor argument as an attribute of the same name, or give the class a "
        "config_model.",
        "  the forward pass on (2, 3) failed: ValueError: forward is broken",
    ]
    with pytest.raises(
        LayerCheckError,
        match=r"building the layer failed: ConfigError: 1 problem in <dict>:\n .* building "
        r"kit.Unbuildable raised RuntimeError: init is broken",
    ):
        check_layer("kit.Unbuildable", {"features": 3}, input_shape=(2, 3))
    with pytest.raises(
        LayerCheckError,
        match=r"(?s)validating the config failed: ConfigError: .*unknown key 'featurez'",
    ):
        check_layer("kit.Fragile", {"featurez": 3})
    with pytest.raises(
        LayerCheckError, match=r"looking up 'kit.Nope' failed: UnknownNameError: Unknown layer"
    ):
        check_layer("kit.Nope")
