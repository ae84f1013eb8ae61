"""Plugin code runs isolated from stdout, and anything but KeyboardInterrupt becomes PluginLoadError."""

import io
import sys

import pytest

from nnx_plugins import PluginInfo, PluginLoadError
from nnx_plugins.registry._errors import IN_PROCESS
from nnx_plugins.registry._loading import check_object, load_fix, run_plugin_code

PACK = PluginInfo("probe-pack", "1.0")


def test_plugin_code_prints_on_stderr_and_returns_its_value(capsys):
    def noisy():
        print("from the pack")
        return 7

    assert run_plugin_code(noisy, plugin=PACK, action="import probe") == 7
    out, err = capsys.readouterr()
    assert (out, err) == ("", "from the pack\n")


def test_a_pack_replacing_stdout_gets_it_restored():
    before = sys.stdout

    def hijack():
        sys.stdout = io.StringIO()

    run_plugin_code(hijack, plugin=PACK, action="import probe")
    assert sys.stdout is before


@pytest.mark.parametrize(
    "raised, text",
    [
        (SystemExit(4), "SystemExit: 4 (the pack called sys.exit())."),
        (SystemExit(), "SystemExit (the pack called sys.exit())."),
        (GeneratorExit(), "GeneratorExit."),
        (MemoryError(), "MemoryError (the pack ran out of memory)."),
        (RecursionError("deep"), "RecursionError: deep (infinite recursion in the pack)."),
        (ValueError("bad"), "ValueError: bad."),
    ],
)
def test_every_exception_becomes_a_load_error_naming_the_pack(raised, text):
    def fail():
        raise raised

    with pytest.raises(PluginLoadError, match=r"probe-pack 1\.0 failed to import probe: ") as info:
        run_plugin_code(fail, plugin=PACK, action="import probe")
    assert info.value.message == f"probe-pack 1.0 failed to import probe: {text}"
    assert info.value.plugin is PACK and info.value.__cause__ is raised
    assert info.value.fix == load_fix(PACK)


def test_keyboard_interrupt_goes_through():
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_plugin_code(interrupted, plugin=PACK, action="import probe")


def test_the_fix_names_the_pack_or_the_in_process_registration():
    assert load_fix(PACK) == (
        "Upgrade or reinstall probe-pack, or run without it: set NNX_PLUGINS to the packs to "
        "keep (NNX_DISABLE_PLUGIN_AUTOLOAD=1 keeps only the built-ins)."
    )
    assert load_fix(IN_PROCESS) == "Fix the object you registered, or register another one."


@pytest.mark.parametrize(
    "kind, obj, match",
    [
        ("layer", dict, "as the class dict, which is not a subclass of nnx_core.Module"),
        ("layer", "relu", "as 'relu', which is neither a Module subclass nor an activation"),
        ("variable", int, r"as <class 'int'>, which is not a subclass of nnx_core.Variable"),
        (
            "section",
            dict,
            r"section 'p.X' as <class 'dict'>, which is not a subclass of pydantic\.BaseModel\.",
        ),
    ],
)
def test_check_object_refuses_what_the_kind_cannot_use(kind, obj, match):
    with pytest.raises(PluginLoadError, match=rf"probe-pack 1\.0 provides .*{match}"):
        check_object(kind, "p.X", obj, PACK)


def test_check_object_accepts_layers_activations_and_kinds():
    from nnx_core import Param
    from nnx_layers import Linear, relu

    for kind, obj in (("layer", Linear), ("layer", relu), ("variable", Param)):
        check_object(kind, obj.__name__, obj, PluginInfo("nnx-jax", "0.1.0"))
