"""Devices for a run: the ``--mesh data=N,fsdp=F,model=M`` grammar, the `jax.sharding.Mesh`
(over the devices of every process), and placing batches and state on it (with several
processes, each one transfers only the blocks of its own devices).

Example:
    >>> from nnx_plugins.training._mesh import make_mesh
    >>> mesh = make_mesh({"data": 1})
    >>> mesh.axis_names, mesh.devices.shape
    (('data', 'fsdp', 'model'), (1, 1, 1))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import nnx_core as nnx

from ._layout import Layout, LayoutError, layout_error
from ._placement import place
from ._rules import BATCH_AXES, MESH_AXES, axes_text, rules_of
from ._run_dir import RunError

__all__ = [
    "parse_mesh",
    "check_axes",
    "mesh_text",
    "make_mesh",
    "run_layout",
    "replicate_unplaced",
    "batch_placer",
    "first_bad_step",
]


def parse_mesh(text: str) -> dict[str, int]:
    """Parse ``data=N,fsdp=F,model=M`` (any of the axes, in any order) into a mapping.

    Example:
        >>> from nnx_plugins.training._mesh import parse_mesh
        >>> parse_mesh("data=4,model=2"), parse_mesh("fsdp=8")
        ({'data': 4, 'model': 2}, {'fsdp': 8})

    Raises:
        RunError: an unknown axis (the known ones named), an axis twice, or a size that is not
            a positive integer.
    """
    axes: dict[str, int] = {}
    for part in text.split(","):
        name, _, size = part.partition("=")
        name, size = name.strip(), size.strip()
        digits = size.isascii() and size.isdigit() and len(size) <= 9  # (not '²', not 10**100)
        if name and name not in MESH_AXES:
            raise RunError(
                f"--mesh: unknown axis {name[:40]!r} in {text[:80]!r}; the mesh axes are "
                f"{axes_text()} (e.g. --mesh data=2,fsdp=2,model=2)."
            )
        if not name or name in axes or not digits or int(size) < 1:
            raise RunError(
                f"--mesh expects AXIS=N[,AXIS=N...] with the axes {axes_text()}, each at most "
                f"once, and positive sizes, e.g. data=2,fsdp=2,model=2; got {text[:80]!r}."
            )
        axes[name] = int(size)
    return axes


def check_axes(axes: Mapping[str, Any]) -> dict[str, int]:
    """The sizes of a ``mesh=`` mapping (``{"fsdp": 8}``), every axis filled in.

    Raises:
        RunError: an unknown axis (the known ones named) or a size that is not a positive
            integer.
    """
    unknown = [name for name in axes if name not in MESH_AXES]
    if unknown:
        raise RunError(
            f"mesh={dict(axes)!r} names unknown axes {unknown}; the mesh axes are "
            f"{axes_text()} (e.g. mesh={{'fsdp': 8}})."
        )
    bad = {k: v for k, v in axes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1}
    if bad:
        raise RunError(f"mesh sizes must be positive integers, got {bad}.")
    return {axis: int(axes.get(axis, 1)) for axis in MESH_AXES}


def mesh_text(sizes: Mapping[str, int]) -> str:
    """``'--mesh data=2,fsdp=2,model=2'`` (the axes of size > 1; ``data=1`` when none is)."""
    parts = [f"{axis}={size}" for axis, size in sizes.items() if size > 1]
    return "--mesh " + (",".join(parts) or "data=1")


def make_mesh(axes: Mapping[str, int]) -> Any:
    """A `jax.sharding.Mesh` with the axes ``data``, ``fsdp``, ``model`` (size 1 where
    ``axes`` has none) over ``prod(sizes)`` devices.

    One process: its first devices. Several processes (`jax.distributed`): the same number of
    devices from each process, so that every process takes part in every step.

    Raises:
        RunError: an unknown axis, fewer devices than the mesh needs, or a mesh that cannot be
            split evenly over the processes.
    """
    sizes = check_axes(axes)
    needed = math.prod(sizes.values())
    text = mesh_text(sizes)
    devices = jax.devices()
    if needed > len(devices):
        over = f" over {jax.process_count()} processes" if jax.process_count() > 1 else ""
        raise RunError(
            f"{text} needs {needed} devices but {len(devices)} {devices[0].platform.upper()} "
            f"device(s) are visible{over}. On CPU, simulate more with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={_per_process(needed)}."
        )
    grid = np.array(_spread(devices, needed, text)).reshape(tuple(sizes.values()))
    return Mesh(grid, MESH_AXES)


def run_layout(config: Any, mesh: Any) -> Layout | None:
    """The `Layout` of a run (``None``: one device, nothing to lay out).

    The mesh is ``mesh`` (a `jax.sharding.Mesh`, or axis sizes such as ``{"fsdp": 8}``), else
    the config's ``mesh:`` section; with several processes and neither, ``data`` over every
    device. The rules are `DEFAULT_RULES` with the config's ``sharding_rules:`` over them.

    Raises:
        RunError: an unknown axis, a size that is not a positive integer, a mesh larger than the
            devices, or ``mesh`` of another type.
        ConfigError: a rule naming an axis that the (user's) mesh does not have.
    """
    if mesh is None:
        section = config.sections.get("mesh")
        if section is not None:
            mesh = section.sizes()
        elif jax.process_count() > 1:  # (several processes: one data-parallel mesh)
            mesh = {"data": jax.device_count()}
        else:
            return None
    if isinstance(mesh, Mapping):
        mesh = make_mesh(mesh)
    if not isinstance(mesh, Mesh):
        raise RunError(
            f"mesh= takes a jax.sharding.Mesh or the axis sizes, e.g. mesh={{'fsdp': 8}}, got "
            f"{type(mesh).__name__} {str(mesh)[:60]!r}."
        )
    try:
        return Layout.of(mesh, rules_of(config.sections.get("sharding_rules")))
    except LayoutError as error:
        raise layout_error(config, error) from None


def _per_process(needed: int) -> int:
    return -(-needed // jax.process_count())


def _spread(devices: list[Any], needed: int, text: str) -> list[Any]:
    """``needed`` devices, an equal share from each process (in process order)."""
    count = jax.process_count()
    if count == 1:
        return devices[:needed]
    if needed % count:
        raise RunError(
            f"{text} has {needed} devices, which cannot be split evenly over {count} "
            f"processes; use a multiple of {count} (e.g. data={count * _per_process(needed)})."
        )
    share = needed // count
    by_process: dict[int, list[Any]] = {}
    for device in devices:
        by_process.setdefault(device.process_index, []).append(device)
    short = {p: len(found) for p, found in sorted(by_process.items()) if len(found) < share}
    if short:
        raise RunError(
            f"{text} takes {share} devices from each of the {count} processes, but process(es) "
            f"{', '.join(f'{p} ({n} devices)' for p, n in short.items())} have fewer. Use a "
            "smaller mesh, or give every process as many devices."
        )
    return [d for p in sorted(by_process) for d in by_process[p][:share]]


def replicate_unplaced(node: Any, mesh: Any) -> None:
    """Put every array of ``node`` not yet on ``mesh`` on it, replicated."""

    replicated = NamedSharding(mesh, PartitionSpec())
    for _, variable in nnx.state(node).flat_state():
        sharding = getattr(variable.value, "sharding", None)
        if not (isinstance(sharding, NamedSharding) and sharding.mesh == mesh):
            if jax.process_count() == 1:
                variable.value = jax.device_put(variable.value, replicated)
            else:
                variable.value = place(variable.value, replicated)


def first_bad_step(mesh: Any) -> Any:
    """The train step's first-bad-step counter, 0, placed as the step returns it: replicated
    over ``mesh``, or committed to the default device (an uncommitted input would make the
    second step compile again, for the placement of the first step's output)."""
    zero = np.int32(0)
    if mesh is None:
        return jax.device_put(zero, jax.devices()[0])
    return place(zero, NamedSharding(mesh, PartitionSpec()))


def batch_placer(mesh: Any, batch_size: int) -> Any:
    """A function placing a global batch (a dict of arrays) over the mesh's ``data`` and
    ``fsdp`` axes (those it has) together.

    Every process computes the same global batch (a pure function of the seed and the step);
    with several processes each one transfers only the rows of its own devices.

    Raises:
        RunError: ``batch_size`` is not divisible by those axes.
    """
    if mesh is None:
        return lambda batch: batch
    axes = tuple(a for a in BATCH_AXES if a in mesh.axis_names)
    parts = math.prod(mesh.shape[a] for a in axes)
    if batch_size % parts:
        split = [a for a in axes if mesh.shape[a] > 1]
        what = (
            f"the mesh's {split[0]} axis ({parts})"
            if len(split) == 1
            else f"the mesh's {' and '.join(split)} axes ({' x '.join(str(mesh.shape[a]) for a in split)} = {parts}), which split the batch together,"
        )
        raise RunError(
            f"train.batch_size {batch_size} must be divisible by {what} to shard each batch "
            f"evenly; use a batch size that is a multiple of {parts}."
        )
    sharding = NamedSharding(mesh, PartitionSpec(axes or None))
    put = (
        (lambda a: jax.device_put(a, sharding))
        if jax.process_count() == 1
        else (lambda a: place(a, sharding))
    )
    return lambda batch: {key: put(value) for key, value in batch.items()}
