"""``out_sharding=``: how a layer lays its output out over the devices of a mesh.

A layer's call takes ``out_sharding`` (a ``PartitionSpec`` naming axes of the mesh set with
``jax.set_mesh``, or a ``NamedSharding``) as flax.nnx's do. Over a mesh whose named axes are
``Explicit`` the layer's JAX op computes its result in that sharding (the op's own
``out_sharding``); over ``Auto`` axes the result is constrained to it
(``jax.lax.with_sharding_constraint``), which XLA's partitioner honours the same way.
"""

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

__all__ = ["out_sharding_op", "place"]


def _axis_names(spec: PartitionSpec) -> list[str]:
    names: list[str] = []
    for entry in spec:
        if isinstance(entry, str):
            names.append(entry)
        elif isinstance(entry, tuple):
            names.extend(e for e in entry if isinstance(e, str))
    return names


def _mode(layer: str, out_sharding: Any) -> str:
    """``"explicit"`` if the mesh axes ``out_sharding`` names are Explicit, else ``"auto"``;
    ``"none"`` for a spec naming no axis with no mesh set (one device: nothing to lay out)."""
    if isinstance(out_sharding, NamedSharding):
        mesh, spec = out_sharding.mesh, out_sharding.spec
    elif isinstance(out_sharding, PartitionSpec):
        mesh, spec = jax.sharding.get_abstract_mesh(), out_sharding
    else:
        raise TypeError(
            f"{layer} out_sharding must be a jax.sharding.PartitionSpec or NamedSharding, got "
            f"{out_sharding!r}. Pass e.g. out_sharding=PartitionSpec('data', None)."
        )
    names = _axis_names(spec)
    unknown = [n for n in names if n not in mesh.axis_names]
    if unknown and not mesh.axis_names:
        raise ValueError(
            f"{layer} out_sharding={spec} names mesh axes {unknown}, but no mesh is set. Call "
            f"the layer under `with jax.set_mesh(mesh):` or pass a NamedSharding."
        )
    if unknown:
        raise ValueError(
            f"{layer} out_sharding={spec} names axes {unknown} that the mesh does not have "
            f"(its axes: {list(mesh.axis_names)}). Use the mesh's axis names."
        )
    if not mesh.axis_names:
        return "none"
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    explicit = all(types[n] == AxisType.Explicit for n in names or mesh.axis_names)
    return "explicit" if explicit else "auto"


def out_sharding_op(
    layer: str, op: Callable[..., Any], out_sharding: Any, *, native: bool = True
) -> Callable[..., Any]:
    """``op`` made to return its result laid out as ``out_sharding`` (``op`` if it is None).

    ``native`` says that ``op`` takes ``out_sharding`` itself (``lax.dot_general``,
    ``jnp.einsum``, ...); otherwise, over Explicit axes, it runs under ``jax.sharding.auto_axes``.

    Raises:
        TypeError: ``out_sharding`` is neither a PartitionSpec nor a NamedSharding.
        ValueError: it names axes the mesh does not have, or no mesh is set.
    """
    mode = "none" if out_sharding is None else _mode(layer, out_sharding)
    if mode == "none":
        return op
    if mode == "explicit":
        if native:
            return functools.partial(op, out_sharding=out_sharding)
        return jax.sharding.auto_axes(op, out_sharding=out_sharding)

    def constrained(*args: Any, **kwargs: Any) -> Any:
        return jax.lax.with_sharding_constraint(op(*args, **kwargs), out_sharding)

    return constrained


def place(layer: str, y: jax.Array, out_sharding: Any) -> jax.Array:
    """``y`` laid out as ``out_sharding`` (resharded over Explicit axes, else constrained)."""
    mode = "none" if out_sharding is None else _mode(layer, out_sharding)
    if mode == "none":
        return y
    if mode == "explicit":
        return jax.sharding.reshard(y, out_sharding)
    return jax.lax.with_sharding_constraint(y, out_sharding)
