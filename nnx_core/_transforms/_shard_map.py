"""``shard_map`` over functions that take and return Modules, with per-filter PartitionSpecs."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Set
from typing import Any

import jax
from jax.sharding import PartitionSpec

from .._state import State
from ._axes import StateSharding, is_spec_leaf
from ._mapped import MapBody, MappedCall


def _check_spec(spec: Any, where: str) -> None:
    if not isinstance(spec, PartitionSpec):
        raise ValueError(
            f"shard_map: {where} is {spec!r}; a spec is a PartitionSpec "
            "(P() for replicated) or, for a Module, a StateSharding."
        )


def _with_state_sharding(specs: Any) -> Any:
    """A State of PartitionSpecs given for a Module means StateSharding(that State)."""
    return jax.tree_util.tree_map(
        lambda x: StateSharding(x) if isinstance(x, State) else x,
        specs,
        is_leaf=lambda x: isinstance(x, State) or is_spec_leaf(x),
    )


def _check_divisible(call: MappedCall, mesh: Any) -> None:
    """Every sharded dimension exists and divides evenly over its mesh axes."""
    for kind, vals, specs in (
        ("state", call.values, call.state_specs),
        ("other", call.others, call.other_specs),
    ):
        for i, (v, spec) in enumerate(zip(vals, specs)):
            shape = tuple(getattr(v, "shape", ()))
            entries = tuple(spec)
            if len(entries) > len(shape):
                raise ValueError(
                    f"shard_map: {spec} has {len(entries)} entries but "
                    f"{call.where(kind, i)} has shape {shape}; give at most one per dimension."
                )
            for dim, names in enumerate(entries):
                if names is None:
                    continue
                names = names if isinstance(names, tuple) else (names,)
                n = math.prod(mesh.shape[a] for a in names)
                if shape[dim] % n:
                    raise ValueError(
                        f"shard_map: {call.where(kind, i)} has shape {shape}; dimension {dim} "
                        f"({shape[dim]}) is split over mesh axes {names} of total size {n}, "
                        "which does not divide it."
                    )


class ShardMapWrapped:
    """The callable returned by :func:`shard_map`: one ``jax.shard_map`` per structure/specs."""

    def __init__(
        self,
        f: Callable[..., Any],
        *,
        mesh: Any,
        in_specs: Any,
        out_specs: Any,
        axis_names: Set[Hashable],
        check_vma: bool,
    ):
        functools.update_wrapper(self, f)
        self.f, self.mesh = f, mesh
        self.in_specs = _with_state_sharding(in_specs)
        self.out_specs = _with_state_sharding(out_specs)
        self.axis_names, self.check_vma = axis_names, check_vma
        self._compiled: dict[Any, tuple[Callable[..., Any], MapBody]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"shard_map: keyword arguments {sorted(kwargs)} are not supported "
                "(in_specs describes the positional arguments); pass them "
                "positionally."
            )
        call = MappedCall(
            "shard_map",
            args,
            {},
            self.in_specs,
            kwargs_spec=None,
            check=_check_spec,
            what="in_specs",
        )
        _check_divisible(call, self.mesh)
        key = (
            call.plan.graphdef,
            call.treedef,
            tuple(call.positions),
            tuple(call.state_specs),
            tuple(call.other_specs),
        )
        entry = self._compiled.get(key)
        if entry is None:
            body = MapBody("shard_map", self.f, call, self.out_specs)
            fn = jax.shard_map(
                body,
                mesh=self.mesh,
                in_specs=(tuple(call.state_specs), tuple(call.other_specs)),
                out_specs=body.groups,
                axis_names=frozenset(self.axis_names),
                check_vma=self.check_vma,
            )
            entry = self._compiled[key] = (fn, body)
        grouped = entry[0](tuple(call.values), tuple(call.others))
        return entry[1].finish(call.plan, grouped, [])


def shard_map(
    f: Callable[..., Any] | None = None,
    *,
    mesh: Any,
    in_specs: Any,
    out_specs: Any,
    axis_names: Set[Hashable] = frozenset(),
    check_vma: bool = True,
) -> Any:
    """``jax.shard_map`` for functions that take and return Modules.

    ``in_specs`` is a prefix tree of the positional arguments: a ``PartitionSpec`` or, for a
    Module, a :class:`StateSharding` (a PartitionSpec per Variable filter, or built from a State
    of PartitionSpecs such as ``get_partition_spec(nnx.state(model))``). Each shard runs the
    function on its block of every Variable; the state it changes comes back with the same specs
    and is written to the caller's objects. ``out_specs`` describes the outputs (a
    StateSharding for a Module the function creates). Call it inside ``nnx_core.jit``.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> from jax.sharding import Mesh, PartitionSpec as P
        >>> import nnx_core as nnx
        >>> class Scale(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.arange(4.0)); self.calls = nnx.BatchStat(jnp.array(0))
        >>> mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
        >>> @nnx.jit
        ... @nnx.shard_map(mesh=mesh, in_specs=(nnx.StateSharding({nnx.Param: P("data"), ...: P()}), P("data")),
        ...                out_specs=P("data"))
        ... def apply(m, x):
        ...     m.calls.value = m.calls.value + 1
        ...     return m.w.value * x
        >>> m = Scale(); apply(m, jnp.ones(4)).tolist(), int(m.calls.value)
        ([0.0, 1.0, 2.0, 3.0], 1)

    Raises:
        ValueError: the specs do not match the arguments, a spec is not a PartitionSpec, a
            sharded dimension is missing or not divisible by its mesh axes, or the function
            changed the structure of a Module argument.
        TypeError: keyword arguments.
    """
    if f is None:
        return functools.partial(
            shard_map,
            mesh=mesh,
            in_specs=in_specs,
            out_specs=out_specs,
            axis_names=axis_names,
            check_vma=check_vma,
        )
    return ShardMapWrapped(
        f,
        mesh=mesh,
        in_specs=in_specs,
        out_specs=out_specs,
        axis_names=axis_names,
        check_vma=check_vma,
    )
