"""Providers: status, and how a target relates to the package that defines an object."""

from nnx_plugins import PluginInfo, PluginLoadError, Provider
from nnx_plugins.registry._providers import same_package, target_of, top_package

PACK = PluginInfo("acme-layers", "0.1.0")


def test_status_follows_loading():
    offer = Provider("layer", "acme.X", PACK, "acme_layers.dense:X")
    assert offer.status == "not loaded"
    offer.loaded = True
    assert offer.status == "loaded"
    offer.error = PluginLoadError("acme-layers 0.1.0 failed.", plugin=PACK, fix="Reinstall.")
    assert offer.status == "failed: acme-layers 0.1.0 failed. Reinstall."


def test_targets_and_packages():
    from acme_layers.variables import LoRAParam

    assert target_of(LoRAParam, "acme.LoRAParam") == "acme_layers.variables:LoRAParam"
    assert target_of(3, "n.x") == "?:n.x"
    assert top_package("acme_layers.dense:GatedDense") == "acme_layers"
    offer = Provider("variable", "acme.LoRAParam", PACK, "acme_layers:LoRAParam")
    assert same_package(offer, LoRAParam) and not same_package(offer, int)
