"""``vmap`` and ``scan`` over functions that take Modules, with per-kind axes.

The state of a Module argument is mapped (or scanned) per Variable: ``in_axes`` gives one axis
for all of an argument's Variables, or a :class:`StateAxes` mapping filters to axes, e.g.
``StateAxes({Param: 0, BatchStat: 0, ...: None})``. Rng streams passed unmapped are split per
example in ``vmap`` and advance per step in ``scan``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from .._filters import Filter, _show, to_predicate
from .._graph import Plan
from .._rngs import RngStream
from .._state import format_path
from .._variables import Variable
from ._lift import OutInfo, apply, collect, is_graph_root, rebuild, with_placeholders


class _CarryType:
    def __repr__(self) -> str:
        return "Carry"


Carry = _CarryType()
"""Marks the argument / output that ``scan`` carries from step to step."""


class StateAxes:
    """Axes per Variable kind for one Module argument of ``vmap``/``scan``.

    Example:
        >>> import nnx_core as nnx
        >>> nnx.StateAxes({nnx.Param: 0, ...: None})
        StateAxes({Param: 0, ...: None})
    """

    def __init__(self, axes: Mapping[Filter, Any]):
        self.axes = dict(axes)
        self.predicates = [(to_predicate(f), ax) for f, ax in self.axes.items()]

    def axis_of(self, path: tuple[Any, ...], leaf: Any) -> Any:
        for pred, ax in self.predicates:
            if pred(path, leaf):
                return ax
        raise ValueError(
            f"StateAxes {self!r} has no filter matching {format_path(path)} "
            f"({type(leaf).__name__}); add one, e.g. `...: None` as the last entry."
        )

    def __repr__(self) -> str:
        return "StateAxes({" + ", ".join(f"{_show(f)}: {a}" for f, a in self.axes.items()) + "})"


def _per_arg(axes: Any, n: int, name: str) -> list[Any]:
    if isinstance(axes, (list, tuple)):
        if len(axes) != n:
            raise ValueError(
                f"{name}: in_axes has {len(axes)} entries but the function got {n} positional "
                "arguments; give one axis per argument (or a single axis for all)."
            )
        return list(axes)
    return [axes] * n


def _leaf_axes(plan: Plan, roots: tuple[Any, ...], root_axes: list[Any]) -> list[Any]:
    axes: list[Any] = []
    paths = plan.graphdef.paths
    leaves = plan.current_leaves()
    for (start, stop), ax in zip(plan.bounds, root_axes):
        for i in range(start, stop):
            axes.append(ax.axis_of(paths[i], leaves[i]) if isinstance(ax, StateAxes) else ax)
    return axes


class _Cut:
    """Arguments cut per positional arg: graph roots with their axis, other leaves with theirs."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any], arg_axes: list[Any],
                 kwarg_axis: Any):
        flat, self.treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_graph_root)
        owner = []
        for i, a in enumerate(args):
            owner += [arg_axes[i]] * len(jax.tree_util.tree_leaves(a, is_leaf=is_graph_root))
        owner += [kwarg_axis] * (len(flat) - len(owner))
        self.positions: list[int] = []
        self.roots: list[Any] = []
        self.root_axes: list[Any] = []
        self.others: list[Any] = []
        self.other_axes: list[Any] = []
        for pos, (x, ax) in enumerate(zip(flat, owner)):
            if is_graph_root(x):
                self.positions.append(pos)
                self.roots.append(x)
                self.root_axes.append(ax)
            else:
                self.others.append(x)
                self.other_axes.append(ax)


def _require_same(info: OutInfo, name: str) -> None:
    if not info.same:
        raise ValueError(
            f"{name}: the function changed the structure of a Module argument (added or removed "
            "attributes or Variables). Inside vmap/scan only values may change; create new "
            "state outside, or return new Modules from the function instead."
        )


