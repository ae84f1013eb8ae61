"""``scan`` over functions that take Modules: loop over a stacked axis ("scan over layers")."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .._graph import Plan
from .._variables import Variable
from ._lift import OutInfo, apply, collect, is_graph_root, rebuild
from ._mapping import Carry, _Cut, _leaf_axes, _per_arg, _require_same


class _ScanCall:
    """One call of a scanned function: which values are carried, sliced or constant."""

    def __init__(self, f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 in_axes: Any, out_axes: Any):
        arg_axes = _per_arg(in_axes, len(args), "scan")
        if sum(a is Carry for a in arg_axes) > 1:
            raise ValueError(f"scan: in_axes {in_axes} has more than one Carry; use one (a tuple is fine).")
        self.f, self.args, self.out_axes = f, args, out_axes
        self.out_spec = out_axes if isinstance(out_axes, tuple) else (out_axes,)
        self.carry_arg = next((i for i, a in enumerate(arg_axes) if a is Carry), None)
        self.cut = cut = _Cut(args, kwargs, [None if a is Carry else a for a in arg_axes], None)
        self.plan = Plan(tuple(cut.roots))
        # Module state: sliced along its axis, or carried (unmapped state such as Rng counts).
        self.axes = _leaf_axes(self.plan, tuple(cut.roots), [None if a is Carry else a for a in cut.root_axes])
        self.values = [v._value if isinstance(v, Variable) else v for v in self.plan.current_leaves()]
        self.xs_idx = [i for i, ax in enumerate(self.axes) if ax is not None]
        self.carry_idx = [i for i, ax in enumerate(self.axes) if ax is None]
        # Other arguments: the user's carry, sliced inputs, constants.
        ca = self.carry_arg
        self.carry_user = args[ca] if ca is not None and not is_graph_root(args[ca]) else None
        self.user_carry_pos = self._user_carry_positions()
        self.other_xs = [k for k, ax in enumerate(cut.other_axes)
                         if ax is not None and k not in self.user_carry_pos]
        self.consts = {k: x for k, x in enumerate(cut.others)
                       if k not in self.user_carry_pos and k not in self.other_xs}
        self.infos: list[OutInfo] = []

    def _user_carry_positions(self) -> list[int]:
        if self.carry_user is None:
            return []
        assert self.carry_arg is not None
        n_before = sum(len(jax.tree_util.tree_leaves(a, is_leaf=is_graph_root))
                       for a in self.args[:self.carry_arg])
        n_carry = len(jax.tree_util.tree_leaves(self.carry_user))
        roots = set(self.cut.positions)
        flat_pos = [p for p in range(len(self.cut.others) + len(roots)) if p not in roots]
        return [k for k, p in enumerate(flat_pos) if n_before <= p < n_before + n_carry]

    def init_and_xs(self) -> tuple[Any, Any]:
        v, cut = self.values, self.cut
        init = ([v[i] for i in self.carry_idx], [cut.others[k] for k in self.user_carry_pos])
        xs = ([jnp.moveaxis(v[i], self.axes[i], 0) for i in self.xs_idx],
              [jnp.moveaxis(cut.others[k], cut.other_axes[k], 0) for k in self.other_xs])
        return init, xs

    def body(self, carry: Any, xs: Any) -> Any:
        (carry_state, carry_others), (xs_state, xs_others) = carry, xs
        full = list(self.values)
        for i, v in [*zip(self.carry_idx, carry_state), *zip(self.xs_idx, xs_state)]:
            full[i] = v
        others: list[Any] = [None] * len(self.cut.others)
        for k, v in [*self.consts.items(), *zip(self.user_carry_pos, carry_others),
                     *zip(self.other_xs, xs_others)]:
            others[k] = v
        cut, graphdef = self.cut, self.plan.graphdef
        a, kw, roots, objs = rebuild(graphdef, full, cut.treedef, tuple(cut.positions), others)
        out = self.f(*a, **kw)
        info, out_values, _ = collect(graphdef, full, roots, objs, out, return_all=True)
        _require_same(info, "scan")
        self.infos.append(info)
        outs = out if isinstance(self.out_axes, tuple) else (out,)
        new_carry = [o for o, ax in zip(outs, self.out_spec) if ax is Carry]
        ys = [o for o, ax in zip(outs, self.out_spec) if ax is not Carry]
        user_carry = jax.tree_util.tree_leaves(new_carry[0]) if new_carry and self.carry_user is not None else []
        return ([out_values[i] for i in self.carry_idx], user_carry), ([out_values[i] for i in self.xs_idx], ys)

    def finish(self, carry_state: list[Any], carry_others: list[Any], ys_state: list[Any],
               ys_user: list[Any]) -> Any:
        out_values = list(self.values)
        for i, v in zip(self.carry_idx, carry_state):
            out_values[i] = v
        for i, v in zip(self.xs_idx, ys_state):
            out_values[i] = jnp.moveaxis(v, 0, self.axes[i])
        all_changed = OutInfo(True, tuple(range(len(out_values))), None, {},
                              jax.tree_util.tree_structure(None), (), (), self.infos[-1].n_roots)
        apply(all_changed, self.plan, out_values, [])
        outs = []
        it_ys = iter(ys_user)
        for ax in self.out_spec:
            if ax is not Carry:
                y = next(it_ys)
                outs.append(jax.tree_util.tree_map(lambda v, ax=ax: jnp.moveaxis(v, 0, ax), y) if ax else y)
            elif self.carry_user is not None:
                treedef = jax.tree_util.tree_structure(self.carry_user)
                outs.append(jax.tree_util.tree_unflatten(treedef, carry_others))
            else:
                outs.append(self.args[self.carry_arg] if self.carry_arg is not None else None)
        return tuple(outs) if isinstance(self.out_axes, tuple) else outs[0]


def scan(
    f: Callable[..., Any] | None = None,
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
) -> Any:
    """``jax.lax.scan`` for functions that take Modules: loop over a stacked axis.

    ``in_axes`` has one entry per positional argument: :data:`Carry` (threaded from step to
    step; at most one), an int (sliced per step), ``None`` (the same every step) or, for a
    Module, a :class:`StateAxes`. Module state that is not sliced (e.g. Rng counts) is carried,
    so it advances every step. ``out_axes`` says which output is the carry (``Carry``) and
    along which axis the others are stacked. The classic use is *scan over layers*.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Lin(nnx.Module):
        ...     def __init__(self, key): self.w = nnx.Param(jnp.eye(2) * 2.0)
        ...     def __call__(self, x): return x @ self.w.value
        >>> layers = nnx.vmap(Lin)(jax.random.split(jax.random.key(0), 3))
        >>> forward = nnx.scan(lambda layer, x: layer(x), in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        >>> forward(layers, jnp.ones(2)).tolist()
        [8.0, 8.0]

    Raises:
        ValueError: ``in_axes``/``out_axes`` name more than one Carry, or the function changed
            the structure of a Module argument.
    """
    if f is None:
        return functools.partial(scan, length=length, reverse=reverse, unroll=unroll,
                                 in_axes=in_axes, out_axes=out_axes)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = _ScanCall(f, args, kwargs, in_axes, out_axes)
        init, xs = call.init_and_xs()
        (carry_state, carry_others), (ys_state, ys_user) = jax.lax.scan(
            call.body, init, xs, length=length, reverse=reverse, unroll=unroll
        )
        return call.finish(carry_state, carry_others, ys_state, ys_user)

    return wrapper
