"""``capture``: run a Module (or one of its methods) and return what it sowed, as flax.nnx's.

``Module.sow`` and ``Module.perturb`` store Variables on the Module; ``capture`` takes the ones
of the requested kinds out again after the call and returns them as a State, so the Module is
left as it was. ``init`` puts Variables in before the call (e.g. the ``Perturbation`` zeros a
first capture returned, now traced by ``grad``), so ``perturb`` adds those values and the
gradient with respect to ``init`` is the gradient with respect to the intermediate values.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax

from ._api import pop
from ._graph import impl_for, write_child
from ._module import Module
from ._state import State, format_path
from ._variables import Variable


def capture(
    fn: Callable[..., Any] | type[Variable],
    *var_types: type[Variable],
    init: Mapping[Any, Any] | None = None,
    method_outputs: type[Variable] | None = None,
) -> Callable[..., Any]:
    """Wrap ``fn`` (a Module, or a method of one) to return ``(output, captured)``, where
    ``captured`` is a State of the Variables of ``var_types`` it sowed (taken off the Module).
    With several kinds it returns ``(output, *states)``, one State per kind; with none (only
    ``init=``) the output alone, as flax.nnx's.

    Given Variable kinds first (``capture(nnx.Intermediate)``), it is a decorator.

    Args:
        fn: a Module, a bound method of one, or a function whose first Module argument is
            the one captured from.
        var_types: the kinds to capture (``nnx.Intermediate``, ``nnx.Perturbation``, ...).
        init: a State put into the Module before the call (and taken out after it).
        method_outputs: a kind under which the output of every method call of every submodule
            is also sown (named after the method).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Foo(nnx.Module):
        ...     def __call__(self, x):
        ...         x = self.perturb("dx", x)
        ...         self.sow(nnx.Intermediate, "y", 3 * x)
        ...         return 3 * x
        >>> model = Foo()
        >>> _, perturbations = nnx.capture(model, nnx.Perturbation)(1.0)
        >>> def loss(model, perturbations):
        ...     return nnx.capture(model, nnx.Intermediate, init=perturbations)(1.0)
        >>> (_, grads), sown = nnx.grad(loss, argnums=(0, 1), has_aux=True)(model, perturbations)
        >>> float(grads["dx"].value), float(sown["y"].value[0]), hasattr(model, "y")
        (3.0, 3.0, False)

    Raises:
        TypeError: ``fn`` is not callable, a plain function is called without a Module
            argument, or a kind is not a Variable type.
    """
    if isinstance(fn, type) and issubclass(fn, Variable):
        kinds = (fn, *var_types)
        return lambda f: capture(f, *kinds, init=init, method_outputs=method_outputs)
    for t in var_types:
        if not (isinstance(t, type) and issubclass(t, Variable)):
            raise TypeError(f"capture: {t!r} is not a Variable kind; pass e.g. nnx.Intermediate.")
    if not callable(fn):
        raise TypeError(
            f"capture expects a Module, a method of one or a function taking one, got "
            f"{type(fn).__name__}. Pass e.g. nnx.capture(model, nnx.Intermediate)."
        )
    bound = fn if isinstance(fn, Module) else getattr(fn, "__self__", None)
    extra = (method_outputs,) if method_outputs is not None else ()
    kinds = tuple(dict.fromkeys(var_types + extra))  # in order, each once

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        owner = bound if isinstance(bound, Module) else _first_module((args, kwargs), fn)
        placed = _put(owner, init) if init is not None else []
        try:
            with _recording(owner, method_outputs):
                out = fn(*args, **kwargs)
        finally:
            for node, impl, key, old in reversed(placed):
                _restore(node, impl, key, old)
        if not kinds:  # nothing to capture (init= only): the output alone, as flax.nnx
            return out
        captured = pop(owner, kinds)
        if len(kinds) == 1:
            return out, captured
        return (out, *captured.split(*kinds[:-1], ...))  # one State per kind, in order

    return wrapper


_ABSENT: Any = object()


def _first_module(tree: Any, fn: Any) -> Module:
    """The Module a plain function captures from: its first Module argument."""
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, Module))
    found = next((x for x in leaves if isinstance(x, Module)), None)
    if found is None:
        raise TypeError(
            f"capture: {getattr(fn, '__name__', fn)!r} was called without a Module argument, "
            "so there is nothing to capture from. Pass the Module as an argument."
        )
    return found


def _put(root: Module, init: Mapping[Any, Any]) -> list[tuple[Any, Any, Any, Any]]:
    """Put each leaf of ``init`` at its path under ``root``; what was there, to restore."""
    placed = []
    for path, leaf in (init if isinstance(init, State) else State(init)).flat_state():
        node: Any = root
        for key in path[:-1]:
            impl = impl_for(type(node))
            children = dict(impl.flatten(node)[0]) if impl is not None else {}
            if key not in children:
                raise KeyError(
                    f"capture: init has {format_path(path)}, but {type(root).__name__} has no "
                    f"{format_path(path[: path.index(key) + 1])}."
                )
            node = children[key]
        impl = impl_for(type(node))
        old = dict(impl.flatten(node)[0]).get(path[-1], _ABSENT) if impl is not None else _ABSENT
        write_child(node, impl, path[-1], leaf)
        placed.append((node, impl, path[-1], old))
    return placed


def _restore(node: Any, impl: Any, key: Any, old: Any) -> None:
    if old is not _ABSENT:
        write_child(node, impl, key, old)
    elif isinstance(node, Module) and key in vars(node):
        delattr(node, key)


class _recording:
    """While active, each method call of a Module of ``root``'s graph sows its output under the
    method's name: the methods of their classes are wrapped for the duration (and only calls on
    those objects sow)."""

    def __init__(self, root: Module, kind: type[Variable] | None):
        self.root, self.kind = root, kind
        self.patched: list[tuple[type, str, Any]] = []

    def __enter__(self) -> None:
        if self.kind is None:
            return
        modules = {id(m): m for _, m in self.root.iter_modules()}
        for cls in {type(m) for m in modules.values()}:
            for name in _methods(cls):
                original = cls.__dict__.get(name, _ABSENT)
                setattr(cls, name, _sowing(getattr(cls, name), name, modules, self.kind))
                self.patched.append((cls, name, original))

    def __exit__(self, *exc: object) -> None:
        for cls, name, original in reversed(self.patched):
            if original is _ABSENT:
                delattr(cls, name)
            else:
                setattr(cls, name, original)


def _methods(cls: type) -> list[str]:
    """The user-defined methods of a Module class (``__call__`` included)."""
    base = set(vars(Module)) | set(dir(object))
    names = [n for n in dir(cls) if not n.startswith("_") and n not in base] + ["__call__"]
    return [
        n
        for n in names
        if callable(getattr(cls, n, None)) and not isinstance(getattr(cls, n), type)
    ]


def _sowing(
    function: Callable[..., Any], name: str, modules: dict[int, Module], kind: type[Variable]
) -> Any:
    @functools.wraps(function)
    def method(self: Module, *args: Any, **kwargs: Any) -> Any:
        out = function(self, *args, **kwargs)
        if id(self) in modules:
            self.sow(kind, name, out)
        return out

    return method
