"""Differentiation over functions that take Modules: ``grad``, ``value_and_grad``, ``vjp``,
``jvp`` and ``remat``, with :class:`DiffState` to pick what part of a Module is differentiated.

A differentiated argument becomes a *diff tree*: its pytree with every graph root replaced by
the list of values of the root's differentiated Variables. JAX differentiates the diff trees;
inside, the values are put back into the full state and the usual lift (rebuild, run, collect)
runs, so state changes reach the caller's objects. Gradients of a graph root come back as a
:class:`State` with the paths of those Variables.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from .._api import _build_state
from .._filters import Filter, to_predicate
from .._graph import Plan, is_node, plan_for
from .._state import State, format_path
from .._variables import Param, Variable
from ._lift import (
    Call,
    OutInfo,
    apply,
    collect,
    extract,
    input_values,
    is_graph_root,
    rebuild,
    run_pure,
)


@dataclass(frozen=True)
class DiffState:
    """Differentiate argument ``argnum`` only with respect to the Variables matching ``filter``.

    Used in ``argnums`` of :func:`grad`/:func:`value_and_grad` (and ``nondiff_argnums`` of
    :func:`custom_vjp`); a plain int differentiates the ``Param`` Variables (``wrt``).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self):
        ...         self.a = nnx.Param(jnp.array(2.0)); self.b = nnx.Param(jnp.array(3.0))
        >>> g = nnx.grad(lambda m: m.a.value * m.b.value, argnums=nnx.DiffState(0, nnx.PathContains("a")))(M())
        >>> list(g), float(g["a"].value)
        (['a'], 3.0)
    """

    argnum: int
    filter: Filter


# -- diff trees ----------------------------------------------------------------------------------
class DiffArgs:
    """The differentiated arguments of one call as diff trees, and how to read results back."""

    def __init__(
        self,
        name: str,
        call: Call,
        plan: Plan,
        args: tuple[Any, ...],
        selection: Sequence[tuple[int, Callable[[Any, Any], bool] | None, bool]],
    ):
        """``selection``: (argnum, Variable predicate or None for every float Variable, whether
        the argument must hold a Module) per differentiated argument."""
        self.name, self.call, self.plan, self.args = name, call, plan, args
        self.values = input_values(plan)
        offsets = [0]
        for a in args:
            offsets.append(offsets[-1] + len(jax.tree_util.tree_leaves(a, is_leaf=is_graph_root)))
        self.slots: list[tuple[int, list[list[int]], Any]] = []  # argnum, indices per root, treedef
        paths, leaves = plan.graphdef.paths, plan.current_leaves()
        for n, pred, strict in selection:
            roots = [r for r, p in enumerate(call.positions) if offsets[n] <= p < offsets[n + 1]]
            if strict and not roots:
                raise TypeError(
                    f"{name}: DiffState names argument {n} ({type(args[n]).__name__}), which "
                    f"holds no Module; use the plain argnum {n} for it."
                )
            per_root = []
            for r in roots:
                start, stop = plan.bounds[r]
                # a State, or a Variable in a plain pytree, is a pytree leaf to flax.nnx: all
                # its (float) values, unless a DiffState picks some
                root = plan.roots[r]
                plain = type(root) is State or isinstance(root, Variable)
                keep = _all_inexact if plain and not strict else pred
                # a Variable shared with an earlier root is that root's (Plans list it once)
                per_root.append(
                    [i for i in range(start, stop) if (keep or _all_inexact)(paths[i], leaves[i])]
                )
            treedef = jax.tree_util.tree_structure(args[n], is_leaf=is_graph_root)
            self.slots.append((n, per_root, treedef))

    def trees(self) -> list[Any]:
        """The diff tree of each differentiated argument (its primal values)."""
        return [
            self._tree(n, per_root, [[self.values[i] for i in idx] for idx in per_root])
            for n, per_root, _ in self.slots
        ]

    def _tree(self, n: int, per_root: list[list[int]], root_values: list[list[Any]]) -> Any:
        it = iter(root_values)
        return jax.tree_util.tree_map(
            lambda x: next(it) if is_graph_root(x) else x, self.args[n], is_leaf=is_graph_root
        )

    def unpack(self, trees: Sequence[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        """Inside: the full state values and the arguments, from (traced) diff trees."""
        full = list(self.values)
        args = list(self.args)
        for (n, per_root, treedef), tree in zip(self.slots, trees):
            leaves = treedef.flatten_up_to(tree)
            it_roots = iter(per_root)
            new_leaves = []
            for orig, leaf in zip(
                jax.tree_util.tree_leaves(self.args[n], is_leaf=is_graph_root), leaves
            ):
                if is_graph_root(orig):
                    for i, v in zip(next(it_roots), leaf):
                        full[i] = v
                    new_leaves.append(orig)
                else:
                    new_leaves.append(leaf)
            args[n] = jax.tree_util.tree_unflatten(treedef, new_leaves)
        return full, tuple(args)

    def results(self, trees: Sequence[Any]) -> list[Any]:
        """Outside: gradients / cotangents as the argument trees, graph roots as States."""
        out = []
        leaves = self.plan.current_leaves()
        for (n, per_root, treedef), tree in zip(self.slots, trees):
            it_roots = iter(per_root)
            converted = []
            for orig, leaf in zip(
                jax.tree_util.tree_leaves(self.args[n], is_leaf=is_graph_root),
                treedef.flatten_up_to(tree),
            ):
                if not is_graph_root(orig):
                    converted.append(leaf)
                    continue
                idx = next(it_roots)
                g = list(leaves)
                for i, v in zip(idx, leaf):
                    g[i] = leaves[i].replace(v) if isinstance(leaves[i], Variable) else v
                if isinstance(orig, Variable):  # a bare Variable: its gradient, of its kind
                    converted.append(g[idx[0]] if idx else State({}))
                    continue
                converted.append(_build_state(self.plan, idx, g) if idx else State({}))
            out.append(jax.tree_util.tree_unflatten(treedef, converted))
        return out


def _all_inexact(path: Any, leaf: Any) -> bool:
    value = leaf._value if isinstance(leaf, Variable) else leaf
    return bool(jnp.issubdtype(jnp.result_type(value), jnp.inexact))


def _run(
    name: str,
    f: Callable[..., Any],
    diff: DiffArgs,
    trees: Sequence[Any],
    *,
    kwargs: dict[str, Any],
    box: list[OutInfo],
    has_aux: bool,
) -> Any:
    """Inside the JAX transform: run ``f`` on the rebuilt arguments; (out, (state, aux leaves))."""
    full, args = diff.unpack(trees)
    inner = extract(args, kwargs)
    a, kw, roots, objs = rebuild(
        diff.plan.graphdef, full, inner.treedef, inner.positions, inner.others
    )
    res = f(*a, **kw)
    if has_aux:
        if not (isinstance(res, tuple) and len(res) == 2):
            what = "loss" if name == "grad" else "output"
            raise TypeError(
                f"{name}(has_aux=True) expects the function to return ({what}, aux), "
                f"got {type(res).__name__}."
            )
        out, aux = res
    else:
        out, aux = res, None
    if any(map(is_graph_root, jax.tree_util.tree_leaves(out, is_leaf=is_graph_root))):
        raise TypeError(
            f"{name}: the differentiated output holds a Module or Variable; return "
            "arrays (state changes reach the caller's objects anyway)"
            + (", or put it in aux." if has_aux else ".")
        )
    info, values, aux_others = collect(diff.plan.graphdef, full, roots, objs, aux)
    box.append(info)
    return out, (values, aux_others)


# -- grad ----------------------------------------------------------------------------------------
def _selection(
    name: str, argnums: Sequence[int | DiffState], wrt: Filter, n_args: int
) -> list[tuple[int, Callable[[Any, Any], bool] | None, bool]]:
    sel: list[tuple[int, Callable[[Any, Any], bool] | None, bool]] = []
    seen: set[int] = set()
    for a in argnums:
        n, filt = (a.argnum, a.filter) if isinstance(a, DiffState) else (a, wrt)
        if not -n_args <= n < n_args:
            raise ValueError(
                f"{name}: argnums {tuple(argnums)} refers to argument {n}, but the "
                f"function was called with {n_args} positional argument(s)."
            )
        n %= n_args
        if n in seen:
            raise ValueError(f"{name}: argument {n} appears twice in argnums {tuple(argnums)}.")
        seen.add(n)
        sel.append((n, to_predicate(filt), isinstance(a, DiffState)))
    return sel


def _value_and_grad_call(
    f: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    argnums: Sequence[int | DiffState],
    has_aux: bool,
    wrt: Filter,
    jax_kwargs: dict[str, Any],
) -> tuple[Any, list[Any]]:
    call = extract(args, kwargs)
    plan = Plan(call.roots)
    diff = DiffArgs("grad", call, plan, args, _selection("grad", argnums, wrt, len(args)))
    box: list[OutInfo] = []

    def pure(*trees: Any) -> Any:
        return _run("grad", f, diff, trees, kwargs=kwargs, box=box, has_aux=has_aux)

    (loss, (values, aux_others)), grads = jax.value_and_grad(
        pure, argnums=tuple(range(len(diff.slots))), has_aux=True, **jax_kwargs
    )(*diff.trees())
    aux = apply(box[-1], plan, values, aux_others)
    return ((loss, aux) if has_aux else loss), diff.results(grads)


def _argnums(argnums: int | DiffState | Sequence[int | DiffState]) -> tuple[int | DiffState, ...]:
    return (argnums,) if isinstance(argnums, (int, DiffState)) else tuple(argnums)


def value_and_grad(
    f: Callable[..., Any] | None = None,
    *,
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
    has_aux: bool = False,
    wrt: Filter = Param,
    **jax_kwargs: Any,
) -> Any:
    """Like ``jax.value_and_grad``; a Module argument is differentiated w.r.t. its ``wrt`` Variables.

    The gradient of a Module argument is a :class:`State` with the same paths and kinds as
    ``nnx.state(model, wrt)``, so ``optimizer.update(model, grads)`` fits. A
    :class:`DiffState` in ``argnums`` picks another filter for one argument; an argument that
    is a pytree holding Modules gets the same pytree with a State per Module. State changes
    made by the function (BatchStats, Rng counts, Intermediates) reach the caller's objects.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array(3.0))
        >>> loss, grads = nnx.value_and_grad(lambda m, x: m.w.value * x ** 2)(Scale(), 2.0)
        >>> float(loss), float(grads["w"].value)
        (12.0, 4.0)

    Raises:
        ValueError: ``argnums`` names an argument that was not passed or one argument twice.
        TypeError: ``has_aux=True`` but the function does not return a pair; the output holds
            a Module; a DiffState names an argument that holds no Module.
    """
    if f is None:
        return functools.partial(
            value_and_grad, argnums=argnums, has_aux=has_aux, wrt=wrt, **jax_kwargs
        )
    nums = _argnums(argnums)
    single = isinstance(argnums, (int, DiffState))

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, grads = _value_and_grad_call(
            f, args, kwargs, argnums=nums, has_aux=has_aux, wrt=wrt, jax_kwargs=jax_kwargs
        )
        return value, grads[0] if single else tuple(grads)

    return wrapper


def grad(
    f: Callable[..., Any] | None = None,
    *,
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
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


# -- vjp / jvp -----------------------------------------------------------------------------------
def _every_argument(n: int) -> list[tuple[int, None, bool]]:
    return [(i, None, False) for i in range(n)]


def vjp(f: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """Like ``jax.vjp``, for functions that take Modules: ``(out, vjp_fn)`` (``aux`` last).

    Every floating-point Variable of a Module primal is differentiated (as in flax.nnx);
    ``vjp_fn(cotangent)`` returns one entry per primal, a :class:`State` with those Variables'
    paths for a Module. State changes made by ``f`` reach the caller's objects.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array(3.0))
        >>> out, vjp_fn = nnx.vjp(lambda m, x: m.w.value * x, Scale(), jnp.array(2.0))
        >>> g_m, g_x = vjp_fn(jnp.array(1.0))
        >>> float(out), float(g_m["w"].value), float(g_x)
        (6.0, 2.0, 3.0)

    Raises:
        TypeError: ``has_aux=True`` but ``f`` does not return a pair, or the differentiated
            output holds a Module.
    """
    call = extract(primals, {})
    plan = Plan(call.roots)
    diff = DiffArgs("vjp", call, plan, primals, _every_argument(len(primals)))
    box: list[OutInfo] = []

    def pure(*trees: Any) -> Any:
        return _run("vjp", f, diff, trees, kwargs={}, box=box, has_aux=has_aux)

    out, raw_vjp, (values, aux_others) = jax.vjp(pure, *diff.trees(), has_aux=True)
    aux = apply(box[-1], plan, values, aux_others)

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        return tuple(diff.results(raw_vjp(cotangent)))

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _tangent_tree(diff: DiffArgs, slot: int, tangent: Any) -> Any:
    """A tangent argument as a diff tree: a State (or same-structure Module) per Module."""
    n, per_root, treedef = diff.slots[slot]
    paths = diff.plan.graphdef.paths
    it_roots = iter(per_root)

    def convert(orig: Any, t: Any) -> Any:
        if not is_graph_root(orig):
            return t
        idx = next(it_roots)
        if isinstance(t, State) or isinstance(t, dict):
            flat = dict((t if isinstance(t, State) else State(t)).flat_state())
        elif is_node(t):
            tp = plan_for(t)
            flat = dict(zip(tp.graphdef.paths, tp.current_leaves()))
        else:
            raise TypeError(
                f"jvp: the tangent of argument {n} must be a State of its Module "
                f"(nnx.state(m) with tangent values), got {type(t).__name__}."
            )
        missing = [format_path(paths[i]) for i in idx if paths[i] not in flat]
        if missing:
            raise ValueError(
                f"jvp: the tangent of argument {n} has no value for "
                f"{', '.join(missing[:5])}; give one per floating-point Variable."
            )
        out = []
        for i in idx:
            v = flat[paths[i]]
            v = v._value if isinstance(v, Variable) else v
            if jnp.shape(v) != jnp.shape(diff.values[i]):
                raise ValueError(
                    f"jvp: the tangent of argument {n} at {format_path(paths[i])} "
                    f"has shape {jnp.shape(v)}, the primal {jnp.shape(diff.values[i])}."
                )
            out.append(v)
        return out

    try:
        leaves = treedef.flatten_up_to(tangent)
    except (ValueError, TypeError):
        raise ValueError(
            f"jvp: the tangent of argument {n} does not have the structure of the "
            "primal (a State in place of each Module)."
        ) from None
    orig = jax.tree_util.tree_leaves(diff.args[n], is_leaf=is_graph_root)
    return jax.tree_util.tree_unflatten(treedef, [convert(o, t) for o, t in zip(orig, leaves)])


def jvp(
    f: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], *, has_aux: bool = False
) -> Any:
    """Like ``jax.jvp``, for functions that take Modules: ``(out, tangent_out)`` (``aux`` last).

    The tangent of a Module primal is a :class:`State` of its floating-point Variables (e.g.
    ``jax.tree.map(jnp.ones_like, nnx.state(m))``) or a Module of the same structure holding
    the tangent values. State changes made by ``f`` reach the caller's objects.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.array(3.0))
        >>> m = Scale()
        >>> t_m = jax.tree.map(jnp.ones_like, nnx.state(m))
        >>> out, t_out = nnx.jvp(lambda m, x: m.w.value * x, (m, jnp.array(2.0)), (t_m, jnp.array(1.0)))
        >>> float(out), float(t_out)
        (6.0, 5.0)

    Raises:
        ValueError: ``primals`` and ``tangents`` differ in length or structure, or a tangent
            lacks a Variable or has the wrong shape.
        TypeError: a Module's tangent is not a State or Module, ``has_aux=True`` but ``f`` does
            not return a pair, or the differentiated output holds a Module.
    """
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(
            f"jvp: got {len(primals)} primals but {len(tangents)} tangents; give "
            "one tangent per primal."
        )
    call = extract(primals, {})
    plan = Plan(call.roots)
    diff = DiffArgs("jvp", call, plan, primals, _every_argument(len(primals)))
    box: list[OutInfo] = []

    def pure(*trees: Any) -> Any:
        return _run("jvp", f, diff, trees, kwargs={}, box=box, has_aux=has_aux)

    t_trees = tuple(_tangent_tree(diff, k, t) for k, t in enumerate(tangents))
    out, t_out, (values, aux_others) = jax.jvp(pure, tuple(diff.trees()), t_trees, has_aux=True)
    aux = apply(box[-1], plan, values, aux_others)
    return (out, t_out, aux) if has_aux else (out, t_out)


# -- remat ---------------------------------------------------------------------------------------
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
