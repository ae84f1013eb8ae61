"""Listing offers: a status that means something without importing anything."""

import pytest

from nnx_plugins import Registry, Settings
from nnx_plugins.registry._listing import offers
from nnx_plugins.testing import fake_distribution

from ..conftest import BROKEN, COLLIDING, installed


def listing(*fakes, kind="layer", **settings):
    registry = Registry(
        settings=Settings(**settings), distributions=[*installed("nnx-jax", "acme-layers"), *fakes]
    )
    return registry, {(o.name, o.plugin.distribution): o.status for o in offers(registry, kind)}


def test_fresh_names_are_available_and_nothing_is_imported():
    _, status = listing()
    assert (
        status[("Linear", "nnx-jax")] == status[("acme.GatedDense", "acme-layers")] == "available"
    )


def test_collisions_and_preferences_show_on_every_offer():
    _, status = listing(COLLIDING)
    assert status[("acme.GatedDense", "acme-layers")] == "collision: choose one with NNX_PREFER"
    assert status[("acme.GatedDense", "other-layers")] == "collision: choose one with NNX_PREFER"
    _, status = listing(COLLIDING, prefer={"acme.GatedDense": "other-layers"})
    assert status[("acme.GatedDense", "other-layers")] == "preferred by NNX_PREFER"
    assert status[("acme.GatedDense", "acme-layers")] == "not preferred (NNX_PREFER)"


def test_disabled_and_rejected_names_are_listed_with_why():
    odd = fake_distribution("odd", entry_points={"nnx.layers": {"Dense": "m:D", "Bad Name": "m:B"}})
    with pytest.warns(UserWarning, match="without a namespace"):
        _, status = listing(odd, allowlist=frozenset({"odd"}))
    assert status[("acme.GatedDense", "acme-layers")] == "disabled: not in NNX_PLUGINS"
    assert status[("Dense", "odd")] == "rejected: no namespace"
    assert status[("Bad Name", "odd")] == "rejected: invalid name"
    _, status = listing(kind="variable", autoload=False)
    assert status[("acme.LoRAParam", "acme-layers")] == "disabled by NNX_DISABLE_PLUGIN_AUTOLOAD"
    assert status[("Param", "nnx-jax")] == "available"


def test_lookups_made_in_this_process_show(fake_modules):
    registry, _ = listing(BROKEN)
    registry.get("layer", "acme.GatedDense")
    with pytest.warns(UserWarning), pytest.raises(Exception, match="boom"):
        registry.get("layer", "broken.Dense")
    status = {o.name: o.status for o in offers(registry, "layer")}
    assert status["acme.GatedDense"] == "loaded"
    assert status["broken.Dense"] == (
        "failed: broken-layers 0.3 failed to load layer 'broken.Dense' from boom:Dense: "
        "RuntimeError: boom at import."
    )
    assert status["broken.Other"] == "available"
