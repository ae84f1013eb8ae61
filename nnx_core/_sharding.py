"""Sharding: Variables carry logical axis names; JAX's SPMD does the distribution."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._api import merge, split, update
from ._logical import Rules, current_rules, mesh_axes
from ._state import State, format_path
from ._transforms._eval_shape import eval_shape
from ._variables import Variable


def _spec_for(
    leaf: Any, rules: Rules | None, mesh: Mesh | None, path: tuple[Any, ...]
) -> PartitionSpec:
    meta = leaf._meta if isinstance(leaf, Variable) else {}
    names = meta.get("sharding_names", meta.get("out_sharding"))  # out_sharding: flax's name
    if names is None:
        return PartitionSpec()
    ndim = len(getattr(leaf.get_raw_value(), "shape", ()))
    if len(names) != ndim:
        raise ValueError(
            f"{format_path(path)} has sharding_names {tuple(names)} ({len(names)} names) but its "
            f"value has {ndim} dimensions; give one name (or None) per dimension."
        )
    return mesh_axes(tuple(names), current_rules(rules), mesh)


def get_partition_spec(
    state: State, *, rules: Rules | None = None, mesh: Mesh | None = None
) -> State:
    """A State of ``PartitionSpec`` leaves from the Variables' ``sharding_names`` metadata.

    ``rules`` maps logical names to mesh axis names (e.g. ``{"embed": "model", "batch": "data"}``;
    default: the rules of the enclosing :func:`logical_axis_rules`, else names are mesh axes);
    a name absent from ``mesh`` (when given) is replicated. Variables without names are replicated.
    flax.nnx's ``out_sharding`` metadata is read when ``sharding_names`` is absent.

    Example:
        >>> import jax.numpy as jnp
        >>> import nnx_core as nnx
        >>> s = nnx.State({"w": nnx.Param(jnp.ones((4, 2)), sharding_names=("embed", None)),
        ...                "b": nnx.Param(jnp.ones(2))})
        >>> specs = nnx.get_partition_spec(s, rules={"embed": "model"})
        >>> specs["w"].value, specs["b"].value
        (P('model', None), P())

    Raises:
        ValueError: a Variable has a different number of names than dimensions.
    """
    return State.from_flat_state(
        (
            path,
            leaf.replace(_spec_for(leaf, rules, mesh, path))
            if isinstance(leaf, Variable)
            else PartitionSpec(),
        )
        for path, leaf in state.flat_state()
    )


def get_named_sharding(state: State, mesh: Mesh, *, rules: Rules | None = None) -> State:
    """A State of ``NamedSharding`` leaves over ``mesh`` (see :func:`get_partition_spec`)."""
    specs = get_partition_spec(state, rules=rules, mesh=mesh)
    return jax.tree_util.tree_map(
        lambda spec: NamedSharding(mesh, spec),
        specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec),
    )


def shard(node: Any, mesh: Mesh, *, rules: Rules | None = None) -> Any:
    """Place every Variable of ``node`` on ``mesh`` according to its logical names, in place.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.ones((4, 2)), sharding_names=("rows", None))
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("rows",))
        >>> nnx.shard(M(), mesh).w.value.sharding.spec
        P('rows', None)
    """
    graphdef, state = split(node)
    shardings = get_named_sharding(state, mesh, rules=rules)
    update(node, jax.device_put(state, shardings))
    return node


def create_sharded(
    constructor: Callable[[], Any], mesh: Mesh, *, rules: Rules | None = None
) -> Any:
    """Build a model directly sharded over ``mesh``: every array is created on its devices.

    The constructor runs abstractly first to learn the shapes and names, then once under
    ``jax.jit`` with the output shardings, so no full copy is ever made on one device.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> import nnx_core as nnx
        >>> class M(nnx.Module):
        ...     def __init__(self): self.w = nnx.Param(jnp.ones((4, 2)), sharding_names=("rows", None))
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("rows",))
        >>> nnx.create_sharded(M, mesh).w.value.sharding.spec
        P('rows', None)
    """
    graphdef, abstract = split(eval_shape(constructor))
    shardings = get_named_sharding(abstract, mesh, rules=rules)

    def build_state() -> State:
        return split(constructor())[1]

    state = jax.jit(build_state, out_shardings=shardings)()
    return merge(graphdef, state)
