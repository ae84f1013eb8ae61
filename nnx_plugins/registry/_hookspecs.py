"""Hook specifications of the ``nnx`` pluggy project.

A plugin module listed in the ``nnx.plugins`` entry-point group implements any of these hooks
with the `hookimpl` marker. Every hook receives a registrar whose ``add_layer(name, obj)``,
``add_variable_type(name, cls)``, ``add_task``, ``add_dataset``, ``add_metric``, ``add_logger``
and ``add_callback`` register names on behalf of the plugin's distribution.

Example:
    >>> import pluggy
    >>> from nnx_plugins import hookimpl
    >>> isinstance(hookimpl, pluggy.HookimplMarker)
    True
"""

from __future__ import annotations

from typing import Any

import pluggy

__all__ = [
    "PROJECT_NAME",
    "hookspec",
    "hookimpl",
    "nnx_register_layers",
    "nnx_register_variable_types",
    "nnx_register_run_parts",
]

PROJECT_NAME = "nnx"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def nnx_register_layers(registry: Any) -> None:
    """Add layers and activations: call ``registry.add_layer("acme.Name", obj)`` for each.

    ``obj`` is a `nnx_core.Module` subclass or a plain activation function. Names must be
    namespaced (``acme.Name``): unqualified names belong to the built-ins.
    """


@hookspec
def nnx_register_variable_types(registry: Any) -> None:
    """Add Variable kinds: call ``registry.add_variable_type("acme.Kind", cls)`` for each.

    ``cls`` must subclass `nnx_core.Variable`; it is registered in the core's name table.
    """


@hookspec
def nnx_register_run_parts(registry: Any) -> None:
    """Add run parts: ``registry.add_task("acme.Name", cls)``, and likewise ``add_dataset``,
    ``add_metric``, ``add_logger``, ``add_callback``, ``add_tokenizer`` (see
    docs/design/runs.md), and checkpoint converters with ``add_converter("acme.Arch", obj)``
    (docs/pretrained.md).

    Each ``cls`` is a class whose ``__init__`` arguments are its config. Names must be
    namespaced (``acme.name``): unqualified names belong to the built-ins.
    """
