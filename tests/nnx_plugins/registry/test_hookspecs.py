"""The pluggy project and its two hooks."""

import pluggy

from nnx_plugins import hookimpl
from nnx_plugins.registry import _hookspecs


def test_hooks_are_specified_for_the_nnx_project():
    manager = pluggy.PluginManager("nnx")
    manager.add_hookspecs(_hookspecs)
    assert {"nnx_register_layers", "nnx_register_variable_types"} <= {
        name for name in dir(manager.hook) if name.startswith("nnx_")
    }
    assert hookimpl.project_name == _hookspecs.PROJECT_NAME == "nnx"
