"""The registry: names from entry points and pluggy hooks, loaded on first use.

Listing (`Registry.names`, `Registry.distributions`) reads package metadata only. Looking a
name up (`Registry.get`) imports the module behind it, checks what it finds, and registers
Variable kinds in the core's name table. Failures are recorded per name, warned about once per
distribution (or raised in strict mode), and never stop the other plugins from working.

Example:
    >>> from nnx_plugins import default_registry
    >>> registry = default_registry()
    >>> "Linear" in registry.names("layer")
    True
    >>> registry.get("layer", "Linear").__name__
    'Linear'
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from .._text import close_matches, suggest
from ._discovery import (
    DistributionRecord,
    EntryRecord,
    Settings,
    canonical_distribution,
    check_name,
    discover,
)
from ._errors import (
    NameCollisionError,
    PluginError,
    PluginInfo,
    PluginLoadError,
    PluginNameError,
    PluginWarning,
    UnknownNameError,
)

__all__ = ["Provider", "Registry", "default_registry", "set_default_registry"]

_KINDS = ("layer", "variable", "section")
_NOUN = {"layer": "layer", "variable": "Variable kind", "section": "config section"}


@dataclasses.dataclass
class Provider:
    """One distribution's offer of one name; ``obj`` is set once loaded, ``error`` if that failed."""

    kind: str
    name: str
    plugin: PluginInfo
    target: str
    entry_point: Any = None
    obj: Any = None
    loaded: bool = False
    error: PluginError | None = None

    @property
    def status(self) -> str:
        """``"loaded"``, ``"not loaded"`` or ``"failed: <cause>"``."""
        if self.error is not None:
            return f"failed: {self.error}"
        return "loaded" if self.loaded else "not loaded"


@dataclasses.dataclass
class _HookPlugin:
    record: EntryRecord
    loaded: bool = False
    error: PluginError | None = None
    names: list[tuple[str, str]] = dataclasses.field(default_factory=list)


class _Registrar:
    """What a hook receives: collects ``add_layer`` / ``add_variable_type`` calls of one plugin."""

    def __init__(self, plugin: PluginInfo):
        self.plugin = plugin
        self.added: list[tuple[str, str, Any]] = []

    def add_layer(self, name: str, obj: Any) -> None:
        """Offer a layer class or an activation function under ``name``."""
        self.added.append(("layer", name, obj))

    def add_variable_type(self, name: str, cls: Any) -> None:
        """Offer a `nnx_core.Variable` subclass under ``name``."""
        self.added.append(("variable", name, cls))


def _check_object(kind: str, name: str, obj: Any, plugin: PluginInfo) -> None:
    """Validate a loaded object; register Variable kinds in the core's table."""
    import nnx_core  # (here: listing names must not import jax)

    if kind == "variable":
        if not (isinstance(obj, type) and issubclass(obj, nnx_core.Variable)):
            raise PluginLoadError(
                f"{plugin} provides Variable kind {name!r} as {obj!r}, which is not a "
                "subclass of nnx_core.Variable.",
                plugin=plugin,
            )
        try:
            nnx_core.register_variable_type(obj, name)
        except (TypeError, ValueError) as error:
            raise PluginLoadError(
                f"{plugin} could not register Variable kind {name!r}: {error}", plugin=plugin
            ) from error
    elif kind == "section":
        import pydantic  # (here, not at the top: listing names must not import pydantic)

        if not (isinstance(obj, type) and issubclass(obj, pydantic.BaseModel)):
            raise PluginLoadError(
                f"{plugin} provides config section {name!r} as {obj!r}, which is not a "
                "pydantic BaseModel subclass.",
                plugin=plugin,
            )
    elif isinstance(obj, type) and not issubclass(obj, nnx_core.Module):
        raise PluginLoadError(
            f"{plugin} provides layer {name!r} as the class {obj.__qualname__}, which is not "
            "a subclass of nnx_core.Module.",
            plugin=plugin,
        )
    elif not callable(obj):
        raise PluginLoadError(
            f"{plugin} provides layer {name!r} as {obj!r}, which is neither a Module subclass "
            "nor an activation function.",
            plugin=plugin,
        )


