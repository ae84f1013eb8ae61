"""Metadata discovery and the NNX_* switches."""

import pytest

from nnx_plugins import PluginInfo, PluginSettingsError, Settings
from nnx_plugins.registry._discovery import check_name, discover, parse_prefer
from nnx_plugins.testing import fake_distribution


def test_settings_from_env():
    s = Settings.from_env(
        {
            "NNX_DISABLE_PLUGIN_AUTOLOAD": "1",
            "NNX_STRICT_PLUGINS": "yes",
            "NNX_PLUGINS": "Acme_Layers, other",
            "NNX_PREFER": "a.X=Acme_Layers",
        }
    )
    assert (s.autoload, s.strict) == (False, True)
    assert s.allowlist == frozenset({"acme-layers", "other"})
    assert s.prefer == {"a.X": "acme-layers"}
    assert Settings.from_env({}) == Settings()


def test_bad_boolean_switch():
    with pytest.raises(PluginSettingsError, match=r"NNX_STRICT_PLUGINS='maybe' is not a boolean"):
        Settings.from_env({"NNX_STRICT_PLUGINS": "maybe"})


def test_bad_preference():
    with pytest.raises(PluginSettingsError, match=r"'acme.X' is not of the form name=distribution"):
        parse_prefer("acme.X")
    assert parse_prefer({"a.X": "B_c"}) == {"a.X": "b-c"}


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (Settings(), ""),
        (Settings(autoload=False), "disabled by NNX_DISABLE_PLUGIN_AUTOLOAD"),
        (Settings(allowlist=frozenset({"x"})), "not in NNX_PLUGINS"),
        (Settings(allowlist=frozenset({"acme-layers"})), ""),
    ],
)
def test_disabled_reasons(settings, reason):
    assert settings.disabled_reason("acme_layers") == reason
    assert settings.disabled_reason("nnx-jax") == ""


@pytest.mark.parametrize(
    ("name", "distribution", "ok"),
    [
        ("Linear", "nnx-jax", True),
        ("acme.GatedDense", "acme-layers", True),
        ("acme.sub.Thing", "acme-layers", True),
        ("GatedDense", "acme-layers", False),
        ("Acme.X", "acme-layers", False),
        ("acme.", "acme-layers", False),
        ("bad name", "nnx-jax", False),
    ],
)
def test_name_rules(name, distribution, ok):
    assert (check_name("layer", name, PluginInfo(distribution, "1")) == "") is ok


def test_discover_reads_groups_dedupes_and_sorts():
    first = fake_distribution(
        "Zed", entry_points={"nnx.layers": {"zed.A": "m:A"}, "console_scripts": {"zed": "m:main"}}
    )
    shadowed = fake_distribution("zed", "9", entry_points={"nnx.layers": {"zed.B": "m:B"}})
    plain = fake_distribution("plain", entry_points={"console_scripts": {"p": "m:main"}})
    alpha = fake_distribution("alpha", entry_points={"nnx.plugins": {"alpha": "alpha.plugin"}})
    records = discover(Settings(), [first, shadowed, plain, alpha])
    assert [r.plugin.distribution for r in records] == ["alpha", "Zed"]
    assert [(e.kind, e.name, e.target) for e in records[1].entries] == [("layer", "zed.A", "m:A")]
    assert records[0].entries[0].kind == "plugin"
