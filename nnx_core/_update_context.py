"""flax.nnx's identity-keeping split / merge across a boundary: ``update_context``,
``split_context`` and ``merge_context``.

Inside ``with nnx.update_context(tag):`` an outer ``split_context(tag).split(model)`` is
followed (across a JAX transform, typically) by an inner ``merge_context(tag, inner=True)``
that builds a copy, code that changes the copy (values, new attributes, new or shared
submodules), an inner ``split_context(tag).split(copy)``, and finally an outer
``merge_context(tag, inner=False).merge(...)`` that writes the copy's graph back into the
original objects and returns the original root. nnx_core's own transforms write changes back
themselves; this is for code written against flax.nnx's lower-level API.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from ._api import iter_graph, merge, split
from ._data_attrs import MARKS_ATTR
from ._flatten import GraphDef
from ._pytree import HIDDEN as HIDDEN_ATTRS
from ._pytree import Pytree
from ._variables import Variable

_ACTIVE: dict[str, list[UpdateContext]] = {}


@dataclasses.dataclass(eq=False)
class UpdateContext:
    """The bookkeeping of one ``update_context(tag)``: the outer root and the inner copy's
    nodes mapped to the outer objects they were built from."""

    tag: str
    outer: Any = None
    inner_to_outer: dict[int, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    inner_root: Any = None


@dataclasses.dataclass(eq=False)
class SplitContext:
    """What ``split_context(tag)`` yields: ``ctx.split(node, *filters)``."""

    ctx: UpdateContext

    def split(self, node: Any, *filters: Any) -> tuple[Any, ...]:
        if self.ctx.outer is None:
            self.ctx.outer = node
        else:
            self.ctx.inner_root = node
        return split(node, *filters)


@dataclasses.dataclass(eq=False)
class MergeContext:
    """What ``merge_context(tag, inner)`` yields: ``ctx.merge(graphdef, state, *states)``."""

    ctx: UpdateContext
    inner: bool

    def merge(self, graphdef: GraphDef, state: Any, /, *states: Any) -> Any:
        ctx = self.ctx
        if ctx.outer is None:
            raise ValueError(
                f"merge_context({ctx.tag!r}).merge came before any split_context({ctx.tag!r})"
                ".split: split the outer graph first, as flax.nnx's protocol does."
            )
        built = merge(graphdef, state, *states)
        if self.inner:
            outer = dict(iter_graph(ctx.outer))
            ctx.inner_to_outer = {id(x): (x, outer[p]) for p, x in iter_graph(built) if p in outer}
            return built
        return _write_back(ctx, built)


def _write_back(ctx: UpdateContext, built: Any) -> Any:
    """Make the outer objects take the graph of ``built`` (a fresh merge of the inner
    split); return the outer root."""
    inner = dict(iter_graph(ctx.inner_root)) if ctx.inner_root is not None else {}
    target: dict[int, Any] = {}
    pairs: list[tuple[Any, Any]] = []
    for path, x in iter_graph(built):
        found = ctx.inner_to_outer.get(id(inner[path])) if path in inner else None
        outer = found[1] if found is not None else None
        if outer is not None and type(outer) is type(x):
            target[id(x)] = outer
            pairs.append((x, outer))
    for x, outer in pairs:
        if isinstance(x, Variable):
            outer.update_from_state(x)
    for _, x in iter_graph(built):
        if isinstance(x, Pytree):
            _take_attributes(target.get(id(x), x), x, target)
    return target.get(id(built), built)


def _swap(value: Any, target: dict[int, Any]) -> Any:
    if id(value) in target:
        return target[id(value)]
    if type(value) in (list, tuple):
        return type(value)(_swap(v, target) for v in value)
    if type(value) is dict:
        return {k: _swap(v, target) for k, v in value.items()}
    return value


def _take_attributes(dest: Any, src: Any, target: dict[int, Any]) -> None:
    new = {k: _swap(v, target) for k, v in vars(src).items() if k not in HIDDEN_ATTRS}
    for k in [k for k in vars(dest) if k not in HIDDEN_ATTRS and k not in new]:
        delattr(dest, k)
    if MARKS_ATTR in new:
        object.__setattr__(dest, MARKS_ATTR, new.pop(MARKS_ATTR))
    for k, v in new.items():
        if vars(dest).get(k, _swap) is not v:
            setattr(dest, k, v)


def _current(tag: str, where: str) -> UpdateContext:
    stack = _ACTIVE.get(tag)
    if not stack:
        raise ValueError(
            f"{where}({tag!r}) needs an enclosing `with nnx.update_context({tag!r}):`; "
            f"none is active for tag {tag!r}."
        )
    return stack[-1]


@contextlib.contextmanager
def update_context(tag: str) -> Iterator[UpdateContext]:
    """Open an update context for ``tag`` (see the module docstring).

    Example:
        >>> import nnx_core as nnx
        >>> class Foo(nnx.Module):
        ...     def __init__(self): self.x = 1
        >>> m1 = Foo()
        >>> with nnx.update_context("t"):
        ...     with nnx.split_context("t") as ctx:
        ...         g, s = ctx.split(m1)
        ...     with nnx.merge_context("t", inner=True) as ctx:
        ...         m2 = ctx.merge(g, s)
        ...     m2.y = 2
        ...     with nnx.split_context("t") as ctx:
        ...         g, s = ctx.split(m2)
        ...     with nnx.merge_context("t", inner=False) as ctx:
        ...         m3 = ctx.merge(g, s)
        >>> m3 is m1, m1.y
        (True, 2)
    """
    ctx = UpdateContext(tag)
    _ACTIVE.setdefault(tag, []).append(ctx)
    try:
        yield ctx
    finally:
        _ACTIVE[tag].pop()
        if not _ACTIVE[tag]:
            del _ACTIVE[tag]


def current_update_context(tag: str) -> UpdateContext:
    """The innermost active ``update_context(tag)``.

    Raises:
        ValueError: no update context for ``tag`` is active.
    """
    return _current(tag, "current_update_context")


@contextlib.contextmanager
def split_context(tag: str) -> Iterator[SplitContext]:
    """Split under the active ``update_context(tag)``.

    Raises:
        ValueError: no update context for ``tag`` is active.
    """
    yield SplitContext(_current(tag, "split_context"))


@contextlib.contextmanager
def merge_context(tag: str, inner: bool) -> Iterator[MergeContext]:
    """Merge under the active ``update_context(tag)``: ``inner=True`` builds the inner copy,
    ``inner=False`` writes the inner graph back into the outer objects.

    Raises:
        ValueError: no update context for ``tag`` is active.
    """
    yield MergeContext(_current(tag, "merge_context"), inner)
