"""Running one pluggy hook plugin: import it, register its hooks, call them, check the names.

Every step runs as plugin code (`run_plugin_code`: stdout to stderr, any exception but
KeyboardInterrupt becomes a `PluginLoadError`); on failure the module is unregistered and no
name it offered is kept.
"""

from __future__ import annotations

from typing import Any

from ._discovery import EntryRecord, check_name
from ._errors import PluginInfo, PluginNameError
from ._loading import check_object, run_plugin_code
from ._providers import Provider, target_of

__all__ = ["Registrar", "plugin_manager", "run_hook_plugin"]

_HOOKS = ("nnx_register_variable_types", "nnx_register_layers", "nnx_register_run_parts")


class Registrar:
    """What a hook receives: collects the ``add_*`` calls of one plugin.

    Example:
        >>> from nnx_plugins import PluginInfo
        >>> from nnx_plugins.registry._hooks import Registrar
        >>> registrar = Registrar(PluginInfo("acme-layers", "0.1.0"))
        >>> registrar.add_layer("acme.Identity", lambda x: x)
        >>> [(kind, name) for kind, name, _ in registrar.added]
        [('layer', 'acme.Identity')]
    """

    def __init__(self, plugin: PluginInfo):
        self.plugin = plugin
        self.added: list[tuple[str, str, Any]] = []

    def add_layer(self, name: str, obj: Any) -> None:
        """Offer a layer class or an activation function under ``name``."""
        self.added.append(("layer", name, obj))

    def add_variable_type(self, name: str, cls: Any) -> None:
        """Offer a `nnx_core.Variable` subclass under ``name``."""
        self.added.append(("variable", name, cls))

    def add_task(self, name: str, cls: Any) -> None:
        """Offer a task class under ``name``."""
        self.added.append(("task", name, cls))

    def add_dataset(self, name: str, cls: Any) -> None:
        """Offer a dataset class under ``name``."""
        self.added.append(("dataset", name, cls))

    def add_metric(self, name: str, cls: Any) -> None:
        """Offer a `nnx_core.metrics.Metric` subclass under ``name``."""
        self.added.append(("metric", name, cls))

    def add_logger(self, name: str, cls: Any) -> None:
        """Offer a logger class under ``name``."""
        self.added.append(("logger", name, cls))

    def add_callback(self, name: str, cls: Any) -> None:
        """Offer a callback class under ``name``."""
        self.added.append(("callback", name, cls))

    def add_tokenizer(self, name: str, cls: Any) -> None:
        """Offer a tokenizer class under ``name``."""
        self.added.append(("tokenizer", name, cls))

    def add_converter(self, name: str, converter: Any) -> None:
        """Offer a checkpoint converter under ``name`` (``namespace.Architecture``)."""
        self.added.append(("converter", name, converter))


def plugin_manager() -> Any:
    """A pluggy manager of the ``nnx`` project with its hook specs."""
    import pluggy  # (here: listing names needs no hooks)

    from . import _hookspecs  # (here: it imports pluggy)

    manager = pluggy.PluginManager(_hookspecs.PROJECT_NAME)
    manager.add_hookspecs(_hookspecs)
    return manager


def _register(manager: Any, module: Any, record: EntryRecord) -> None:
    manager.register(module, name=f"{record.plugin.distribution}:{record.name}")
    manager.check_pending()


def _stage(record: EntryRecord, registrar: Registrar) -> list[Provider]:
    staged = []
    for kind, name, obj in registrar.added:
        problem = check_name(kind, name, record.plugin)
        if problem:
            raise PluginNameError(problem, plugin=record.plugin)
        check_object(kind, name, obj, record.plugin)
        staged.append(Provider(kind, name, record.plugin, target_of(obj, name), None, obj, True))
    return staged


def run_hook_plugin(manager: Any, record: EntryRecord) -> list[Provider]:
    """Import the plugin module of ``record``, run its hooks; return the names they offered.

    Raises:
        PluginLoadError: the import, the registration or a hook failed, or an object is wrong.
        PluginNameError: a hook offered a name that breaks the naming rules.
    """
    where = f"plugin {record.name!r} ({record.target})"
    plugin = record.plugin
    module = run_plugin_code(record.entry_point.load, plugin=plugin, action=f"import {where}")
    registrar = Registrar(plugin)
    try:
        run_plugin_code(
            lambda: _register(manager, module, record),
            plugin=plugin,
            action=f"register hooks of {where}",
        )
        others = [p for p in manager.get_plugins() if p is not module]
        for hook_name in _HOOKS:
            caller = manager.subset_hook_caller(hook_name, remove_plugins=others)
            run_plugin_code(
                lambda caller=caller: caller(registry=registrar),
                plugin=plugin,
                action=f"run the hooks of {where}",
            )
        return _stage(record, registrar)
    except BaseException:
        if manager.is_registered(module):
            manager.unregister(module)
        raise
