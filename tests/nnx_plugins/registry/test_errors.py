"""Every plugin error carries its distribution."""

import pytest

from nnx_plugins import (
    NameCollisionError,
    PluginError,
    PluginInfo,
    PluginLoadError,
    PluginNameError,
    PluginSettingsError,
    PluginWarning,
    UnknownNameError,
)


@pytest.mark.parametrize("cls", [PluginLoadError, PluginNameError, PluginSettingsError])
def test_plugin_errors_carry_the_plugin(cls):
    info = PluginInfo("acme-layers", "0.1.0")
    with pytest.raises(PluginError, match="went wrong") as caught:
        raise cls("went wrong", plugin=info)
    assert caught.value.plugin is info and str(info) == "acme-layers 0.1.0"


def test_collision_and_unknown_errors():
    a, b = PluginInfo("a", "1"), PluginInfo("b", "2")
    with pytest.raises(NameCollisionError, match="twice") as caught:
        raise NameCollisionError("twice", providers=(a, b))
    assert caught.value.plugin is a and caught.value.providers == (a, b)
    with pytest.raises(UnknownNameError, match="nope") as unknown:
        raise UnknownNameError("nope", suggestions=("x",))
    assert unknown.value.plugin is None and unknown.value.suggestions == ("x",)
    assert issubclass(PluginWarning, UserWarning)


def test_an_error_keeps_what_happened_and_the_fix_apart():
    info = PluginInfo("acme-layers", "0.1.0")
    error = PluginLoadError("acme-layers 0.1.0 failed.", plugin=info, fix="Reinstall it.")
    assert (str(error), error.message, error.fix) == (
        "acme-layers 0.1.0 failed. Reinstall it.",
        "acme-layers 0.1.0 failed.",
        "Reinstall it.",
    )
    collision = NameCollisionError("twice.", providers=(info,), fix="Choose one.")
    assert str(collision) == "twice. Choose one."


def test_a_warning_carries_its_error():
    error = PluginLoadError("a 1 failed.", plugin=PluginInfo("a", "1"))
    assert (
        PluginWarning(error).error is error
        and str(PluginWarning(error)) == "nnx plugin a 1 failed."
    )
    assert PluginWarning("plain").error is None and str(PluginWarning("plain")) == "plain"
    assert str(PluginInfo("in-process", "")) == "in-process"
