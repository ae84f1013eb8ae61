"""The Variable kind name <-> type table that string filters, config files and checkpoints use.

This module only keeps the two dictionaries consistent; it does not know what a Variable is
(``_variables`` checks that before it registers a class here), so it imports nothing from the
rest of the core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_NAME_TO_TYPE: dict[str, type] = {}
_TYPE_TO_NAME: dict[type, str] = {}
_AUTO_NAMES: set[str] = set()
_RESOLVER: list[Callable[[Any], object]] = []  # at most one: see set_variable_kind_resolver


def auto_name(cls: type) -> str:
    """``module.QualName``: the name a kind has until it is given an explicit one."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register_auto(cls: type) -> None:
    """Give a newly defined kind its automatic name, unless an explicit registration owns it."""
    name = auto_name(cls)
    if name in _NAME_TO_TYPE and name not in _AUTO_NAMES:
        return  # an explicit registration owns this name; the class stays unnamed until registered
    old = _NAME_TO_TYPE.get(name)
    if old is not None:
        _TYPE_TO_NAME.pop(old, None)
    _NAME_TO_TYPE[name] = cls
    _TYPE_TO_NAME[cls] = name
    _AUTO_NAMES.add(name)


def register_name(cls: type, name: str) -> None:
    """Record ``name`` as the explicit name of ``cls`` (see ``register_variable_type``).

    Raises:
        ValueError: the name is held by another class, or ``cls`` already has another explicit
            name.
    """
    holder = _NAME_TO_TYPE.get(name)
    # the same class defined again (a module reloaded or imported twice, a notebook cell
    # re-run) takes the name over; a different class is an error
    redefined = holder is not None and auto_name(holder) == auto_name(cls)
    if holder is not None and holder is not cls and name not in _AUTO_NAMES and not redefined:
        raise ValueError(
            f"Variable kind name {name!r} is already registered to "
            f"{auto_name(holder)}; cannot also register {auto_name(cls)}. "
            "Choose a namespaced name such as 'mypackage.MyKind'."
        )
    current = _TYPE_TO_NAME.get(cls)
    if current == name and name not in _AUTO_NAMES:
        return
    if current is not None and current != name:
        if current not in _AUTO_NAMES:
            raise ValueError(
                f"{auto_name(cls)} is already registered as {current!r}; "
                f"it cannot also be registered as {name!r}."
            )
        del _NAME_TO_TYPE[current]
        _AUTO_NAMES.discard(current)
    if holder is not None and holder is not cls:
        _TYPE_TO_NAME.pop(holder, None)
    _AUTO_NAMES.discard(name)
    _NAME_TO_TYPE[name] = cls
    _TYPE_TO_NAME[cls] = name


def find_variable_type(name: str) -> Any:
    """The Variable kind registered under ``name`` (asking the resolver), or None."""
    if name not in _NAME_TO_TYPE and _RESOLVER:
        try:
            _RESOLVER[0](name)
        except KeyError:
            pass
    return _NAME_TO_TYPE.get(name)


def variable_type(name: str) -> Any:
    """Return the Variable kind registered under ``name``.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.variable_type("Param") is nnx.Param
        True

    Raises:
        KeyError: no kind has that name; the message lists the registered names.
    """
    if name not in _NAME_TO_TYPE and _RESOLVER:
        _RESOLVER[0](name)
    try:
        return _NAME_TO_TYPE[name]
    except KeyError:
        known = ", ".join(sorted(n for n in _NAME_TO_TYPE if n not in _AUTO_NAMES))
        raise KeyError(
            f"No Variable kind is registered as {name!r}. Registered kinds: {known}. "
            "A plugin's kinds are registered when nnx_plugins loads them."
        ) from None


def variable_name(cls: type) -> str:
    """Return the registered name of the Variable kind ``cls``.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.variable_name(nnx.BatchStat)
        'BatchStat'

    Raises:
        KeyError: ``cls`` is not a registered kind.
    """
    name = _TYPE_TO_NAME.get(cls)
    if _RESOLVER and (name is None or name in _AUTO_NAMES):
        _RESOLVER[0](cls)
    try:
        return _TYPE_TO_NAME[cls]
    except KeyError:
        raise KeyError(f"{cls!r} is not a registered Variable kind.") from None


def set_variable_kind_resolver(
    resolver: Callable[[Any], object] | None,
) -> Callable[[Any], object] | None:
    """Install the one hook asked about kinds the table does not know; return the previous one.

    `variable_type` calls ``resolver(name)`` for a name it does not hold, and `variable_name`
    calls ``resolver(cls)`` for a class that has only its automatic ``module.Class`` name (or
    none); the resolver may register the kind (`register_variable_type`) before the lookup is
    tried again, and what it raises propagates. ``nnx_plugins`` installs one that gives plugin
    kinds their entry-point names; ``None`` removes it.

    Example:
        >>> import nnx_core as nnx
        >>> class Gain(nnx.Variable): pass
        >>> def resolver(key):
        ...     if key in ("docs.Gain", Gain):
        ...         nnx.register_variable_type(Gain, "docs.Gain")
        >>> previous = nnx.set_variable_kind_resolver(resolver)
        >>> nnx.variable_type("docs.Gain") is Gain, nnx.variable_name(Gain)
        (True, 'docs.Gain')
        >>> nnx.set_variable_kind_resolver(previous) is resolver
        True
    """
    previous = _RESOLVER[0] if _RESOLVER else None
    _RESOLVER[:] = [] if resolver is None else [resolver]
    return previous


def display_name(cls: type) -> str:
    """The explicit registered name of a kind, else its class name (for tables)."""
    name = _TYPE_TO_NAME.get(cls)
    return name if name is not None and name not in _AUTO_NAMES else cls.__name__


def registered_variable_types() -> dict[str, Any]:
    """All registered kinds by name (explicit and automatic names).

    Example:
        >>> import nnx_core as nnx
        >>> nnx.registered_variable_types()["Cache"] is nnx.Cache
        True
    """
    return dict(_NAME_TO_TYPE)