class Registry:
    """Every layer and Variable kind name the installed distributions provide.

    Args:
        settings: the switches; `Settings.from_env` when omitted.
        distributions: the distributions to read (objects like `importlib.metadata.Distribution`);
            all installed ones when omitted.

    Example:
        >>> from nnx_plugins import Registry
        >>> from nnx_plugins.registry._discovery import Settings
        >>> registry = Registry(settings=Settings(autoload=False))
        >>> registry.get("variable", "Param").__name__
        'Param'
    """

    def __init__(
        self, *, settings: Settings | None = None, distributions: Iterable[Any] | None = None
    ):
        self.settings = Settings.from_env() if settings is None else settings
        self._records = discover(self.settings, distributions)
        self._providers: dict[str, dict[str, dict[str, Provider]]] = {k: {} for k in _KINDS}
        self._hooks: list[_HookPlugin] = []
        self._warned: set[str] = set()
        self._lock = threading.RLock()
        self._manager: Any = None
        self._name_failures: list[PluginError] = []
        for record in self._records:
            if not record.disabled:
                self._add_static(record)

    # -- listing (metadata only) ------------------------------------------------------------
    def distributions(self) -> tuple[DistributionRecord, ...]:
        """Every distribution with ``nnx.*`` entry points, including disabled ones."""
        return tuple(self._records)

    def names(self, kind: str = "layer") -> list[str]:
        """Sorted names of ``kind`` (``"layer"``, ``"variable"`` or ``"section"``) known so far."""
        return sorted(self._providers[kind])

    def providers(self, kind: str, name: str) -> tuple[Provider, ...]:
        """Every provider of ``name`` (several means a collision), without loading anything."""
        return tuple(self._providers[kind].get(name, {}).values())

    def hook_plugins(self) -> tuple[tuple[EntryRecord, str], ...]:
        """The pluggy plugin modules with their status (``loaded``, ``not loaded``, ``failed: ...``)."""
        return tuple(
            (
                h.record,
                f"failed: {h.error}" if h.error else ("loaded" if h.loaded else "not loaded"),
            )
            for h in self._hooks
        )

    def failures(self) -> list[PluginError]:
        """Every failure recorded so far (names, imports, hooks)."""
        found = list(self._name_failures)
        found += [h.error for h in self._hooks if h.error is not None]
        for by_name in self._providers.values():
            found += [p.error for ps in by_name.values() for p in ps.values() if p.error]
        return found

    # -- lookup --------------------------------------------------------------------------------
    def get(self, kind: str, name: str, *, prefer: Mapping[str, str] | None = None) -> Any:
        """Return the object registered as ``name``, importing its module on first use.

        Args:
            kind: ``"layer"`` (layers and activations) or ``"variable"``.
            name: the registered name, e.g. ``"Linear"`` or ``"acme.GatedDense"``.
            prefer: ``{name: distribution}`` choices for names several distributions provide;
                merged over ``NNX_PREFER``.

        Raises:
            UnknownNameError: nothing provides ``name``.
            NameCollisionError: several distributions provide it and no preference picks one.
            PluginLoadError: the provider failed to load.
        """
        with self._lock:
            provider = self.resolve(kind, name, prefer=prefer)
            return self._load(provider)

    def resolve(self, kind: str, name: str, *, prefer: Mapping[str, str] | None = None) -> Provider:
        """Return the `Provider` that `get` would load (loading pluggy plugins if needed).

        Raises:
            UnknownNameError: nothing provides ``name``.
            NameCollisionError: several distributions provide it and no preference picks one.
        """
        with self._lock:
            offers = self._providers[kind].get(name)
            if not offers and "." in name:  # only namespaced names can come from hooks
                self._load_hooks(namespace=name.partition(".")[0])
                offers = self._providers[kind].get(name)
            if not offers and "." in name:
                self._load_hooks(namespace=None)
                offers = self._providers[kind].get(name)
            if not offers:
                raise self._unknown(kind, name)
            return self._choose(kind, name, offers, prefer)

    def name_of(self, obj: Any, kind: str = "layer") -> str:
        """Return the name ``obj`` (a layer class, activation or Variable kind) is registered as.

        Raises:
            UnknownNameError: ``obj`` is not registered under any name.
        """
        with self._lock:
            for rounds in range(3):
                for name, offers in self._providers[kind].items():
                    for provider in offers.values():
                        if rounds == 1 and not provider.loaded and _same_package(provider, obj):
                            self._try_load(provider)
                        elif rounds == 2 and not provider.loaded:
                            self._try_load(provider)
                        if provider.loaded and provider.obj is obj:
                            return name
                if rounds == 1:
                    self._load_hooks(namespace=None)
        what = getattr(obj, "__qualname__", repr(obj))
        raise UnknownNameError(
            f"{what} is not a registered {_NOUN[kind]}, so it has no name a config can use. "
            f"Publish it through the 'nnx.{'layers' if kind == 'layer' else 'variables'}' "
            "entry-point group or a plugin hook."
        )

    def load_all(self) -> list[PluginError]:
        """Import every enabled name and hook plugin; return the failures (raise if strict)."""
        with self._lock:
            for kind in _KINDS:
                self.load_kind(kind)
            return self.failures()

    def load_static(self, kind: str) -> dict[str, Any]:
        """Import every entry-point name of ``kind`` (no hook plugins); return the loaded ones.

        Failures are warned about (raised in strict mode) and left out; a name several
        distributions provide is left out too (`get` reports the collision).
        """
        with self._lock:
            found = {}
            for name, offers in list(self._providers[kind].items()):
                for provider in offers.values():
                    self._try_load(provider)
                if len(offers) == 1 and next(iter(offers.values())).loaded:
                    found[name] = next(iter(offers.values())).obj
            return found

    def load_kind(self, kind: str) -> dict[str, Any]:
        """Import every hook plugin and every name of ``kind``; return the unambiguous loaded ones."""
        with self._lock:
            self._load_hooks(namespace=None)
            return self.load_static(kind)

    # -- internals -------------------------------------------------------------------------------
    def _add_static(self, record: DistributionRecord) -> None:
        for entry in record.entries:
            if entry.kind == "plugin":
                self._hooks.append(_HookPlugin(entry))
                continue
            problem = check_name(entry.kind, entry.name, entry.plugin)
            if problem:
                error = PluginNameError(problem, plugin=entry.plugin)
                self._name_failures.append(error)
                self._report(error)
                continue
            provider = Provider(
                entry.kind, entry.name, entry.plugin, entry.target, entry.entry_point
            )
            self._providers[entry.kind].setdefault(entry.name, {})[record.canonical] = provider

    def _report(self, error: PluginError) -> None:
        if self.settings.strict:
            raise error
        key = canonical_distribution(error.plugin.distribution) if error.plugin else ""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"nnx plugin {error}", PluginWarning, stacklevel=4)

    def _choose(
        self, kind: str, name: str, offers: dict[str, Provider], prefer: Mapping[str, str] | None
    ) -> Provider:
        if len(offers) == 1:
            return next(iter(offers.values()))
        wanted = {**self.settings.prefer, **(prefer or {})}.get(name)
        if wanted is not None and canonical_distribution(wanted) in offers:
            return offers[canonical_distribution(wanted)]
        listing = " and ".join(f"{p.plugin} ({p.target})" for p in offers.values())
        first = next(iter(offers.values())).plugin.distribution
        unmatched = (
            f" The preference {name}={wanted} names none of them." if wanted is not None else ""
        )
        raise NameCollisionError(
            f"{_NOUN[kind].capitalize()} {name!r} is provided by {len(offers)} distributions: "
            f"{listing}.{unmatched} Choose one with NNX_PREFER='{name}={first}' or the config "
            f"key plugins: {{prefer: {{{name}: {first}}}}}.",
            providers=tuple(p.plugin for p in offers.values()),
        )

    def _unknown(self, kind: str, name: str) -> UnknownNameError:
        known = list(self._providers[kind])
        close = tuple(close_matches(name, known))
        hint = suggest(name, known)
        namespace = name.partition(".")[0] if "." in name else None
        notes = []
        for hook in self._hooks:
            if hook.error is not None:
                notes.append(
                    f" Plugin {hook.record.name!r} of {hook.record.plugin} failed to load "
                    f"and may have provided it: {hook.error}"
                )
        for record in self._records:
            owns = namespace and any(e.name.startswith(namespace + ".") for e in record.entries)
            if record.disabled and owns:
                notes.append(
                    f" {record.plugin} provides the {namespace!r} namespace but is "
                    f"{record.disabled}."
                )
        if namespace and not notes:
            notes.append(self._namespace_note(kind, namespace))
        return UnknownNameError(
            f"Unknown {_NOUN[kind]} {name!r}.{hint}{''.join(notes)}", suggestions=close
        )

    def _namespace_note(self, kind: str, namespace: str) -> str:
        offers = [p for ps in self._providers[kind].values() for p in ps.values()]
        owners = sorted({str(p.plugin) for p in offers if p.name.startswith(namespace + ".")})
        if owners:
            verb = "provides" if len(owners) == 1 else "provide"
            return f" {' and '.join(owners)} {verb} {namespace}.* {_NOUN[kind]}s."
        packs = sorted({str(p.plugin) for p in offers if "." in p.name})
        installed = f"; installed packs: {', '.join(packs)}." if packs else "."
        return f" No installed distribution provides {namespace}.* names{installed}"

    def _load(self, provider: Provider) -> Any:
        if provider.error is not None:
            raise provider.error
        if not provider.loaded:
            try:
                obj = provider.entry_point.load()
            except Exception as cause:  # noqa: BLE001 - a plugin may raise anything on import
                error = PluginLoadError(
                    f"{provider.plugin} failed to load {_NOUN[provider.kind]} {provider.name!r} "
                    f"from {provider.target}: {type(cause).__name__}: {cause}",
                    plugin=provider.plugin,
                )
                error.__cause__ = cause
                provider.error = error
                self._report(error)
                raise error from cause
            try:
                _check_object(provider.kind, provider.name, obj, provider.plugin)
            except PluginError as error:
                provider.error = error
                self._report(error)
                raise
            provider.obj, provider.loaded = obj, True
        return provider.obj

    def _try_load(self, provider: Provider) -> None:
        try:
            self._load(provider)
        except PluginLoadError:
            if self.settings.strict:
                raise

    def _plugin_manager(self) -> Any:
        if self._manager is None:
            import pluggy  # (here: listing names needs no hooks)

            from . import _hookspecs  # (here: it imports pluggy)

            self._manager = pluggy.PluginManager(_hookspecs.PROJECT_NAME)
            self._manager.add_hookspecs(_hookspecs)
        return self._manager

    def _load_hooks(self, *, namespace: str | None) -> None:
        pending = [h for h in self._hooks if not h.loaded and h.error is None]
        if namespace is not None:
            pending = [h for h in pending if h.record.name == namespace]
        for hook in pending:
            try:
                self._run_hook_plugin(hook)
            except PluginError as error:
                hook.error = error
                self._report(error)

    def _run_hook_plugin(self, hook: _HookPlugin) -> None:
        record, manager = hook.record, self._plugin_manager()
        registrar = _Registrar(record.plugin)
        step = "import"
        try:
            module = record.entry_point.load()
            step = "register hooks of"
            manager.register(module, name=f"{record.plugin.distribution}:{record.name}")
            others = [p for p in manager.get_plugins() if p is not module]
            try:
                manager.check_pending()
                step = "run the hooks of"
                for hook_name in ("nnx_register_variable_types", "nnx_register_layers"):
                    manager.subset_hook_caller(hook_name, remove_plugins=others)(registry=registrar)
            except BaseException:
                manager.unregister(module)
                raise
        except Exception as cause:  # noqa: BLE001 - plugin code may raise anything
            raise PluginLoadError(
                f"{record.plugin} failed to {step} plugin {record.name!r} ({record.target}): "
                f"{type(cause).__name__}: {cause}",
                plugin=record.plugin,
            ) from cause
        try:
            staged = self._stage(record, registrar)
        except PluginError:
            manager.unregister(module)
            raise
        for provider in staged:
            key = canonical_distribution(record.plugin.distribution)
            self._providers[provider.kind].setdefault(provider.name, {})[key] = provider
            hook.names.append((provider.kind, provider.name))
        hook.loaded = True

    @staticmethod
    def _stage(record: EntryRecord, registrar: _Registrar) -> list[Provider]:
        staged = []
        for kind, name, obj in registrar.added:
            problem = check_name(kind, name, record.plugin)
            if problem:
                raise PluginNameError(problem, plugin=record.plugin)
            _check_object(kind, name, obj, record.plugin)
            target = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', name)}"
            staged.append(Provider(kind, name, record.plugin, target, None, obj, True))
        return staged


def _same_package(provider: Provider, obj: Any) -> bool:
    top = str(getattr(obj, "__module__", "") or "").partition(".")[0]
    return bool(top) and provider.target.partition(":")[0].partition(".")[0] == top


_DEFAULT: Registry | None = None
_DEFAULT_LOCK = threading.Lock()


def default_registry() -> Registry:
    """Return the process-wide registry, created from the installed metadata on first call.

    Example:
        >>> from nnx_plugins import default_registry
        >>> default_registry() is default_registry()
        True
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Registry()
        return _DEFAULT


def set_default_registry(registry: Registry | None) -> Registry | None:
    """Replace the process-wide registry (``None`` rebuilds it on next use); return the old one.

    Example:
        >>> from nnx_plugins import Registry, default_registry, set_default_registry
        >>> old = set_default_registry(Registry())
        >>> _ = set_default_registry(old)
        >>> default_registry() is old
        True
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        previous, _DEFAULT = _DEFAULT, registry
        return previous
