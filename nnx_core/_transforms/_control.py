"""Control flow over Modules: ``cond``, ``switch``, ``fori_loop`` and ``while_loop``.

Branches and loop bodies run on fresh objects around the traced state, as in every lift; the
state they change comes out as part of the result (all of it, so every branch and every
iteration has the same outputs) and is written back to the caller's objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from .._graph import Plan
from .._state import format_path
from ._lift import OutInfo, apply, extract, input_values, run_pure


def _structure_error(name: str) -> ValueError:
    return ValueError(
        f"{name}: the function changed the structure of a Module argument or returned a "
        "different structure; inside control flow only values may change."
    )


def _branch_call(
    name: str,
    pred_or_index: Any,
    branches: Sequence[Callable[..., Any]],
    operands: tuple[Any, ...],
    lax_fn: Callable[..., Any],
) -> Any:
    call = extract(operands, {})
    plan = Plan(call.roots)
    infos: list[OutInfo] = []

    def branch(fn: Callable[..., Any]) -> Callable[..., Any]:
        def pure(values: list[Any], others: list[Any]) -> Any:
            info, out_values, out_others = run_pure(
                fn, plan.graphdef, values, call.treedef, call.positions, others, return_all=True
            )
            if not info.same or (infos and infos[0].out_treedef != info.out_treedef):
                raise _structure_error(name)
            infos.append(info)
            return out_values, out_others

        return pure

    out_values, out_others = lax_fn(
        pred_or_index, [branch(b) for b in branches], input_values(plan), call.others
    )
    return apply(infos[-1], plan, out_values, out_others)


def cond(
    pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any
) -> Any:
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
    return _branch_call(
        "cond",
        pred,
        (true_fun, false_fun),
        operands,
        lambda p, fns, *ops: jax.lax.cond(p, fns[0], fns[1], *ops),
    )


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """``jax.lax.switch`` where the operands may be Modules: run ``branches[index]``.

    As in JAX, ``index`` is clamped to ``[0, len(branches) - 1]``. Every branch may update the
    state of the operands; the branches must return the same structure.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class C(nnx.Module):
        ...     def __init__(self): self.n = nnx.BatchStat(jnp.array(10))
        >>> def read(c): return c.n.value
        >>> def inc(c): c.n.value += 1; return c.n.value
        >>> def dbl(c): c.n.value *= 2; return c.n.value
        >>> c = C(); [int(nnx.switch(i, [read, inc, dbl], c)) for i in (1, 2, 0, 7)], int(c.n.value)
        ([11, 22, 22, 44], 44)

    Raises:
        ValueError: no branches, or a branch changed the structure of an operand.
    """
    branches = list(branches)
    if not branches:
        raise ValueError("switch: branches is empty; give at least one function.")
    return _branch_call(
        "switch", index, branches, operands, lambda i, fns, *ops: jax.lax.switch(i, fns, *ops)
    )


def fori_loop(
    lower: int,
    upper: int,
    body_fun: Callable[[Any, Any], Any],
    init_val: Any,
    *,
    unroll: int | bool | None = None,
) -> Any:
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
            lambda v: body_fun(i, v),
            plan.graphdef,
            values,
            call.treedef,
            call.positions,
            others,
            return_all=True,
        )
        if not info.same or len(out_others) != len(others):
            raise _structure_error("fori_loop")
        infos.append(info)
        return out_values, out_others

    out_values, out_others = jax.lax.fori_loop(
        lower, upper, body, (input_values(plan), call.others), unroll=unroll
    )
    if not infos:  # zero iterations: the loop value is returned unchanged
        return init_val
    return apply(infos[-1], plan, out_values, out_others)


def while_loop(
    cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any
) -> Any:
    """``jax.lax.while_loop`` whose loop value may contain Modules (their state is carried).

    ``body_fun`` may change the state of the Modules in the loop value; ``cond_fun`` only reads
    it (a change there would be lost, so it is an error).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class C(nnx.Module):
        ...     def __init__(self): self.n = nnx.BatchStat(jnp.array(1))
        >>> def double(c):
        ...     c.n.value = c.n.value * 2
        ...     return c
        >>> c = C(); out = nnx.while_loop(lambda c: c.n.value < 100, double, c)
        >>> out is c, int(c.n.value)
        (True, 128)

    Raises:
        ValueError: ``body_fun`` changed the structure of the loop value, or ``cond_fun``
            changed state.
    """
    call = extract((init_val,), {})
    plan = Plan(call.roots)
    infos: list[OutInfo] = []

    def cond(carry: Any) -> Any:
        values, others = carry
        info, changed, out_others = run_pure(
            cond_fun, plan.graphdef, values, call.treedef, call.positions, others
        )
        if not info.same or info.changed:
            paths = [format_path(plan.graphdef.paths[i]) for i in info.changed]
            raise ValueError(
                "while_loop: cond_fun changed the state of the loop value "
                f"({', '.join(paths) or 'its structure'}); the condition may only read it. "
                "Make the change in body_fun."
            )
        return jax.tree_util.tree_unflatten(info.out_treedef, out_others)

    def body(carry: Any) -> Any:
        values, others = carry
        info, out_values, out_others = run_pure(
            body_fun, plan.graphdef, values, call.treedef, call.positions, others, return_all=True
        )
        if not info.same or len(out_others) != len(others):
            raise _structure_error("while_loop")
        infos.append(info)
        return out_values, out_others

    out_values, out_others = jax.lax.while_loop(cond, body, (input_values(plan), call.others))
    return apply(infos[-1], plan, out_values, out_others)
