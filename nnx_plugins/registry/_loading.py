"""Running a pack's code (its imports and hooks) so that it cannot take the run down with it.

Plugin code runs with ``sys.stdout`` pointed at ``sys.stderr`` (a pack that prints cannot
corrupt what a command writes on stdout, e.g. ``nnx config schema``) through a stream it cannot
close (both are restored afterwards, even if the pack replaced them), and anything it raises
except `KeyboardInterrupt` (``SystemExit`` from ``sys.exit()``, ``GeneratorExit``,
``MemoryError``, ``RecursionError``, ...) becomes a `PluginLoadError` naming the distribution,
its version, the cause and a fix. What it loads is then checked (`check_object`).

Example:
    >>> from nnx_plugins import PluginInfo, PluginLoadError
    >>> from nnx_plugins.registry._loading import run_plugin_code
    >>> def bad_import():
    ...     raise SystemExit("bye")
    >>> try:
    ...     run_plugin_code(bad_import, plugin=PluginInfo("acme-layers", "0.1.0"), action="import x")
    ... except PluginLoadError as error:
    ...     print(error.message)
    acme-layers 0.1.0 failed to import x: SystemExit: bye (the pack called sys.exit()).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from ._discovery import RUN_PARTS
from ._errors import IN_PROCESS, PluginInfo, PluginLoadError
from ._part_checks import converter_problem, run_part_problem

__all__ = ["run_plugin_code", "load_fix", "check_object"]

T = TypeVar("T")

_WHY = {
    SystemExit: " (the pack called sys.exit())",
    RecursionError: " (infinite recursion in the pack)",
    MemoryError: " (the pack ran out of memory)",
}


def load_fix(plugin: PluginInfo) -> str:
    """How a user gets past a pack that fails to load.

    Example:
        >>> from nnx_plugins import PluginInfo
        >>> from nnx_plugins.registry._loading import load_fix
        >>> load_fix(PluginInfo("acme-layers", "0.1.0"))[:44]
        'Upgrade or reinstall acme-layers, or run wit'
    """
    if plugin == IN_PROCESS:
        return "Fix the object you registered, or register another one."
    return (
        f"Upgrade or reinstall {plugin.distribution}, or run without it: set NNX_PLUGINS to the "
        "packs to keep (NNX_DISABLE_PLUGIN_AUTOLOAD=1 keeps only the built-ins)."
    )


def _describe(cause: BaseException) -> str:
    text = str(cause)
    why = next((w for t, w in _WHY.items() if isinstance(cause, t)), "")
    return f"{type(cause).__name__}: {text}{why}" if text else f"{type(cause).__name__}{why}"


def run_plugin_code(call: Callable[[], T], *, plugin: PluginInfo, action: str) -> T:
    """Return ``call()`` run as plugin code: stdout sent to stderr (neither can be closed),
    failures turned into errors.

    Args:
        call: the import or hook call, without arguments.
        plugin: the distribution whose code it is.
        action: what ``call`` does, for the message (``"import plugin 'acme' (acme.plugin)"``).

    Raises:
        PluginLoadError: ``call`` raised anything but `KeyboardInterrupt`; the original
            exception is its ``__cause__``.
    """
    streams = sys.stdout, sys.stderr
    shield = _Unclosable(sys.stderr)
    try:
        sys.stdout = sys.stderr = shield  # type: ignore[assignment]
        return call()
    except KeyboardInterrupt:
        raise
    except BaseException as cause:  # noqa: BLE001 - a pack may raise anything, even SystemExit
        raise PluginLoadError(
            f"{plugin} failed to {action}: {_describe(cause)}.",
            plugin=plugin,
            fix=load_fix(plugin),
        ) from cause
    finally:
        sys.stdout, sys.stderr = streams  # (even if the pack replaced them)


class _Unclosable:
    """A stream that writes to ``target`` and ignores ``close()``: what a pack gets as
    ``sys.stdout`` and ``sys.stderr`` while its code runs, so that closing them (or using
    them in a ``with``) cannot close the command's stderr."""

    def __init__(self, target: Any):
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __enter__(self) -> _Unclosable:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __iter__(self) -> Any:
        return iter(self._target)

    def close(self) -> None:
        """Flush instead of closing."""
        with contextlib.suppress(ValueError, OSError):
            self._target.flush()


def _error(plugin: PluginInfo, text: str) -> PluginLoadError:
    return PluginLoadError(f"{plugin} {text}", plugin=plugin, fix=load_fix(plugin))


def _require_subclass(
    obj: Any, base: type, base_name: str, *, plugin: PluginInfo, subject: str
) -> None:
    """``subject`` says what ``obj`` is, e.g. ``"provides Variable kind 'a.K' as"``."""
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise _error(plugin, f"{subject} {obj!r}, which is not a subclass of {base_name}.")


def _check_layer(name: str, obj: Any, plugin: PluginInfo) -> None:
    import nnx_core  # (here: listing names must not import jax)

    if isinstance(obj, type) and not issubclass(obj, nnx_core.Module):
        raise _error(
            plugin,
            f"provides layer {name!r} as the class {obj.__qualname__}, which is not a subclass "
            "of nnx_core.Module.",
        )
    if isinstance(obj, nnx_core.Module):
        kind = type(obj).__qualname__
        raise _error(
            plugin,
            f"provides layer {name!r} as an instance of {kind}, not the class: that one "
            f"object (and its parameters) would be shared by every config naming it. Register "
            f"the class {kind} itself.",
        )
    if not callable(obj):
        raise _error(
            plugin,
            f"provides layer {name!r} as {obj!r}, which is neither a Module subclass nor an "
            "activation function.",
        )
    custom = getattr(obj, "config_model", None) if isinstance(obj, type) else None
    if custom is not None:
        import pydantic  # (here: listing names must not import pydantic)

        subject = f"provides layer {name!r} whose config_model is"
        _require_subclass(
            custom, pydantic.BaseModel, "pydantic.BaseModel", plugin=plugin, subject=subject
        )


def check_object(kind: str, name: str, obj: Any, plugin: PluginInfo) -> None:
    """Check what a pack provides; register a Variable kind in the core's table.

    Raises:
        PluginLoadError: ``obj`` is not what ``kind`` needs (a Module subclass or activation, a
            Variable subclass, a pydantic model, a run part's class), or its kind name clashes
            in the core table.
    """
    if kind in RUN_PARTS:
        problem = run_part_problem(kind, name, obj)
        if problem:
            raise _error(plugin, problem)
    elif kind == "converter":
        problem = converter_problem(name, obj)
        if problem:
            raise _error(plugin, problem)
    elif kind == "layer":
        _check_layer(name, obj, plugin)
    elif kind == "variable":
        import nnx_core  # (here: listing names must not import jax)

        subject = f"provides Variable kind {name!r} as"
        _require_subclass(
            obj, nnx_core.Variable, "nnx_core.Variable", plugin=plugin, subject=subject
        )
        try:
            nnx_core.register_variable_type(obj, name)
        except (TypeError, ValueError) as error:
            raise _error(plugin, f"could not register Variable kind {name!r}: {error}") from error
    elif kind == "section":
        import pydantic  # (here, not at the top: listing names must not import pydantic)

        subject = f"provides config section {name!r} as"
        _require_subclass(
            obj, pydantic.BaseModel, "pydantic.BaseModel", plugin=plugin, subject=subject
        )
