"""``cond`` and ``fori_loop`` over Modules: control flow whose branches and bodies change state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from .._graph import Plan
from ._lift import OutInfo, apply, extract, input_values, run_pure


def _structure_error(name: str) -> ValueError:
    return ValueError(
        f"{name}: the function changed the structure of a Module argument or returned a "
        "different structure; inside control flow only values may change."
    )


def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
    """``jax.lax.cond`` where the operands may be Modules; either branch may update their state.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class C(nnx.Module):
        ...     def __init__(self): self.n = nnx.BatchStat(jnp.array(0))
        >>> def up(c): c.n.value += 1; return c.n.value
        >>> def down(c): c.n.value -= 1; return c.n.value
        >>> c = C(); int(nnx.cond(True, up, down, c)), int(nnx.cond(False, up, down, c))
        (1, 0)

    Raises:
        ValueError: a branch changed the structure of an operand.
    """
    call = extract(operands, {})
    plan = Plan(call.roots)
    infos: list[OutInfo] = []

    def branch(fn: Callable[..., Any]) -> Callable[..., Any]:
        def pure(values: list[Any], others: list[Any]) -> Any:
            info, out_values, out_others = run_pure(
                fn, plan.graphdef, values, call.treedef, call.positions, others, return_all=True
            )
            if not info.same:
                raise _structure_error("cond")
            infos.append(info)
            return out_values, out_others

        return pure

    out_values, out_others = jax.lax.cond(
        pred, branch(true_fun), branch(false_fun), input_values(plan), call.others
    )
    return apply(infos[-1], plan, out_values, out_others)


def fori_loop(lower: int, upper: int, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    """``jax.lax.fori_loop`` whose loop value may contain Modules (their state is carried).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class C(nnx.Module):
        ...     def __init__(self): self.n = nnx.BatchStat(jnp.array(0))
        >>> def body(i, c):
        ...     c.n.value += i
        ...     return c
        >>> c = C(); out = nnx.fori_loop(0, 5, body, c)
        >>> out is c, int(c.n.value)
        (True, 10)

    Raises:
        ValueError: the body changed the structure of the loop value.
    """
    call = extract((init_val,), {})
    plan = Plan(call.roots)
    infos: list[OutInfo] = []

    def body(i: Any, carry: Any) -> Any:
        values, others = carry
        info, out_values, out_others = run_pure(
            lambda v: body_fun(i, v), plan.graphdef, values, call.treedef, call.positions, others,
            return_all=True,
        )
        if not info.same or len(out_others) != len(others):
            raise _structure_error("fori_loop")
        infos.append(info)
        return out_values, out_others

    out_values, out_others = jax.lax.fori_loop(lower, upper, body, (input_values(plan), call.others))
    if not infos:  # zero iterations: the loop value is returned unchanged
        return init_val
    return apply(infos[-1], plan, out_values, out_others)
