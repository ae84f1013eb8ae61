"""``scan`` over functions that take Modules: loop over a stacked axis ("scan over layers").

Every leaf of the arguments is carried (the ``Carry`` argument, and Module state whose axis is
``None`` or ``Carry``), sliced along an int axis, or broadcast (other leaves with axis
``None``). Sliced state is stacked back along its axis; the carry comes out as the carry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .._graph import Plan
from ._axes import Carry, PerFilter, is_spec_leaf, leaf_specs
from ._lift import OutInfo, apply, collect, is_graph_root, rebuild
from ._mapped import MappedCall, per_arg


def _check_scan_axis(spec: Any, where: str) -> None:
    if (
        spec is not None
        and spec is not Carry
        and not (isinstance(spec, int) and not isinstance(spec, bool))
    ):
        raise ValueError(f"scan: {where} is {spec!r}; a scan axis is an int, None or Carry.")


def _carry_index(axes: Any, what: str) -> int | None:
    """The top-level position of Carry in ``axes`` (``-1``: ``axes`` is Carry itself)."""
    if axes is Carry:
        return -1
    found: list[int] = []
    if isinstance(axes, (tuple, list)):
        for i, a in enumerate(axes):
            leaves = jax.tree_util.tree_leaves(a, is_leaf=is_spec_leaf)
            if a is Carry:
                found.append(i)
            elif any(x is Carry for x in leaves) and not isinstance(a, PerFilter):
                raise ValueError(
                    f"scan: {what} {axes!r} has Carry nested inside entry {i}; "
                    "Carry may only be a top-level entry."
                )
    if len(found) > 1:
        raise ValueError(
            f"scan: {what} {axes!r} has more than one Carry; use one (the carry may be a tuple)."
        )
    return found[0] if found else None


def _check_out_axes(out_axes: Any) -> None:
    for leaf in jax.tree_util.tree_leaves(out_axes, is_leaf=is_spec_leaf):
        if leaf is None or isinstance(leaf, PerFilter):
            raise ValueError(
                f"scan: out_axes {out_axes!r} contains {leaf!r}; an output is carried (Carry) "
                "or stacked along an int axis. Module state is written back with the axes of "
                "in_axes, so Modules need no out_axes."
            )


class _ScanCall:
    """One call of a scanned function: which leaves are carried, sliced or constant."""

    def __init__(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        in_axes: Any,
        out_axes: Any,
    ):
        self.f, self.out_axes = f, out_axes
        in_carry, out_carry = _carry_index(in_axes, "in_axes"), _carry_index(out_axes, "out_axes")
        if (in_carry is None) != (out_carry is None):
            raise ValueError(
                f"scan: in_axes {in_axes!r} and out_axes {out_axes!r} must both "
                "have a Carry or both have none."
            )
        _check_out_axes(out_axes)
        if in_carry == -1 and len(args) != 1:
            raise ValueError(
                f"scan: in_axes=Carry makes the single argument the carry, but the "
                f"function got {len(args)}; use a tuple such as (Carry, 0, ...)."
            )
        arg_specs = (Carry,) if in_carry == -1 else per_arg("scan", "in_axes", in_axes, args)
        self.carry_arg: int = 0 if in_carry is None or in_carry == -1 else in_carry
        self.out_carry = out_carry
        self.call = call = MappedCall(
            "scan", args, kwargs, arg_specs, kwargs_spec=None, check=_check_scan_axis
        )
        self.plan: Plan = call.plan
        sliced = [isinstance(s, int) and s is not Carry for s in call.state_specs]
        self.xs_idx = [i for i, s in enumerate(sliced) if s]
        self.carry_idx = [i for i, s in enumerate(sliced) if not s]
        specs = call.other_specs
        self.user_carry = [k for k, s in enumerate(specs) if s is Carry]
        self.other_xs = [k for k, s in enumerate(specs) if isinstance(s, int) and s is not Carry]
        self.consts = {k: x for k, (x, s) in enumerate(zip(call.others, specs)) if s is None}
        self.infos: list[OutInfo] = []
        self.out_layout: list[Any] = []  # per non-root output leaf: Carry or its int axis

    def init_and_xs(self) -> tuple[Any, Any]:
        call, v = self.call, self.call.values
        init = ([v[i] for i in self.carry_idx], [call.others[k] for k in self.user_carry])
        xs = (
            [jnp.moveaxis(v[i], call.state_specs[i], 0) for i in self.xs_idx],
            [jnp.moveaxis(call.others[k], call.other_specs[k], 0) for k in self.other_xs],
        )
        return init, xs

    def body(self, carry: Any, xs: Any) -> Any:
        (carry_state, carry_others), (xs_state, xs_others) = carry, xs
        call = self.call
        full = list(call.values)
        for i, v in [*zip(self.carry_idx, carry_state), *zip(self.xs_idx, xs_state)]:
            full[i] = v
        others: list[Any] = [None] * len(call.others)
        for k, v in [
            *self.consts.items(),
            *zip(self.user_carry, carry_others),
            *zip(self.other_xs, xs_others),
        ]:
            others[k] = v
        graphdef = self.plan.graphdef
        a, kw, roots, objs = rebuild(graphdef, full, call.treedef, tuple(call.positions), others)
        out = self.f(*a, **kw)
        info, out_values, out_others = collect(graphdef, full, roots, objs, out, return_all=True)
        if not info.same:
            raise ValueError(
                "scan: the function changed the structure of a Module argument (added or "
                "removed attributes or Variables) or returned a Module it created. Inside scan "
                "only values may change; create the state outside, or build stacked Modules "
                "with vmap."
            )
        self._check_carry(a, out, objs)
        specs = leaf_specs("scan: out_axes", self.out_axes, out)
        for pos in info.out_positions:
            if specs[pos] is not Carry:
                raise ValueError(
                    "scan: an output stacked along an axis is a Module; only the "
                    "carry may hold Modules (their state follows in_axes)."
                )
        layout = [s for pos, s in enumerate(specs) if pos not in set(info.out_positions)]
        self.infos.append(info)
        self.out_layout = layout
        new_carry = [x for x, s in zip(out_others, layout) if s is Carry]
        ys = [x for x, s in zip(out_others, layout) if s is not Carry]
        return (
            ([out_values[i] for i in self.carry_idx], new_carry),
            ([out_values[i] for i in self.xs_idx], ys),
        )

    def _check_carry(self, args: tuple[Any, ...], out: Any, objs: dict[int, Any]) -> None:
        if self.out_carry is None:
            return
        carry_in = args[self.carry_arg]
        carry_out = (
            out
            if self.out_carry == -1
            else (
                out[self.out_carry] if isinstance(out, tuple) and len(out) > self.out_carry else _NO
            )
        )
        leaves_in, tree_in = jax.tree_util.tree_flatten(carry_in, is_leaf=is_graph_root)
        leaves_out, tree_out = jax.tree_util.tree_flatten(carry_out, is_leaf=is_graph_root)
        same_nodes = all(
            (a is b) if is_graph_root(a) or is_graph_root(b) else True
            for a, b in zip(leaves_in, leaves_out)
        )
        if not (tree_in == tree_out and same_nodes):  # type: ignore[operator]
            raise ValueError(
                f"scan: the carry the function returned ({_show(carry_out)}) does not match the "
                f"carry argument ({_show(carry_in)}): it must have the same structure and hold "
                "the same Modules (return the carried Module itself)."
            )

    def finish(self, carry: Any, ys: Any) -> Any:
        (carry_state, carry_others), (ys_state, ys_user) = carry, ys
        call = self.call
        values = list(call.values)
        for i, v in zip(self.carry_idx, carry_state):
            values[i] = v
        for i, v in zip(self.xs_idx, ys_state):
            values[i] = jnp.moveaxis(v, 0, call.state_specs[i])
        it_carry, it_ys = iter(carry_others), iter(ys_user)
        out_others = [
            next(it_carry) if s is Carry else jnp.moveaxis(next(it_ys), 0, s)
            for s in self.out_layout
        ]
        info = self.infos[-1]
        info = OutInfo(
            True,
            tuple(range(len(values))),
            None,
            {},
            info.out_treedef,
            info.out_positions,
            info.out_nodes,
            info.n_roots,
        )
        return apply(info, self.plan, values, out_others)


class _Missing:
    def __repr__(self) -> str:
        return "nothing"


_NO = _Missing()


def _show(x: Any) -> str:
    if isinstance(x, tuple):
        return "(" + ", ".join(_show(v) for v in x) + ("," if len(x) == 1 else "") + ")"
    if not is_graph_root(x) and hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{x.dtype}{list(x.shape)}"
    return type(x).__name__ if not isinstance(x, _Missing) else repr(x)


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

    ``in_axes`` has one entry per positional argument (a prefix tree of it): :data:`Carry`
    (threaded from step to step; at most one, top level), an int (sliced per step), ``None``
    (the same every step) or, for a Module, a :class:`StateAxes` whose values are ints (sliced),
    ``Carry`` or ``None`` (both carried). Module state that is not sliced, such as Rng counts,
    is carried, so it advances every step. ``out_axes`` says which output is the carry
    (``Carry``) and along which axis the others are stacked. Keyword arguments are broadcast.
    The classic use is *scan over layers*.

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
        ValueError: ``in_axes``/``out_axes`` have more than one or a nested Carry, only one of
            them has a Carry, ``out_axes`` has None or a StateAxes, the carry returned differs
            from the carry argument, sliced values have different lengths, or the function
            changed the structure of a Module argument.
    """
    if f is None:
        return functools.partial(
            scan, length=length, reverse=reverse, unroll=unroll, in_axes=in_axes, out_axes=out_axes
        )

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = _ScanCall(f, args, kwargs, in_axes, out_axes)
        size = call.call.mapped_size(length, "length")
        init, xs = call.init_and_xs()
        carry, ys = jax.lax.scan(call.body, init, xs, length=size, reverse=reverse, unroll=unroll)
        return call.finish(carry, ys)

    return wrapper
