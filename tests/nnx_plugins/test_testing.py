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
