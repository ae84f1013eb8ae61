"""``jit``: jax.jit over functions that take and return Modules, with a cached fast path."""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from .._graph import GraphDef, Plan
from .._state import State
from .._variables import Variable
from . import _donation
from ._inflight import wait_for_previous
from ._lift import Call, OutInfo, PlanCache, apply, extract, input_values, is_graph_root, run_pure


def _as_tuple(x: int | Sequence[int] | None) -> tuple[int, ...]:
    if x is None:
        return ()
    return (x,) if isinstance(x, int) else tuple(x)


class _Compiled:
    """One compiled function per static key, plus what its trace learned about the outputs.

    With ``layout`` (donation by default) ``fn`` takes ``(donated, kept, others)``; without it,
    ``(values, others)``.
    """

    __slots__ = ("fn", "info", "layout")

    def __init__(self, fn: Any):  # a jax.jit-wrapped function
        self.fn = fn
        self.info: OutInfo | None = None
        self.layout: _donation.Layout | None = None


@functools.cache
def _array_type() -> type:
    """jax's concrete Array class, found on first use: making an array when nnx_core is
    imported would start the backend (and its compiler threads) in every importing process.
    A transfer, not an operation: ``jnp.zeros`` would compile a program in the first call."""
    return type(jax.device_put(np.zeros((), np.float32)))


class _Repeat:
    """The last call's cut, reused while the same roots come back in the same positions with
    plain arrays elsewhere: the call then skips extracting, plan lookup and cache keys.

    It holds its Plan weakly (Plans live on the model, and a jitted function must not keep a
    dropped model alive).
    """

    __slots__ = ("n", "positions", "others", "plan", "compiled", "array_type")

    def __init__(self, n: int, positions: tuple[int, ...], plan: Plan, compiled: _Compiled):
        self.n = n
        self.positions = positions
        self.others = tuple(i for i in range(n) if i not in positions)
        self.plan = weakref.ref(plan)
        self.compiled = compiled
        self.array_type = _array_type()

    @classmethod
    def of(
        cls, args: tuple[Any, ...], call: Call, plan: Plan, compiled: _Compiled
    ) -> _Repeat | None:
        n = len(args)
        positions = tuple(i for i, a in enumerate(args) if is_graph_root(a))
        array_type = _array_type()
        if len(positions) != len(call.roots) or not all(
            type(args[i]) is array_type for i in range(n) if i not in positions
        ):
            return None
        return cls(n, positions, plan, compiled)

    def match(self, args: tuple[Any, ...]) -> tuple[Plan, list[Any]] | None:
        plan = self.plan()
        if plan is None or len(args) != self.n:
            return None
        get = args.__getitem__
        if not all(map(operator.is_, map(get, self.positions), plan.roots)) or not plan.valid():
            return None
        others = list(map(get, self.others))
        array_type = self.array_type
        if not all(type(a) is array_type for a in others):
            return None
        return plan, others


