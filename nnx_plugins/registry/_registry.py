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

import contextlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._text import close_matches, suggest
from ._discovery import (
    GROUPS,
    RUN_PARTS,
    DistributionRecord,
    EntryRecord,
    Settings,
    canonical_distribution,
    check_name,
    discover,
)
from ._errors import (
    IN_PROCESS,
    NameCollisionError,
    PluginError,
    PluginLoadError,
    PluginNameError,
    PluginWarning,
    UnknownNameError,
)
from ._hooks import plugin_manager, run_hook_plugin
from ._loading import check_object, run_plugin_code
from ._providers import NOUN, HookPlugin, Provider, same_package, target_of, top_package

__all__ = [
    "Provider",
    "Registry",
    "default_registry",
    "set_default_registry",
    "install_kind_resolver",
]

_KINDS = ("layer", "variable", "section", *RUN_PARTS, "converter")


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
        self._hooks: list[HookPlugin] = []
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
        """Sorted names of ``kind`` (``"layer"``, ``"variable"``, ``"section"``, ``"task"``, ...)
        known so far."""
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
                self._load_hooks(_in_namespace(name.partition(".")[0]))
                offers = self._providers[kind].get(name)
            if not offers and "." in name:
                self._load_hooks()
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
                        if rounds == 1 and not provider.loaded and same_package(provider, obj):
                            self._try_load(provider)
                        elif rounds == 2 and not provider.loaded:
                            self._try_load(provider)
                        if provider.loaded and provider.obj is obj:
                            return name
                if rounds == 1:
                    self._load_hooks()
        what = getattr(obj, "__qualname__", repr(obj))
        raise UnknownNameError(
            f"{what} is not a registered {NOUN[kind]}, so it has no name a config can use. "
            f"Publish it through the '{GROUPS[kind]}' entry-point group or a plugin hook."
        )

    def claim_kind(self, cls: type) -> str | None:
        """Give the Variable kind ``cls`` the name its distribution declares for it, if any.

        Searches only ``cls``'s own top-level package: its ``nnx.variables`` entry points, then
        its hook plugins. A match is registered in the core's table (so ``nnx_core`` knows the
        kind by that name from then on). nnx_core asks this through its kind resolver whenever
        it meets a kind it knows only by its automatic ``module.Class`` name.

        Returns:
            The name, or ``None`` when no enabled distribution names ``cls``.
        """
        with self._lock:
            top = str(getattr(cls, "__module__", "") or "").partition(".")[0]
            for attempt in range(2):
                for name, offers in self._providers["variable"].items():
                    for provider in offers.values():
                        if not provider.loaded and same_package(provider, cls):
                            self._try_load(provider)
                        if provider.loaded and provider.obj is cls:
                            return name
                if attempt == 0:
                    self._load_hooks(lambda record: top_package(record.target) == top)
            return None

    def add(self, kind: str, name: str, obj: Any) -> Any:
        """Register ``obj`` as ``name`` from Python; return ``obj`` (see `register_layer`).

        The rules of entry points apply, but every failure raises at once: the name is
        namespaced, the object is checked (and a Variable kind enters the core's table), and a
        name an enabled distribution (or its hook plugin) provides is a collision. Registering a
        redefinition of the same ``module:Qualname`` again (a re-run notebook cell) replaces it.

        Raises:
            PluginNameError: ``name`` is not a namespaced name such as ``'my.Block'``.
            NameCollisionError: another provider has ``name``.
            PluginLoadError: ``obj`` is not a layer / activation / Variable kind.
        """
        with self._lock:
            if not isinstance(name, str):
                raise PluginNameError(
                    f"in-process names are strings such as 'my.Block', got {name!r}.",
                    plugin=IN_PROCESS,
                )
            problem = check_name(kind, name, IN_PROCESS)
            if problem:
                raise PluginNameError(problem, plugin=IN_PROCESS)
            self._load_hooks(_in_namespace(name.partition(".")[0]))
            target = target_of(obj, name)
            offers = self._providers[kind].get(name, {})
            held = [p for key, p in offers.items() if key != IN_PROCESS.distribution]
            mine = offers.get(IN_PROCESS.distribution)
            if mine is not None and mine.obj is not obj and mine.target != target:
                held.append(mine)
            if held:
                raise _taken(kind, name, target, held[0])
            check_object(kind, name, obj, IN_PROCESS)
            provider = Provider(kind, name, IN_PROCESS, target, None, obj, True)
            self._providers[kind].setdefault(name, {})[IN_PROCESS.distribution] = provider
            return obj

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
            self._load_hooks()
            return self.load_static(kind)

    # -- internals -------------------------------------------------------------------------------
    def _add_static(self, record: DistributionRecord) -> None:
        for entry in record.entries:
            if entry.kind == "plugin":
                self._hooks.append(HookPlugin(entry))
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
            warnings.warn(PluginWarning(error), stacklevel=4)

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
            f"{NOUN[kind].capitalize()} {name!r} is provided by {len(offers)} distributions: "
            f"{listing}.{unmatched}",
            providers=tuple(p.plugin for p in offers.values()),
            fix=f"Choose one with NNX_PREFER='{name}={first}' or the config key "
            f"plugins: {{prefer: {{{name}: {first}}}}}.",
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
        listing = _known_names(kind, known) if len(known) <= _LISTED or not (close or notes) else ""
        return UnknownNameError(
            f"Unknown {NOUN[kind]} {name!r}.{hint}{''.join(notes)}{listing}", suggestions=close
        )

    def _namespace_note(self, kind: str, namespace: str) -> str:
        offers = [p for ps in self._providers[kind].values() for p in ps.values()]
        owners = sorted({str(p.plugin) for p in offers if p.name.startswith(namespace + ".")})
        if owners:
            verb = "provides" if len(owners) == 1 else "provide"
            return f" {' and '.join(owners)} {verb} {namespace}.* {NOUN[kind]}s."
        packs = sorted({str(p.plugin) for p in offers if "." in p.name})
        installed = f"; installed packs: {', '.join(packs)}." if packs else "."
        return f" No installed distribution provides {namespace}.* names{installed}"

    def _load(self, provider: Provider) -> Any:
        if provider.error is not None:
            raise provider.error
        if not provider.loaded:
            try:
                obj = run_plugin_code(
                    provider.entry_point.load,
                    plugin=provider.plugin,
                    action=f"load {NOUN[provider.kind]} {provider.name!r} from {provider.target}",
                )
                check_object(provider.kind, provider.name, obj, provider.plugin)
            except PluginError as error:
                provider.error = error
                self._report(error)
                raise
            provider.obj, provider.loaded = obj, True
            install_kind_resolver()
        return provider.obj

    def _try_load(self, provider: Provider) -> None:
        try:
            self._load(provider)
        except PluginLoadError:
            if self.settings.strict:
                raise

    def _load_hooks(self, wanted: Callable[[EntryRecord], bool] = lambda record: True) -> None:
        for hook in [h for h in self._hooks if not h.loaded and h.error is None]:
            if not wanted(hook.record):
                continue
            try:
                self._run_hook_plugin(hook)
            except PluginError as error:
                hook.error = error
                self._report(error)

    def _run_hook_plugin(self, hook: HookPlugin) -> None:
        if self._manager is None:
            self._manager = plugin_manager()
        staged = run_hook_plugin(self._manager, hook.record)
        key = canonical_distribution(hook.record.plugin.distribution)
        for provider in staged:
            self._providers[provider.kind].setdefault(provider.name, {})[key] = provider
            hook.names.append((provider.kind, provider.name))
        hook.loaded = True


