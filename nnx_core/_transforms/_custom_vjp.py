"""``custom_vjp`` over functions that take Modules.

The function JAX sees takes the arguments with every Module replaced by the values of its
differentiated Variables (as in ``grad``), plus the values of the other Variables as one last
argument (cotangent zero), and returns the user's output plus the values of all the state after
the call, so state changes reach the caller and their cotangents reach ``bwd``. Residuals may
hold Modules: they travel as their values and are rebuilt for ``bwd``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from .._filters import to_predicate
from .._graph import Plan, unflatten
from .._state import State, format_path
from .._variables import Variable
from ._autodiff import DiffArgs, DiffState, _all_inexact
from ._lift import OutInfo, apply, collect, extract, is_graph_root, rebuild

_DYNAMIC = (jax.Array, np.ndarray, jax.core.Tracer)


class _Residual:
    """Residuals with graph nodes and non-array leaves turned into static data + arrays."""

    def __init__(self, res: Any):
        leaves, self.treedef = jax.tree_util.tree_flatten(res, is_leaf=is_graph_root)
        roots = tuple(x for x in leaves if is_graph_root(x))
        self.plan = Plan(roots)
        self.kinds = [
            "root" if is_graph_root(x) else "dyn" if isinstance(x, _DYNAMIC) else "static"
            for x in leaves
        ]
        self.static = [x for x, k in zip(leaves, self.kinds) if k == "static"]
        self.arrays = [x for x, k in zip(leaves, self.kinds) if k == "dyn"]
        self.values = [
            v._value if isinstance(v, Variable) else v for v in self.plan.current_leaves()
        ]

    def rebuild(self, arrays: Sequence[Any], values: Sequence[Any]) -> Any:
        roots = unflatten(self.plan.graphdef, list(values)) if self.plan.roots else ()
        roots = roots if len(self.plan.roots) != 1 else (roots,)
        it_root, it_dyn, it_static = iter(roots), iter(arrays), iter(self.static)
        leaves = [
            next(it_root) if k == "root" else next(it_dyn) if k == "dyn" else next(it_static)
            for k in self.kinds
        ]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


class CustomVjp:
    """The callable returned by :func:`custom_vjp`; define its rule with :meth:`defvjp`."""

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: tuple[int | DiffState, ...]):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self.nondiff = tuple(n for n in nondiff_argnums if not isinstance(n, DiffState))
        self.filters = {d.argnum: d.filter for d in nondiff_argnums if isinstance(d, DiffState)}
        for n in nondiff_argnums:
            if not isinstance(n, (int, DiffState)) or isinstance(n, bool):
                raise TypeError(
                    f"custom_vjp: nondiff_argnums entries are ints or DiffState, got {n!r}."
                )
        if len(set(self.nondiff) | set(self.filters)) != len(nondiff_argnums):
            raise ValueError(
                f"custom_vjp: an argument appears twice in nondiff_argnums {nondiff_argnums!r}."
            )

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Set the rule: ``fwd(*args) -> (out, residuals)`` and
        ``bwd(*nondiff_args, residuals, (input_updates_g, out_g)) -> tangents``."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fwd is None or self.bwd is None:
            raise ValueError(
                f"custom_vjp: {getattr(self.fun, '__name__', 'the function')} has no "
                "rule yet; call .defvjp(fwd, bwd) before calling it."
            )
        if kwargs:
            bound = inspect.signature(self.fun).bind(*args, **kwargs)
            args, kwargs = bound.args, bound.kwargs
            if kwargs:
                raise TypeError(
                    f"custom_vjp: keyword-only arguments {sorted(kwargs)} are not "
                    "supported; pass them positionally."
                )
        return _CustomVjpCall(self, args).run()


class _CustomVjpCall:
    """One call: the differentiated / other state, the JAX custom_vjp, and the write-back."""

    def __init__(self, cv: CustomVjp, args: tuple[Any, ...]):
        self.cv, self.args = cv, args
        n = len(args)
        for i in (*cv.nondiff, *cv.filters):
            if not -n <= i < n:
                raise ValueError(
                    f"custom_vjp: nondiff_argnums names argument {i}, but the "
                    f"function was called with {n} argument(s)."
                )
        self.nondiff = sorted({i % n for i in cv.nondiff})
        filters = {i % n: f for i, f in cv.filters.items()}
        for i in self.nondiff:
            if any(map(is_graph_root, jax.tree_util.tree_leaves(args[i], is_leaf=is_graph_root))):
                raise TypeError(
                    f"custom_vjp: argument {i} holds a Module but is in nondiff_argnums; a "
                    f"Module's state is chosen with DiffState({i}, filter) instead (e.g. "
                    f"DiffState({i}, nnx.Nothing) to differentiate none of it)."
                )
        self.diff_argnums = [i for i in range(n) if i not in self.nondiff]
        call = extract(args, {})
        self.plan = Plan(call.roots)
        sel = [
            (i, None if i not in filters else _inexact_and(filters[i]), i in filters)
            for i in self.diff_argnums
        ]
        self.diff = DiffArgs("custom_vjp", call, self.plan, args, sel)
        diff_idx = {i for _, per_root, _ in self.diff.slots for idx in per_root for i in idx}
        self.rest_idx = [i for i in range(len(self.diff.values)) if i not in diff_idx]
        self.box: list[OutInfo] = []
        self.residual: list[_Residual] = []

    def _jax_args(self) -> list[Any]:
        trees = iter(self.diff.trees())
        jargs = [self.args[i] if i in self.nondiff else next(trees) for i in range(len(self.args))]
        return [*jargs, [self.diff.values[i] for i in self.rest_idx]]

    def _enter(
        self, jargs: Sequence[Any]
    ) -> tuple[tuple[Any, ...], Any, dict[int, Any], list[Any]]:
        trees = [jargs[i] for i in self.diff_argnums]
        full, args = self.diff.unpack(trees)
        for i, v in zip(self.rest_idx, jargs[-1]):
            full[i] = v
        args = tuple(jargs[i] if i in self.nondiff else args[i] for i in range(len(self.args)))
        inner = extract(args, {})
        a, _, roots, objs = rebuild(
            self.plan.graphdef, full, inner.treedef, inner.positions, inner.others
        )
        return a, roots, objs, full

    def _leave(self, out: Any, roots: Any, objs: dict[int, Any], full: list[Any]) -> Any:
        if any(map(is_graph_root, jax.tree_util.tree_leaves(out, is_leaf=is_graph_root))):
            raise TypeError(
                "custom_vjp: the function returned a Module or Variable; return "
                "arrays (state changes reach the caller's objects anyway)."
            )
        info, values, out_others = collect(
            self.plan.graphdef, full, roots, objs, out, return_all=True
        )
        if not info.same:
            raise ValueError(
                "custom_vjp: the function changed the structure of a Module "
                "argument; inside custom_vjp only values may change."
            )
        self.box.append(info)
        return out_others, values

    def primal(self, *jargs: Any) -> Any:
        a, roots, objs, full = self._enter(jargs)
        return self._leave(self.cv.fun(*a), roots, objs, full)

    def forward(self, *jargs: Any) -> Any:
        a, roots, objs, full = self._enter(jargs)
        res = self.cv.fwd(*a)  # type: ignore[misc]
        if not (isinstance(res, tuple) and len(res) == 2):
            raise TypeError(
                f"custom_vjp: fwd must return (output, residuals), got {type(res).__name__}."
            )
        out = self._leave(res[0], roots, objs, full)
        residual = _Residual(res[1])
        self.residual.append(residual)
        return out, (residual.arrays, residual.values)

    def backward(self, *bargs: Any) -> tuple[Any, ...]:
        *nondiff_args, (arrays, values), (g_out_others, g_state) = bargs
        residual = self.residual[-1].rebuild(arrays, values)
        info = self.box[-1]
        out_g = jax.tree_util.tree_unflatten(info.out_treedef, list(g_out_others))
        tangents = self.cv.bwd(*nondiff_args, residual, (self._updates_g(g_state), out_g))  # type: ignore[misc]
        n_diff = len(self.diff_argnums)
        if not isinstance(tangents, (tuple, list)) or len(tangents) != n_diff:
            raise TypeError(
                f"custom_vjp: bwd must return a tuple with one tangent per differentiated "
                f"argument ({n_diff}: arguments {self.diff_argnums}), got {_describe(tangents)}."
            )
        out: list[Any] = []
        it = iter(tangents)
        for i in range(len(self.args)):
            if i not in self.nondiff:
                out.append(self._tangent_tree(i, next(it)))
        return (*out, None)

    def _updates_g(self, g_state: Sequence[Any]) -> tuple[Any, ...]:
        """Per differentiated argument: its tree with a State of the cotangents of the state
        each Module holds after the call (floating-point Variables), None elsewhere."""
        leaves = self.plan.current_leaves()
        paths = self.plan.graphdef.paths
        states = []
        for start, stop in self.plan.bounds:
            states.append(
                State.from_flat_state(
                    (
                        paths[k],
                        leaves[k].replace(g_state[k])
                        if isinstance(leaves[k], Variable)
                        else g_state[k],
                    )
                    for k in range(start, stop)
                    if _all_inexact(paths[k], leaves[k])
                )
            )
        it = iter(states)
        return tuple(
            jax.tree_util.tree_map(
                lambda x: next(it) if is_graph_root(x) else None,
                self.args[i],
                is_leaf=is_graph_root,
            )
            for i in self.diff_argnums
        )

    def _tangent_tree(self, argnum: int, tangent: Any) -> Any:
        slot = self.diff_argnums.index(argnum)
        _, per_root, treedef = self.diff.slots[slot]
        paths = self.plan.graphdef.paths
        orig = jax.tree_util.tree_leaves(self.args[argnum], is_leaf=is_graph_root)
        try:
            leaves = treedef.flatten_up_to(tangent)
            if any(
                not is_graph_root(o)
                and t is not None
                and not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(t))
                for o, t in zip(orig, leaves)
            ):
                raise ValueError
        except (ValueError, TypeError):
            raise TypeError(
                f"custom_vjp: the tangent bwd returned for argument {argnum} does not "
                f"have its structure (a State in place of each Module), got "
                f"{_describe(tangent)}."
            ) from None
        it_roots = iter(per_root)
        converted = []
        for o, t in zip(orig, leaves):
            if not is_graph_root(o):
                converted.append(t)
                continue
            idx = next(it_roots)
            flat = dict(t.flat_state()) if isinstance(t, State) else None
            want = {paths[i] for i in idx}
            if flat is None or set(flat) != want:
                got = sorted(map(format_path, flat)) if flat is not None else _describe(t)
                raise TypeError(
                    f"custom_vjp: bwd must return, for the Module in argument {argnum}, a State "
                    f"with exactly its differentiated Variables {sorted(map(format_path, want))}, "
                    f"got {got}."
                )
            converted.append([_value(flat[paths[i]]) for i in idx])
        return jax.tree_util.tree_unflatten(treedef, converted)

    def run(self) -> Any:
        fn = jax.custom_vjp(self.primal, nondiff_argnums=tuple(self.nondiff))
        fn.defvjp(self.forward, self.backward)
        out_others, values = fn(*self._jax_args())
        return apply(self.box[-1], self.plan, values, out_others)


def _inexact_and(filt: Any) -> Callable[[Any, Any], bool]:
    pred = to_predicate(filt)
    return lambda path, leaf: pred(path, leaf) and _all_inexact(path, leaf)


def _value(x: Any) -> Any:
    return x._value if isinstance(x, Variable) else x


def _describe(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return type(x).__name__


def custom_vjp(
    fun: Callable[..., Any] | None = None,
    *,
    nondiff_argnums: tuple[int | DiffState, ...] = (),
) -> Any:
    """``jax.custom_vjp`` for functions that take Modules, with flax.nnx's rule signature.

    Define the rule with ``f.defvjp(fwd, bwd)``. ``fwd(*args)`` returns ``(out, residuals)``
    (residuals may hold Modules). ``bwd(*nondiff_args, residuals, (input_updates_g, out_g))``
    gets the cotangent of the output and, per differentiated argument, the cotangents of the
    state each Module holds after the call (a :class:`State`; ``None`` for other arguments), and
    returns one tangent per differentiated argument: a State with exactly the differentiated
    Variables for a Module (by default all its floating-point Variables; a
    :class:`DiffState` in ``nondiff_argnums`` picks some), an array for an array. Integers in
    ``nondiff_argnums`` are passed to ``bwd`` first, as in JAX. State changes made by the
    function reach the caller's objects.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Foo(nnx.Module):
        ...     def __init__(self): self.x = nnx.Param(jnp.array(1.0)); self.y = nnx.Param(jnp.array(2.0))
        >>> @nnx.custom_vjp
        ... def f(m):
        ...     return jnp.sin(m.x.value) * m.y.value
        >>> def f_fwd(m):
        ...     return f(m), (jnp.cos(m.x.value), jnp.sin(m.x.value), m)
        >>> def f_bwd(res, g):
        ...     (m_updates_g,), out_g = g
        ...     cos_x, sin_x, m = res
        ...     m_g = jax.tree.map(lambda v: v, m_updates_g)
        ...     m_g["x"].value = cos_x * out_g * m.y.value
        ...     m_g["y"].value = sin_x * out_g
        ...     return (m_g,)
        >>> f.defvjp(f_fwd, f_bwd)
        >>> g = nnx.grad(f)(Foo())
        >>> round(float(g["x"].value), 4), round(float(g["y"].value), 4)
        (1.0806, 0.8415)

    Raises:
        TypeError: a bad ``nondiff_argnums`` entry or one that holds a Module, keyword-only
            arguments, a function returning a Module, ``fwd``/``bwd`` returning the wrong
            structure.
        ValueError: the rule was not defined, an argument repeated in ``nondiff_argnums``, or
            the function changed the structure of a Module argument.
    """
    if fun is None:
        return functools.partial(custom_vjp, nondiff_argnums=nondiff_argnums)
    return CustomVjp(fun, tuple(nondiff_argnums))
