"""``vmap`` and ``pmap`` over functions that take and return Modules, with per-filter axes.

The state of a Module argument is mapped per Variable: ``in_axes`` gives one axis for all of an
argument's Variables, or a :class:`StateAxes` mapping filters to axes, e.g.
``StateAxes({Param: 0, BatchStat: 0, ...: None})``. Rng streams passed unmapped are split per
example (per device in ``pmap``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax

from ._axes import Carry, StateAxes
from ._lift import is_graph_root
from ._mapped import MapBody, MappedCall

__all__ = ["Carry", "StateAxes", "vmap", "pmap"]


def _check_axis(name: str) -> Callable[[Any, str], None]:
    def check(spec: Any, where: str) -> None:
        if spec is not None and not (isinstance(spec, int) and not isinstance(spec, bool)):
            raise ValueError(
                f"{name}: {where} is {spec!r}; an axis is an int or None"
                + (" (Carry is for scan)." if spec is Carry else ".")
            )

    return check


def _run_mapped(jax_map: Callable[..., Any], body: MapBody, call: MappedCall) -> Any:
    try:
        grouped = jax_map(body)(tuple(call.values), tuple(call.others))
    except ValueError as e:
        if "but output was batched" not in str(e):
            raise
        changed = (
            ", ".join([*map(call.where_state, body.unmapped_changed), *body.unmapped_new]) or "none"
        )
        raise ValueError(
            f"{body.name}: an output with axis None differs per example. Unmapped Module state "
            f"set by the function: {changed}. Map that state (e.g. StateAxes({{BatchStat: 0, "
            "...: None})), reduce it over the axis (jax.lax.pmean with axis_name=...), or give "
            f"the output an axis in out_axes. JAX says: {str(e).splitlines()[0]}"
        ) from None
    return body.finish(call.plan, grouped, call.restore)


def vmap(
    f: Callable[..., Any] | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    spmd_axis_name: Hashable | tuple[Hashable, ...] | None = None,
) -> Any:
    """``jax.vmap`` for functions that take and return Modules.

    ``in_axes`` is a prefix tree of the positional arguments (one entry per argument, or one
    for all): an int, ``None`` (broadcast) or, for a Module, a :class:`StateAxes` giving an axis
    per Variable filter. Keyword arguments are mapped over axis 0. State changes are written
    back with the axes they came in with. A Module the function creates (e.g. a stack of layers
    built from a batch of keys or a split ``Rngs``) has its Variables stacked along
    ``out_axes`` (a StateAxes there gives per-filter axes); a Variable the function adds to a
    Module argument (a vmapped ``__init__``) takes that argument's ``in_axes`` entry. Rng
    streams of unmapped Modules give each example its own key.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> class Lin(nnx.Module):
        ...     def __init__(self, rngs): self.w = nnx.Param(jax.random.normal(rngs.params(), (3, 2)))
        ...     def __call__(self, x): return x @ self.w.value
        >>> stack = nnx.vmap(Lin)(nnx.Rngs(0).split(4))
        >>> stack.w.shape
        (4, 3, 2)
        >>> nnx.vmap(lambda m, x: m(x), in_axes=(0, None))(stack, jnp.ones(3)).shape
        (4, 2)
        >>> axes = nnx.StateAxes({nnx.Param: 1, ...: None})
        >>> nnx.vmap(lambda m: m.w.value.sum(), in_axes=axes)(stack).shape
        (3,)

    Raises:
        ValueError: ``in_axes``/``out_axes`` do not match the arguments/outputs, an axis is not
            an int or None, a mapped value lacks the axis, the sizes differ, nothing is
            mapped without ``axis_size``, or unmapped state (also state added to a Module
            given axis None) was set per example.
    """
    if f is None:
        return functools.partial(
            vmap,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_name=axis_name,
            axis_size=axis_size,
            spmd_axis_name=spmd_axis_name,
        )

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = MappedCall("vmap", args, kwargs, in_axes, kwargs_spec=0, check=_check_axis("vmap"))
        size = call.mapped_size(axis_size)
        call.split_unmapped_rngs(size)
        body = MapBody("vmap", f, call, out_axes)

        def jax_map(fn: Callable[..., Any]) -> Callable[..., Any]:
            return jax.vmap(
                fn,
                in_axes=(tuple(call.state_specs), tuple(call.other_specs)),
                out_axes=body.groups,
                axis_name=axis_name,
                axis_size=size,
                spmd_axis_name=spmd_axis_name,
            )

        return _run_mapped(jax_map, body, call)

    return wrapper


def _ints(x: int | Sequence[int]) -> tuple[int, ...]:
    return (x,) if isinstance(x, int) else tuple(x)


_PMAP_AXIS = "_nnx_core_pmap"  # the axis name when the user gives none (Rng keys need one)


class PmapWrapped:
    """The callable returned by :func:`pmap`: one ``jax.pmap`` per structure and axes."""

    def __init__(
        self,
        f: Callable[..., Any],
        *,
        in_axes: Any,
        out_axes: Any,
        static_broadcasted_argnums: tuple[int, ...],
        donate_argnums: tuple[int, ...],
        pmap_kwargs: dict[str, Any],
    ):
        functools.update_wrapper(self, f)
        self.f, self.in_axes, self.out_axes = f, in_axes, out_axes
        self.static = static_broadcasted_argnums
        self.donate = donate_argnums
        self.pmap_kwargs = pmap_kwargs
        self._compiled: dict[Any, tuple[Callable[..., Any], MapBody]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        n = len(args)
        static = {i % n: args[i % n] for i in self.static if -n <= i < n}
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        in_axes = self.in_axes
        if static and isinstance(in_axes, (tuple, list)) and len(in_axes) == n:
            in_axes = tuple(a for i, a in enumerate(in_axes) if i not in static)
        call = MappedCall(
            "pmap", dynamic, kwargs, in_axes, kwargs_spec=0, check=_check_axis("pmap")
        )
        size = call.mapped_size(self.pmap_kwargs.get("axis_size"))
        call.index_unmapped_rngs(size)
        donated = [args[i % n] for i in self.donate if -n <= i < n and i % n not in static]
        donate = tuple(
            k
            for k, wanted in enumerate(
                (any(is_graph_root(a) for a in donated), any(not is_graph_root(a) for a in donated))
            )
            if wanted
        )
        static_pos = tuple(sorted(static.items()))
        key = (
            call.plan.graphdef,
            call.treedef,
            tuple(call.positions),
            tuple(call.state_specs),
            tuple(call.other_specs),
            tuple(call.by_index),
            static_pos,
            donate,
        )
        entry = self._compiled.get(key)
        if entry is None:
            entry = self._compiled[key] = self._compile(call, static_pos, donate)
        fn, body = entry
        return _run_mapped(lambda _: fn, body, call)

    def _compile(
        self, call: MappedCall, static_pos: tuple[tuple[int, Any], ...], donate: tuple[int, ...]
    ) -> tuple[Callable[..., Any], MapBody]:
        f = self.f
        if static_pos:

            def f(*a: Any, **kw: Any) -> Any:
                full = list(a)
                for i, v in static_pos:
                    full.insert(i, v)
                return self.f(*full, **kw)

        kwargs = dict(self.pmap_kwargs)
        kwargs.setdefault("axis_name", _PMAP_AXIS)
        body = MapBody("pmap", f, call, self.out_axes, axis_name=kwargs["axis_name"])
        fn = jax.pmap(
            body,
            in_axes=(tuple(call.state_specs), tuple(call.other_specs)),
            out_axes=body.groups,
            donate_argnums=donate,
            **kwargs,
        )
        return fn, body


def pmap(
    f: Callable[..., Any] | None = None,
    *,
    axis_name: Hashable | None = None,
    in_axes: Any = 0,
    out_axes: Any = 0,
    static_broadcasted_argnums: int | Sequence[int] = (),
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    axis_size: int | None = None,
    donate_argnums: int | Sequence[int] = (),
) -> Any:
    """``jax.pmap`` for functions that take and return Modules: one example per device.

    ``in_axes``/``out_axes`` work as in :func:`vmap` (``StateAxes`` included); the mapped axis
    must have one entry per device. Unmapped Rng streams give each device its own key. Use it
    at the top level like ``jax.pmap``: one compiled function is kept per structure and axes.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> n = jax.local_device_count()
        >>> class Count(nnx.Module):
        ...     def __init__(self): self.n = nnx.BatchStat(jnp.zeros(n))
        >>> @nnx.pmap
        ... def step(c, x):
        ...     c.n.value = c.n.value + x
        ...     return c.n.value * 2
        >>> c = Count()
        >>> bool((step(c, jnp.ones(n)) == 2).all()), bool((c.n.value == 1).all())
        (True, True)

    Raises:
        ValueError: as :func:`vmap`, for the axes, sizes and structure.
    """
    if f is None:
        return functools.partial(
            pmap,
            axis_name=axis_name,
            in_axes=in_axes,
            out_axes=out_axes,
            static_broadcasted_argnums=static_broadcasted_argnums,
            devices=devices,
            backend=backend,
            axis_size=axis_size,
            donate_argnums=donate_argnums,
        )
    kwargs = {
        "axis_name": axis_name,
        "devices": devices,
        "backend": backend,
        "axis_size": axis_size,
    }
    return PmapWrapped(
        f,
        in_axes=in_axes,
        out_axes=out_axes,
        static_broadcasted_argnums=_ints(static_broadcasted_argnums),
        donate_argnums=_ints(donate_argnums),
        pmap_kwargs={k: v for k, v in kwargs.items() if v is not None},
    )
