"""``grad``, ``value_and_grad`` and ``remat`` over functions that take Modules."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from .._api import _build_state
from .._filters import Filter, to_predicate
from .._graph import Plan
from .._state import State
from .._variables import Param, Variable
from ._lift import OutInfo, apply, extract, input_values, run_pure, with_placeholders


def _argnums_tuple(argnums: int | Sequence[int]) -> tuple[int, ...]:
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def _diff_indices(plan: Plan, root_index: int, wrt: Filter) -> list[int]:
    pred = to_predicate(wrt)
    start, stop = plan.bounds[root_index]
    leaves = plan.current_leaves()
    paths = plan.graphdef.paths
    return [i for i in range(start, stop) if pred(paths[i], leaves[i])]


def _value_and_grad_call(
    f: Callable[..., Any], argnums: tuple[int, ...], has_aux: bool, wrt: Filter,
    jax_kwargs: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
) -> tuple[Any, tuple[Any, ...]]:
    for n in argnums:
        if not -len(args) <= n < len(args):
            raise ValueError(
                f"grad: argnums {argnums} refers to argument {n}, but the function was called "
                f"with {len(args)} positional argument(s)."
            )
    call = extract(args, kwargs)
    plan = Plan(call.roots)
    values = input_values(plan)
    # Per argnum: either a graph root (differentiate its `wrt` Variables) or a plain pytree.
    slots: list[tuple[str, Any]] = []
    for n in argnums:
        arg = args[n]
        root = next((r for r, x in enumerate(call.roots) if x is arg), None)
        if root is not None:
            slots.append(("graph", _diff_indices(plan, root, wrt)))
        else:
            slots.append(("tree", n))
    graph_idx = [i for kind, idx in slots if kind == "graph" for i in idx]
    tree_argnums = [n for kind, n in slots if kind == "tree"]
    info_box: list[OutInfo] = []

    def pure(diff_values: list[Any], tree_args: list[Any]) -> Any:
        full = list(values)
        for i, v in zip(graph_idx, diff_values):
            full[i] = v
        a = list(args)
        for n, v in zip(tree_argnums, tree_args):
            a[n] = v
        inner = extract(tuple(a), kwargs)
        info, out_values, out_others = run_pure(
            f, plan.graphdef, full, inner.treedef, inner.positions, inner.others
        )
        info_box.append(info)
        out = jax.tree_util.tree_unflatten(info.out_treedef, with_placeholders(info, out_others))
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TypeError(
                    "grad(has_aux=True) expects the function to return (loss, aux), got "
                    f"{type(out).__name__}."
                )
            loss = out[0]
        else:
            loss = out
        return loss, (out_values, out_others)

    diff_values = [values[i] for i in graph_idx]
    tree_values = [args[n] for n in tree_argnums]
    (loss, (out_values, out_others)), (g_graph, g_tree) = jax.value_and_grad(
        pure, argnums=(0, 1), has_aux=True, **jax_kwargs
    )(diff_values, tree_values)
    result = apply(info_box[-1], plan, out_values, out_others)
    grads: list[Any] = []
    it_graph = iter(g_graph)
    it_tree = iter(g_tree)
    for kind, idx in slots:
        if kind == "graph":
            leaves = plan.current_leaves()
            g_leaves = list(leaves)
            for i in idx:
                g = next(it_graph)
                g_leaves[i] = leaves[i].replace(g) if isinstance(leaves[i], Variable) else g
            grads.append(_build_state(plan, idx, g_leaves) if idx else State({}))
        else:
            grads.append(next(it_tree))
    value = result if has_aux else loss
    return value, tuple(grads)


def value_and_grad(
    f: Callable[..., Any] | None = None,
    *,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    wrt: Filter = Param,
    **jax_kwargs: Any,
) -> Any:
    """Like ``jax.value_and_grad``; a Module argument is differentiated w.r.t. its ``wrt`` Variables.

    The gradient of a Module argument is a :class:`State` with the same paths and kinds as
    ``nnx.state(model, wrt)``, so ``optimizer.update(model, grads)`` fits. State changes made by
    the function (BatchStats, Rng counts, Intermediates) reach the caller's objects.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array(3.0))
        >>> loss, grads = nnx.value_and_grad(lambda m, x: m.w.value * x ** 2)(Scale(), 2.0)
        >>> float(loss), float(grads["w"].value)
        (12.0, 4.0)

    Raises:
        ValueError: ``argnums`` names an argument that was not passed.
        TypeError: ``has_aux=True`` but the function does not return a pair.
    """
    if f is None:
        return functools.partial(value_and_grad, argnums=argnums, has_aux=has_aux, wrt=wrt, **jax_kwargs)
    nums = _argnums_tuple(argnums)
    single = isinstance(argnums, int)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, grads = _value_and_grad_call(f, nums, has_aux, wrt, jax_kwargs, args, kwargs)
        return value, grads[0] if single else grads

    return wrapper


def grad(
    f: Callable[..., Any] | None = None,
    *,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    wrt: Filter = Param,
    **jax_kwargs: Any,
) -> Any:
    """Like ``jax.grad``; see :func:`value_and_grad` for how Modules are differentiated.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array(3.0)); self.calls = nnx.BatchStat(jnp.array(0))
        >>> def loss(m, x):
        ...     m.calls.value += 1
        ...     return m.w.value * x
        >>> m = Scale(); g = nnx.grad(loss)(m, 2.0)
        >>> float(g["w"].value), list(g), int(m.calls.value)
        (2.0, ['w'], 1)
    """
    if f is None:
        return functools.partial(grad, argnums=argnums, has_aux=has_aux, wrt=wrt, **jax_kwargs)
    vg = value_and_grad(f, argnums=argnums, has_aux=has_aux, wrt=wrt, **jax_kwargs)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper


def remat(f: Callable[..., Any] | None = None, **checkpoint_kwargs: Any) -> Any:
    """``jax.checkpoint`` (rematerialisation) for functions that take Modules.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array(2.0))
        ...     def __call__(self, x): return jnp.sin(self.w.value * x)
        >>> f = nnx.remat(lambda m, x: m(x))
        >>> round(float(nnx.grad(lambda m: f(m, 1.0))(M())["w"].value), 4)
        -0.4161
    """
    if f is None:
        return functools.partial(remat, **checkpoint_kwargs)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = extract(args, kwargs)
        plan = Plan(call.roots)
        info_box: list[OutInfo] = []

        def pure(values: list[Any], others: list[Any]) -> Any:
            info, out_values, out_others = run_pure(
                f, plan.graphdef, values, call.treedef, call.positions, others
            )
            info_box.append(info)
            return out_values, out_others

        out_values, out_others = jax.checkpoint(pure, **checkpoint_kwargs)(
            input_values(plan), call.others
        )
        return apply(info_box[-1], plan, out_values, out_others)

    return wrapper
