"""``eval_shape``: run a function abstractly; Modules it returns hold ShapeDtypeStructs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from .._graph import Plan, unflatten
from ._lift import OutInfo, extract, input_values, run_pure


def eval_shape(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Like ``jax.eval_shape``, for functions that take or return Modules; nothing is computed.

    The arguments are not modified. Modules created by ``f`` come back with
    ``jax.ShapeDtypeStruct`` values, which is how a model's size is known without allocating it.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Big(nnx.Module):
        ...     def __init__(self, rngs): self.w = nnx.Param(jax.random.normal(rngs.params(), (4096, 4096)))
        >>> abstract = nnx.eval_shape(lambda: Big(nnx.Rngs(0)))
        >>> abstract.w.value
        ShapeDtypeStruct(shape=(4096, 4096), dtype=float32)
    """
    call = extract(args, kwargs)
    plan = Plan(call.roots)
    info_box: list[OutInfo] = []

    def pure(values: list[Any], others: list[Any]) -> Any:
        info, out_values, out_others = run_pure(
            f, plan.graphdef, values, call.treedef, call.positions, others, return_all=True
        )
        info_box.append(info)
        return out_values, out_others

    out_values, out_others = jax.eval_shape(pure, input_values(plan), call.others)
    info = info_box[-1]
    new_roots: tuple[Any, ...] = ()
    if not info.same and info.graphdef is not None:
        built = unflatten(info.graphdef, out_values)
        built = built if info.graphdef.spec[0] == "multi" else (built,)
        new_roots = built[info.n_roots :]
    leaves: list[Any] = list(out_others)
    for pos, (kind, idx) in zip(info.out_positions, info.out_nodes):
        leaves.insert(pos, plan.objs[idx] if kind == "in" else new_roots[idx])
    return jax.tree_util.tree_unflatten(info.out_treedef, leaves)