class JitWrapped:
    """The callable returned by :func:`jit`."""

    def __init__(
        self,
        fun: Callable[..., Any],
        *,
        static_argnums: tuple[int, ...],
        static_argnames: tuple[str, ...],
        donate_argnums: tuple[int, ...] | None,
        in_shardings: Any,
        out_shardings: Any,
        jit_kwargs: dict[str, Any],
    ):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.static_argnums = static_argnums
        self.static_argnames = static_argnames
        self.donate_argnums = donate_argnums
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self.jit_kwargs = jit_kwargs
        self._plans = PlanCache()
        self._compiled: dict[Any, _Compiled] = {}
        self._repeat: _Repeat | None = None

    def _split_static(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        n = len(args)
        nums = tuple(i if i >= 0 else n + i for i in self.static_argnums)
        static_pos = tuple((i, args[i]) for i in nums if i < n)
        static_kw = tuple((k, kwargs[k]) for k in self.static_argnames if k in kwargs)
        return static_pos, static_kw

    def _prepare(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_Compiled, Call, Plan]:
        """The compiled entry (created on first use), the cut arguments and their Plan."""
        static: tuple[Any, ...] = ()
        orig_args = args
        if self.static_argnums or self.static_argnames:
            static_pos, static_kw = self._split_static(args, kwargs)
            drop = {i for i, _ in static_pos}
            args = tuple(a for i, a in enumerate(args) if i not in drop)
            kwargs = {k: v for k, v in kwargs.items() if k not in dict(static_kw)}
            static = (static_pos, static_kw)
        call = extract(args, kwargs)
        plan = self._plans.get(call.roots)
        key = (plan.graphdef, call.treedef, call.positions, static)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compile(key, call, orig_args, plan)
        return compiled, call, plan

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        repeat = self._repeat
        if repeat is not None and not kwargs:  # the same roots as last time?
            found = repeat.match(args)
            if found is not None:
                plan, others = found
                compiled = repeat.compiled
                assert compiled.info is not None and compiled.layout is not None
                return _donation.call(compiled.fn, compiled.layout, compiled.info, plan, others)
        compiled, call, plan = self._prepare(args, kwargs)
        layout = compiled.layout
        if layout is not None and not kwargs and not (self.static_argnums or self.static_argnames):
            self._repeat = _Repeat.of(args, call, plan, compiled)
        if layout is not None:
            assert compiled.info is not None  # learned before the layout
            return _donation.call(compiled.fn, layout, compiled.info, plan, call.others)
        inputs = input_values(plan)
        wait_for_previous(inputs)  # several CPU devices: one step in flight (see _inflight)
        values, out_others = compiled.fn(inputs, call.others)
        assert compiled.info is not None  # set by the trace
        return apply(compiled.info, plan, values, out_others)

    def lower(self, *args: Any, **kwargs: Any) -> jax.stages.Lowered:
        """Lower the step for these arguments without running it (jax's ahead-of-time API).

        ``.compile()`` on the result gives the executable the call would run, so its
        ``memory_analysis()`` and ``cost_analysis()`` describe the real step. Nothing is
        written back to the arguments.

        Example:
            >>> import jax.numpy as jnp
            >>> import nnx_core as nnx
            >>> class M(nnx.Module):
            ...     def __init__(self): self.w = nnx.Param(jnp.ones(3))
            >>> f = nnx.jit(lambda m, x: m.w.value * x)
            >>> stats = f.lower(M(), jnp.ones(3)).compile().memory_analysis()
            >>> stats.output_size_in_bytes
            12
        """
        compiled, call, plan = self._prepare(args, kwargs)
        layout = compiled.layout
        if layout is None:
            return compiled.fn.lower(input_values(plan), call.others)
        values = [v._raw_value if isinstance(v, Variable) else v for v in plan.current_leaves()]
        return compiled.fn.lower(
            [values[i] for i in layout.donated], [values[i] for i in layout.kept], call.others
        )

    def _compile(self, key: Any, call: Call, args: tuple[Any, ...], plan: Plan) -> _Compiled:
        static = key[3]
        fun = self.fun

        def call_fun(*a: Any, **kw: Any) -> Any:
            if static:
                static_pos, static_kw = static
                full = list(a)
                for i, v in static_pos:
                    full.insert(i, v)
                kw = {**kw, **dict(static_kw)}
                a = tuple(full)
            return fun(*a, **kw)

        functools.update_wrapper(call_fun, fun)
        kwargs = dict(self.jit_kwargs)
        if self.out_shardings is not None:
            kwargs["out_shardings"] = self.out_shardings
        shardings = None
        if self.in_shardings is not None:
            shardings = _leaf_shardings(self.in_shardings, args, self.static_argnums, call, plan)
        if self.donate_argnums is None:
            compiled = self._compile_donating(key, call, plan, call_fun, kwargs, shardings)
        else:
            compiled = self._compile_as_asked(key, args, call_fun, kwargs, shardings)
        self._compiled[key] = compiled
        return compiled

    def _compile_as_asked(
        self,
        key: Any,
        args: tuple[Any, ...],
        call_fun: Callable[..., Any],
        kwargs: dict[str, Any],
        shardings: tuple[list[Any], list[Any]] | None,
    ) -> _Compiled:
        """``donate_argnums`` given: donate what it names (every state buffer of the graph
        arguments if it names one of them), without checks; ``()`` donates nothing."""
        graphdef: GraphDef = key[0]
        treedef, positions = key[1], key[2]
        compiled = _Compiled(lambda *_: None)
        assert self.donate_argnums is not None
        donated = [args[i] for i in self.donate_argnums if -len(args) <= i < len(args)]
        donate = tuple(
            i
            for i, wanted in enumerate(
                (
                    any(is_graph_root(a) for a in donated),
                    any(not is_graph_root(a) for a in donated),
                )
            )
            if wanted
        )

        def pure(in_values: list[Any], others: list[Any]) -> tuple[list[Any], list[Any]]:
            info, values, out_others = run_pure(
                call_fun,
                graphdef,
                in_values,
                treedef,
                positions,
                others,
                return_all=0 in donate,
            )
            if compiled.info is not None and compiled.info != info:
                raise ValueError(_donation._CHANGED_DIFFERENTLY)
            compiled.info = info
            return values, out_others

        if shardings is not None:
            kwargs = {**kwargs, "in_shardings": shardings}
        compiled.fn = jax.jit(pure, donate_argnums=donate, **kwargs)
        return compiled

    def _compile_donating(
        self,
        key: Any,
        call: Call,
        plan: Plan,
        call_fun: Callable[..., Any],
        kwargs: dict[str, Any],
        shardings: tuple[list[Any], list[Any]] | None,
    ) -> _Compiled:
        """Donation by default (see _donation): trace once, then donate what the step replaces."""
        graphdef: GraphDef = key[0]
        treedef, positions = key[1], key[2]
        leaves = plan.current_leaves()
        n = len(leaves)
        var_pos = tuple(i for i, v in enumerate(leaves) if isinstance(v, Variable))
        kept_pos = tuple(i for i in range(n) if not isinstance(leaves[i], Variable))
        values = [v._raw_value if isinstance(v, Variable) else v for v in leaves]
        learned = _donation.Learned()
        learning = _donation.learning_step(
            call_fun, graphdef, treedef, positions, n, var_pos, kept_pos, learned
        )

        def regroup(donated: Sequence[int], kept: Sequence[int]) -> dict[str, Any]:
            if shardings is None:
                return kwargs
            state, other = shardings
            return {
                **kwargs,
                "in_shardings": ([state[i] for i in donated], [state[i] for i in kept], other),
            }

        jitted = jax.jit(learning, donate_argnums=(0,), **regroup(var_pos, kept_pos))
        traced = jitted.trace(
            [values[i] for i in var_pos], [values[i] for i in kept_pos], call.others
        )
        layout = _donation.exact_layout(learned, var_pos, kept_pos)
        if layout is None:
            layout = _donation.refined_layout(learned, n, var_pos)
            refined = _donation.refined_step(
                traced, learning, layout, n, var_pos, kept_pos, learned
            )
            jitted = jax.jit(
                refined,
                donate_argnums=(0,) if layout.donated else (),
                **regroup(layout.donated, layout.kept),
            )
        assert learned.info is not None
        layout.learn_result(learned.info)
        compiled = _Compiled(jitted)
        compiled.info = learned.info
        compiled.layout = layout
        return compiled

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)