def _in_namespace(namespace: str) -> Callable[[EntryRecord], bool]:
    return lambda record: record.name == namespace


def _taken(kind: str, name: str, target: str, holder: Provider) -> NameCollisionError:
    return NameCollisionError(
        f"{NOUN[kind].capitalize()} {name!r} is already provided by {holder.plugin} "
        f"({holder.target}); registering {target} in-process under the same name would "
        "make it ambiguous.",
        providers=(holder.plugin, IN_PROCESS),
        fix=f"Register it under your own namespace, e.g. 'mine.{name.rpartition('.')[2]}'.",
    )


_RESOLVING = threading.local()
_RESOLVER_INSTALLED = False


def _resolve_kind(key: Any) -> None:
    """nnx_core's kind resolver: a kind's entry-point name, from the default registry.

    A name no distribution provides is left to nnx_core (which raises its KeyError); a
    collision or a failed plugin raises its `PluginError`.
    """
    if getattr(_RESOLVING, "active", False):  # a plugin asking about kinds while loading
        return
    _RESOLVING.active = True
    try:
        if isinstance(key, str):
            with contextlib.suppress(UnknownNameError):
                default_registry().get("variable", key)
        else:
            default_registry().claim_kind(key)
    finally:
        _RESOLVING.active = False


def install_kind_resolver() -> None:
    """Make nnx_core ask the default registry about kinds it does not know by name.

    Does nothing until nnx_core is imported (importing it here would make listing import
    jax); `default_registry`, every plugin load and ``import nnx_plugins`` call it.

    Example:
        >>> import nnx_core
        >>> from nnx_plugins.registry._registry import install_kind_resolver
        >>> install_kind_resolver()
        >>> nnx_core.variable_type("acme.LoRAParam").__name__
        'LoRAParam'
    """
    global _RESOLVER_INSTALLED
    if _RESOLVER_INSTALLED or "nnx_core" not in sys.modules:
        return
    import nnx_core  # (here: already imported, see above; listing must not import jax)

    nnx_core.set_variable_kind_resolver(_resolve_kind)
    _RESOLVER_INSTALLED = True


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
    install_kind_resolver()
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


#: the most names an unknown-name error lists; past it, the listing command is named
_LISTED = 30
_LISTING = {
    "layer": "layers",
    "variable": "variables",
    "task": "tasks",
    "dataset": "datasets",
    "metric": "metrics",
    "logger": "loggers",
    "callback": "callbacks",
}


def _known_names(kind: str, known: list[str]) -> str:
    """`` Registered datasets: csv, digits, ...`` (a short list), or the command that lists a
    long one (named only when nothing closer was suggested)."""
    noun = NOUN[kind]
    plural = noun + "s" if not noun.endswith("s") else noun
    if not known:
        return f" No {plural} are registered."
    if len(known) <= _LISTED:
        return f" Registered {plural}: {', '.join(sorted(known))}."
    command = _LISTING.get(kind)
    return f" `nnx {command} list` shows the registered {plural}." if command else ""
