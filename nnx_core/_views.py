"""Copies of a Module with other static attributes: ``view``, ``with_attributes``, ``view_info``.

A view shares the original's Variables (so training one trains the other) and has its own nodes,
so the original keeps its modes. ``view`` goes through each Module's ``set_view`` method, as in
flax.nnx (Dropout, BatchNorm and MultiHeadAttention have one); ``with_attributes`` sets the
attributes directly.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from ._filters import Filter, to_predicate
from ._graph_tools import recursive_map
from ._module import Module

N = TypeVar("N")
_KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def with_attributes(
    node: N,
    /,
    *,
    only: Filter = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **attributes: Any,
) -> N:
    """A copy of ``node`` whose Modules (those ``only`` selects) that have one of
    ``attributes`` get its new value; ``node`` is left as it is and the Variables are shared.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Drop(nnx.Module):
        ...     def __init__(self): self.deterministic = False; self.w = nnx.Param(jnp.ones(1))
        >>> d = Drop(); e = nnx.with_attributes(d, deterministic=True)
        >>> e.deterministic, d.deterministic, e.w is d.w
        (True, False, True)

    Raises:
        ValueError: no selected Module has one of the attributes (unless
            ``raise_if_not_found=False``).
    """
    pred = to_predicate(only)
    missing = set(attributes)

    def set_found(path: tuple[Any, ...], x: Any) -> Any:
        if isinstance(x, Module) and pred(path, x):
            for name, value in attributes.items():
                if name in vars(x):
                    setattr(x, name, value)
                    missing.discard(name)
        return x

    out = recursive_map(set_found, node)
    if missing and raise_if_not_found:
        raise ValueError(
            f"with_attributes: Could not find at least one instance of the following "
            f"attributes: {sorted(missing)} in the selected Modules of {type(node).__name__}. "
            "Check the names, or pass raise_if_not_found=False."
        )
    return out


def view(
    node: N,
    /,
    *,
    only: Filter = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **kwargs: Any,
) -> N:
    """A copy of ``node`` in which each selected Module with a ``set_view`` method is given
    the keyword arguments it takes (e.g. ``view(model, deterministic=True)``); ``node`` is
    left as it is and the Variables are shared.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Drop(nnx.Module):
        ...     def __init__(self): self.deterministic = False
        ...     def set_view(self, deterministic: bool | None = None):
        ...         '''Sets the mode.
        ...
        ...         Args:
        ...           deterministic: if True, no dropout.
        ...         '''
        ...         if deterministic is not None:
        ...             self.deterministic = deterministic
        >>> d = Drop(); nnx.view(d, deterministic=True).deterministic, d.deterministic
        (True, False)
        >>> print(nnx.view_info(d))
        Drop:
          deterministic: bool | None = None
            if True, no dropout.

    Raises:
        ValueError: an argument no selected ``set_view`` takes (unless
            ``raise_if_not_found=False``).
    """
    pred = to_predicate(only)
    unused = set(kwargs)

    def apply(path: tuple[Any, ...], x: Any) -> Any:
        has_view = isinstance(x, Module) and hasattr(type(x), "set_view")
        if has_view and pred(path, x):
            set_view = x.set_view  # type: ignore[attr-defined]
            params = inspect.signature(set_view).parameters.values()
            if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
                set_view(**kwargs)
                unused.clear()
            else:
                names = {p.name for p in params if p.kind in _KEYWORDS}
                set_view(**{k: v for k, v in kwargs.items() if k in names})
                unused.difference_update(names)
        return x

    out = recursive_map(apply, node)
    if unused and raise_if_not_found:
        raise ValueError(
            f"view: Unused keys found in nnx.view: {sorted(unused)}: no selected Module of "
            f"{type(node).__name__} takes them in its set_view. See nnx.view_info(model) for "
            "the arguments each takes, or pass raise_if_not_found=False."
        )
    return out


def view_info(node: Any, /, *, only: Filter = ..., graph: bool | None = None) -> str:
    """The ``set_view`` arguments of each Module class in ``node`` (those ``only`` selects),
    with their documentation, one class per block, sorted by class name."""
    pred = to_predicate(only)
    classes: dict[str, type] = {}

    def collect(path: tuple[Any, ...], x: Any) -> Any:
        if isinstance(x, Module) and hasattr(type(x), "set_view") and pred(path, x):
            classes[type(x).__qualname__] = type(x)
        return x

    recursive_map(collect, node)
    return "\n".join(_class_info(classes[name]) for name in sorted(classes))


def _class_info(cls: type) -> str:
    set_view = cls.set_view  # type: ignore[attr-defined]
    sig = inspect.signature(set_view)
    doc = inspect.getdoc(set_view)
    lines = [f"{cls.__qualname__}:"]
    if not doc:
        return "\n".join([*lines, f"  set_view{sig}"])
    described = _arg_docs(doc)
    for name, p in sig.parameters.items():
        if name in ("self", "args", "kwargs") or p.kind == inspect.Parameter.VAR_KEYWORD:
            continue
        annotation = (
            p.annotation
            if isinstance(p.annotation, str)
            else inspect.formatannotation(p.annotation)
        )
        default = "" if p.default is inspect.Parameter.empty else f" = {p.default}"
        lines.append(f"  {name}: {annotation}{default}")
        if name in described:
            lines.append(described[name])
    return "\n".join(lines)


def _arg_docs(doc: str) -> dict[str, str]:
    """``name -> description`` (each line indented by 4) from a Google-style ``Args:`` section."""
    start = doc.find("Args:")
    if start < 0:
        return {}
    body = doc[start + len("Args:") :].split("Returns:")[0].splitlines()
    out: dict[str, list[str]] = {}
    current = None
    for line in body:
        if line.startswith("  ") and not line.startswith("    ") and ":" in line:
            current, text = line.strip().split(":", 1)
            out[current] = [f"    {text.strip()}"]
        elif current is not None and line.strip():
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}
