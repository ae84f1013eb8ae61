"""Running one hook plugin: the names it offers, and nothing kept when it fails."""

import sys
import types

import pytest

from nnx_plugins import PluginInfo, PluginLoadError, PluginNameError, hookimpl
from nnx_plugins.registry._discovery import EntryRecord
from nnx_plugins.registry._hooks import Registrar, plugin_manager, run_hook_plugin
from nnx_plugins.testing import fake_distribution

PACK = PluginInfo("hook-pack", "1.0")


@pytest.fixture
def hook_module(monkeypatch):
    """``hook_mod`` with the hooks given; returns its entry record."""

    def make(**hooks):
        module = types.ModuleType("hook_mod")
        for name, function in hooks.items():
            setattr(module, name, hookimpl(function))
        monkeypatch.setitem(sys.modules, "hook_mod", module)
        (entry,) = fake_distribution(
            "hook-pack", "1.0", entry_points={"nnx.plugins": {"hook": "hook_mod"}}
        ).entry_points
        return EntryRecord("plugin", "hook", "hook_mod", PACK, entry), module

    return make


def test_hooks_offer_names_through_the_registrar(hook_module):
    def nnx_register_layers(registry):
        registry.add_layer("hook.half", lambda x: x / 2)

    record, _ = hook_module(nnx_register_layers=nnx_register_layers)
    (provider,) = run_hook_plugin(plugin_manager(), record)
    assert (provider.name, provider.plugin, provider.loaded) == ("hook.half", PACK, True)
    assert provider.obj(4) == 2 and provider.target.endswith(
        ".nnx_register_layers.<locals>.<lambda>"
    )


@pytest.mark.parametrize(
    "hook, error, match",
    [
        (lambda registry: registry.add_layer("half", abs), PluginNameError, "without a namespace"),
        (lambda registry: registry.add_layer("hook.x", 1), PluginLoadError, "neither a Module"),
        (lambda registry: 1 / 0, PluginLoadError, r"run the hooks of plugin 'hook' \(hook_mod\)"),
    ],
)
def test_a_failing_plugin_is_unregistered(hook_module, hook, error, match):
    record, module = hook_module(nnx_register_layers=hook)
    manager = plugin_manager()
    with pytest.raises(error, match=match):
        run_hook_plugin(manager, record)
    assert not manager.is_registered(module)


def test_the_registrar_collects_in_order():
    registrar = Registrar(PACK)
    registrar.add_variable_type("hook.K", int)
    registrar.add_layer("hook.L", abs)
    assert registrar.added == [("variable", "hook.K", int), ("layer", "hook.L", abs)]