# -- vmap ----------------------------------------------------------------------------------------
def vmap(
    f: Callable[..., Any] | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Any = None,
    axis_size: int | None = None,
    **vmap_kwargs: Any,
) -> Any:
    """``jax.vmap`` for functions that take and return Modules.

    ``in_axes`` has one entry per positional argument (or one for all): an int, ``None`` or,
    for a Module, a :class:`StateAxes`. Module state changes are written back with the same
    axes. A Module returned by the function (e.g. a stack of layers built from a batch of keys)
    gets its Variables stacked along ``out_axes``. Rng streams of unmapped Modules give each
    example its own key.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Lin(nnx.Module):
        ...     def __init__(self, key): self.w = nnx.Param(jax.random.normal(key, (3, 2)))
        ...     def __call__(self, x): return x @ self.w.value
        >>> stack = nnx.vmap(Lin)(jax.random.split(jax.random.key(0), 4))
        >>> stack.w.shape
        (4, 3, 2)
        >>> nnx.vmap(lambda m, x: m(x), in_axes=(0, None))(stack, jnp.ones(3)).shape
        (4, 2)

    Raises:
        ValueError: ``in_axes`` does not match the arguments, or the function changed the
            structure of a Module argument.
    """
    if f is None:
        return functools.partial(vmap, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name,
                                 axis_size=axis_size, **vmap_kwargs)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cut = _Cut(args, kwargs, _per_arg(in_axes, len(args), "vmap"), 0)
        roots = tuple(cut.roots)
        plan = Plan(roots)
        axes = _leaf_axes(plan, roots, cut.root_axes)
        leaves = plan.current_leaves()
        values = [v._value if isinstance(v, Variable) else v for v in leaves]
        size = axis_size if axis_size is not None else _infer_size(values, axes, cut)
        restore = _split_rng_keys(plan, values, axes, size)
        groups = sorted({a for a in axes if a is not None} | ({out_axes} if isinstance(out_axes, int) else {0}))
        info_box: list[OutInfo] = []

        def pure(values: list[Any], others: list[Any]) -> Any:
            a, kw, inner_roots, objs = rebuild(plan.graphdef, values, cut.treedef, tuple(cut.positions), others)
            out = f(*a, **kw)
            info, out_values, out_others = collect(plan.graphdef, values, inner_roots, objs, out,
                                                   return_all=True)
            info_box.append(info)
            n_in = len(values)
            new_axis = out_axes if isinstance(out_axes, int) else 0
            all_axes = axes + [new_axis] * (len(out_values) - n_in) if not info.same else axes
            if not info.same and _roots_changed(info, plan):
                _require_same(info, "vmap")
            mapped = tuple([v for v, ax in zip(out_values, all_axes) if ax == g] for g in groups)
            unmapped = [v for v, ax in zip(out_values, all_axes) if ax is None]
            if flat_out:
                return mapped, unmapped, out_others
            out_user = jax.tree_util.tree_unflatten(info.out_treedef, with_placeholders(info, out_others))
            return mapped, unmapped, out_user

        flat_out = out_axes is None or isinstance(out_axes, int)
        out_user_axes = out_axes if not isinstance(out_axes, StateAxes) else 0
        mapped, unmapped, out_user = jax.vmap(
            pure, in_axes=(axes, cut.other_axes), out_axes=(tuple(groups), None, out_user_axes),
            axis_name=axis_name, axis_size=size, **vmap_kwargs,
        )(values, cut.others)
        info = info_box[-1]
        n_in = len(values)
        all_axes = axes if info.same else axes + [out_axes if isinstance(out_axes, int) else 0] * (
            sum(len(m) for m in mapped) + len(unmapped) - n_in)
        out_values = _interleave(all_axes, groups, mapped, unmapped)
        for i, original in restore:
            out_values[i] = original
        if flat_out:
            out_others = out_user
        else:
            out_leaves = jax.tree_util.tree_leaves(out_user, is_leaf=lambda x: x is None)
            out_others = [x for pos, x in enumerate(out_leaves) if pos not in set(info.out_positions)]
        if info.same:
            info = OutInfo(True, tuple(range(n_in)), None, {}, info.out_treedef, info.out_positions,
                           info.out_nodes, info.n_roots)
        return apply(info, plan, out_values, out_others)

    return wrapper


def _roots_changed(info: OutInfo, plan: Plan) -> bool:
    if info.graphdef is None:
        return False
    spec = info.graphdef.spec
    n = info.n_roots
    out_roots = spec[1][:n] if spec[0] == "multi" else ((spec,) if n else ())
    in_spec = plan.graphdef.spec
    in_roots = in_spec[1] if in_spec[0] == "multi" else (in_spec,)
    return tuple(out_roots) != tuple(in_roots[:n])


def _interleave(axes: list[Any], groups: list[int], mapped: tuple[list[Any], ...],
                unmapped: list[Any]) -> list[Any]:
    iters = {g: iter(m) for g, m in zip(groups, mapped)}
    it_un = iter(unmapped)
    return [next(it_un) if ax is None else next(iters[ax]) for ax in axes]


def _infer_size(values: list[Any], axes: list[Any], cut: _Cut) -> int:
    for v, ax in zip(values, axes):
        if ax is not None:
            return int(jnp.shape(v)[ax])
    for v, ax in zip(cut.others, cut.other_axes):
        if ax is not None and hasattr(v, "shape"):
            return int(v.shape[ax])
    raise ValueError("vmap: no argument is mapped; pass axis_size= to say how many examples.")


def _split_rng_keys(plan: Plan, values: list[Any], axes: list[Any], size: int) -> list[tuple[int, Any]]:
    """Unmapped Rng streams: each example gets its own key; the stream advances once."""
    restore = []
    index = {id(leaf): i for i, leaf in enumerate(plan.leaves)}
    for obj in plan.objs:
        if not isinstance(obj, RngStream):
            continue
        i = index.get(id(obj.key))
        if i is None or axes[i] is not None:
            continue
        key = obj()  # advances the caller's count by one
        ci = index.get(id(obj.count))
        if ci is not None:
            values[ci] = obj.count.value
        restore.append((i, values[i]))
        values[i] = jax.random.split(key, size)
        axes[i] = 0
    return restore