def _leaf_shardings(
    in_shardings: Any,
    args: tuple[Any, ...],
    static_argnums: tuple[int, ...],
    call: Call,
    plan: Plan,
) -> tuple[list[Any], list[Any]]:
    """Per-argument shardings expanded to the (state values, other leaves) of one call."""
    n = len(args)
    static = {i if i >= 0 else n + i for i in static_argnums}
    per_arg = list(in_shardings) if isinstance(in_shardings, (tuple, list)) else [in_shardings] * n
    if len(per_arg) != n:
        raise ValueError(
            f"jit: in_shardings has {len(per_arg)} entries but the function got {n} positional "
            "arguments; give one per argument (a State of shardings or one sharding for a Module)."
        )
    dynamic = [(a, s) for i, (a, s) in enumerate(zip(args, per_arg)) if i not in static]
    state_shardings: list[Any] = []
    paths = plan.graphdef.paths
    for root, (start, stop) in zip(plan.roots, plan.bounds):
        spec = next((s for a, s in dynamic if a is root), None)
        flat = dict(spec.flat_state()) if isinstance(spec, State) else None
        for i in range(start, stop):
            leaf = flat.get(paths[i]) if flat is not None else spec
            state_shardings.append(leaf.value if isinstance(leaf, Variable) else leaf)
    other_shardings: list[Any] = []
    for a, s in dynamic:
        if not is_graph_root(a):
            other_shardings += [s] * len(jax.tree_util.tree_leaves(a, is_leaf=is_graph_root))
    other_shardings += [None] * (len(call.others) - len(other_shardings))
    return state_shardings, other_shardings


def jit(
    fun: Callable[..., Any] | None = None,
    *,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    **jit_kwargs: Any,
) -> Any:
    """``jax.jit`` for functions that take and return Modules, Variables and Rngs.

    Modules may appear anywhere in the arguments; every state change made inside (parameters,
    BatchStats, Rng counts, sown Intermediates, new attributes) is written back to the caller's
    objects, and shared references stay shared. The structure of the arguments is flattened once
    and reused while it is unchanged, so a steady-state call costs little more than a plain
    ``jax.jit`` call on the arrays.

    Args:
        fun: the function; ``jit`` can also be used as ``@jit(static_argnums=...)``.
        static_argnums, static_argnames: hashable arguments that are compile-time constants.
        donate_argnums: by default (None) the buffers of the Variables that the function
            replaces are donated whenever nothing else can read them, so a train step updates
            its state in place (any other buffer is copied first; see
            docs/design/transforms.md). Naming arguments donates every state buffer of the graph
            arguments, and the named array arguments, without those checks: their old values
            must not be used after the call. ``()`` donates nothing.
        in_shardings: one entry per positional argument (or one for all): a ``Sharding``, or for
            a Module a State of shardings such as ``get_named_sharding(nnx.state(model), mesh)``.
        out_shardings: one ``Sharding`` for every output (state included), or None.
        **jit_kwargs: passed to ``jax.jit`` (e.g. ``keep_unused``, ``backend``).

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Counter(nnx.Module):
        ...     def __init__(self): self.n = nnx.BatchStat(jnp.array(0))
        >>> @nnx.jit
        ... def step(c, x):
        ...     c.n.value = c.n.value + x
        ...     return c.n.value * 10
        >>> c = Counter(); int(step(c, 2)), int(step(c, 3)), int(c.n.value)
        (20, 50, 5)
    """
    if fun is None:
        return lambda f: jit(
            f,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate_argnums=donate_argnums,
            in_shardings=in_shardings,
            out_shardings=out_shardings,
            **jit_kwargs,
        )
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames or ())
    return JitWrapped(
        fun,
        static_argnums=_as_tuple(static_argnums),
        static_argnames=names,
        donate_argnums=None if donate_argnums is None else _as_tuple(donate_argnums),
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        jit_kwargs=jit_kwargs,
    )
