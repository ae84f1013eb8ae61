"""tabulate: a per-call table of a model (inputs, outputs, Variables per kind), computed abstractly.

The model is rebuilt and called under ``jax.eval_shape``, so no array is allocated and the
caller's model is not changed (BatchNorm statistics, Rng counts). While it runs, the
``__call__`` of every Module class in the graph is wrapped to record each call's path, input
shapes and output shapes; the wrappers are removed afterwards.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax
import numpy as np

from ._api import merge, split
from ._graph import is_node, iter_nodes
from ._kinds import display_name
from ._module import Module, _bytes
from ._rngs import Rngs, RngStream
from ._state import format_path
from ._variables import Variable

_HIDDEN_TYPES = (Rngs, RngStream)  # rows flax.nnx leaves out too


@dataclasses.dataclass
class Row:
    """One call of one Module: where it is, what it got and returned, what it holds."""

    path: tuple[Any, ...]
    type_name: str
    inputs: str
    outputs: str = ""
    stats: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)


def tabulate(
    obj: Any,
    *input_args: Any,
    depth: int | None = None,
    method: str = "__call__",
    **input_kwargs: Any,
) -> str:
    """A table of every Module call made by ``getattr(obj, method)(*input_args, **input_kwargs)``.

    Each row is one call: the Module's path and type, the shapes of its inputs and outputs, and
    the element count and size of the Variables it holds (itself and its submodules) per kind.
    Everything is computed abstractly (``jax.eval_shape``): inputs may be arrays or
    ``jax.ShapeDtypeStruct``, nothing is allocated and ``obj`` is left unchanged.

    Args:
        obj: the model (a Module).
        *input_args: positional arguments of the call.
        depth: show only calls at most this many levels below ``obj``.
        method: the method of ``obj`` to call (submodules are recorded through ``__call__``).
        **input_kwargs: keyword arguments of the call.

    Returns:
        The table as text.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Dense(nnx.Module):
        ...     def __init__(self, din, dout):
        ...         self.w = nnx.Param(jnp.zeros((din, dout)))
        ...     def __call__(self, x): return x @ self.w
        >>> class MLP(nnx.Module):
        ...     def __init__(self):
        ...         self.layers = [Dense(3, 4), Dense(4, 2)]
        ...         self.mean = nnx.BatchStat(jnp.zeros(2))
        ...     def __call__(self, x):
        ...         for layer in self.layers:
        ...             x = layer(x)
        ...         return x - self.mean
        >>> print(nnx.tabulate(MLP(), jax.ShapeDtypeStruct((5, 3), jnp.float32)))
        MLP summary
        path       type   inputs        outputs       BatchStat  Param
                   MLP    float32[5,3]  float32[5,2]  2 (8 B)    20 (80 B)
        layers[0]  Dense  float32[5,3]  float32[5,4]             12 (48 B)
        layers[1]  Dense  float32[5,4]  float32[5,2]             8 (32 B)
                                               Total  2 (8 B)    20 (80 B)
        Total: 22 elements (88 B)

    Raises:
        TypeError: ``obj`` is not a Module.
        AttributeError: ``obj`` has no method ``method``.
    """
    if not isinstance(obj, Module):
        raise TypeError(
            f"tabulate expects a Module, got {type(obj).__name__}. Pass the model itself, "
            "e.g. nnx.tabulate(model, x)."
        )
    if not callable(getattr(obj, method, None)):
        raise AttributeError(
            f"tabulate: {type(obj).__name__} has no method {method!r} to call. Pass "
            "method='name_of_the_method'."
        )
    rows = collect_rows(obj, input_args, input_kwargs, method=method)
    shown = [r for r in rows if depth is None or len(r.path) <= depth]
    return _render(type(obj).__name__, shown, rows[0].stats if rows else {})


def collect_rows(
    obj: Module, args: tuple[Any, ...], kwargs: dict[str, Any], *, method: str
) -> list[Row]:
    """The rows of :func:`tabulate`, in call order (a caller before what it calls)."""
    graphdef, state = split(obj)
    rows: list[Row] = []
    # arrays (and ShapeDtypeStructs) are traced; Python values such as deterministic=True stay
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    traced = [i for i, x in enumerate(leaves) if _is_array_like(x)]

    def run(state: Any, arrays: list[Any]) -> None:
        model = merge(graphdef, state)
        values = list(leaves)
        for i, x in zip(traced, arrays):
            values[i] = x
        call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, values)
        with _recording(model, method, rows):
            getattr(model, method)(*call_args, **call_kwargs)

    jax.eval_shape(run, state, [leaves[i] for i in traced])
    return rows


def _is_array_like(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, jax.ShapeDtypeStruct))


@contextmanager
def _recording(model: Module, method: str, rows: list[Row]) -> Iterator[None]:
    paths = {id(m): p for p, m in model.iter_modules() if not isinstance(m, _HIDDEN_TYPES)}
    active: set[int] = set()
    patched: list[tuple[type, str, Any]] = []
    targets = {(type(model), method)} | {(type(m), "__call__") for _, m in model.iter_modules()}
    # resolve every original before wrapping any, so a subclass never wraps a base's wrapper
    originals = {(cls, name): getattr(cls, name) for cls, name in targets if hasattr(cls, name)}
    try:
        for (cls, name), fn in originals.items():
            patched.append((cls, name, cls.__dict__.get(name, _ABSENT)))
            setattr(cls, name, _recorder(fn, paths, active, rows))
        yield
    finally:
        for cls, name, old in reversed(patched):
            if old is _ABSENT:
                delattr(cls, name)
            else:
                setattr(cls, name, old)


_ABSENT = object()


def _recorder(
    fn: Callable[..., Any], paths: dict[int, tuple[Any, ...]], active: set[int], rows: list[Row]
) -> Callable[..., Any]:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        path = paths.get(id(self))
        if path is None or id(self) in active:  # not in the graph, or a super() call
            return fn(self, *args, **kwargs)
        row = Row(path, type(self).__name__, _describe_call(args, kwargs), stats=_stats(self))
        rows.append(row)
        active.add(id(self))
        try:
            out = fn(self, *args, **kwargs)
        finally:
            active.discard(id(self))
        row.outputs = _describe_tree(out)
        return out

    return call


def _stats(module: Module) -> dict[str, tuple[int, int]]:
    stats: dict[str, tuple[int, int]] = {}
    for _, x in iter_nodes(module):
        if isinstance(x, Variable):
            value = x.get_raw_value()
            shape = getattr(value, "shape", None)
            if shape is None:
                continue
            size = math.prod(shape)
            kind = display_name(type(x))
            n, nbytes = stats.get(kind, (0, 0))
            stats[kind] = (n + size, nbytes + size * value.dtype.itemsize)
    return stats


def _describe_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_describe_tree(a) for a in args] + [
        f"{k}={_describe_tree(v)}" for k, v in kwargs.items()
    ]
    return ", ".join(parts)


def _describe_tree(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, Variable):
        return f"{x.dtype}[{','.join(map(str, x.shape))}]"
    if isinstance(x, Variable):
        return f"{type(x).__name__}({_describe_tree(x.get_raw_value())})"
    if is_node(x) and not isinstance(x, (list, tuple, dict)):
        return type(x).__name__
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe_tree(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {_describe_tree(v)}" for k, v in x.items()) + "}"
    return repr(x)


def _cell(stat: tuple[int, int] | None) -> str:
    return "" if not stat else f"{stat[0]:,} ({_bytes(stat[1])})"


def _render(title: str, rows: list[Row], totals: dict[str, tuple[int, int]]) -> str:
    kinds = sorted({k for r in rows for k in r.stats} | set(totals))
    header = ["path", "type", "inputs", "outputs", *kinds]
    body = [
        [
            format_path(r.path) if r.path else "",
            r.type_name,
            r.inputs,
            r.outputs,
            *(_cell(r.stats.get(k)) for k in kinds),
        ]
        for r in rows
    ]
    footer = ["", "", "", "Total", *(_cell(totals.get(k)) for k in kinds)]
    table = [header, *body, footer]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def line(cells: list[str], right: int = -1) -> str:
        out = [
            c.rjust(w) if i == right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(out).rstrip()

    elements = sum(n for n, _ in totals.values())
    nbytes = sum(b for _, b in totals.values())
    lines = [f"{title} summary", line(header), *(line(r) for r in body), line(footer, right=3)]
    lines.append(f"Total: {elements:,} elements ({_bytes(nbytes)})")
    return "\n".join(lines)
