"""The command's own lines for plugin problems: what happened, then the fix; never a source line."""

import warnings

import pytest

from nnx_plugins import PluginInfo, PluginLoadError, PluginWarning
from nnx_plugins.cli._output import fail, plugin_warnings_as_lines, problem_text

ERROR = PluginLoadError(
    "acme 1.0 failed to import acme.x: SystemExit: 3.",
    plugin=PluginInfo("acme", "1.0"),
    fix="Reinstall acme.",
)


def test_problem_text_has_the_fix_on_its_own_line():
    assert problem_text("error", ERROR) == (
        "nnx: error: acme 1.0 failed to import acme.x: SystemExit: 3.\n  fix: Reinstall acme."
    )
    bare = PluginLoadError("acme 1.0 failed.", plugin=PluginInfo("acme", "1.0"))
    assert problem_text("warning", bare) == "nnx: warning: acme 1.0 failed."


def test_plugin_warnings_print_as_lines_and_the_error_does_not_repeat_the_fix(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the command shows plugin warnings whatever the filters
        with plugin_warnings_as_lines():
            warnings.warn(PluginWarning(ERROR), stacklevel=1)
            assert fail(ERROR) == 1
    err = capsys.readouterr().err
    assert err == (
        "nnx: warning: acme 1.0 failed to import acme.x: SystemExit: 3.\n"
        "  fix: Reinstall acme.\n"
        "nnx: error: acme 1.0 failed to import acme.x: SystemExit: 3.\n"
    )
    assert fail(ERROR) == 1  # outside the command: the fix again
    assert capsys.readouterr().err.endswith("  fix: Reinstall acme.\n")


def test_other_warnings_go_to_python_s_own_display(capsys):
    with pytest.warns(DeprecationWarning, match="something else"):
        with plugin_warnings_as_lines():
            warnings.warn("something else", DeprecationWarning, stacklevel=1)
    assert capsys.readouterr().err == ""


def test_fail_with_a_plain_message(capsys):
    assert fail("no such file") == 1
    assert capsys.readouterr().err == "nnx: error: no such file\n"
