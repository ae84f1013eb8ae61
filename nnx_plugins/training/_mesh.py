"""Devices for a run: the ``--mesh data=N[,model=M]`` grammar, the `jax.sharding.Mesh` (over
the devices of every process), and placing batches and state on it (with several processes,
each one transfers only the blocks of its own devices).

Example:
    >>> from nnx_plugins.training._mesh import make_mesh
    >>> mesh = make_mesh({"data": 1})
    >>> mesh.axis_names, mesh.devices.shape
    (('data', 'model'), (1, 1))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import nnx_core as nnx

from ._placement import place
from ._run_dir import RunError

__all__ = [
    "parse_mesh",
    "make_mesh",
    "shard_over",
    "replicate_unplaced",
    "batch_placer",
]


def parse_mesh(text: str) -> dict[str, int]:
    """Parse ``data=N[,model=M]`` into ``{"data": N, "model": M}``.

    Example:
        >>> from nnx_plugins.training._mesh import parse_mesh
        >>> parse_mesh("data=4,model=2")
        {'data': 4, 'model': 2}

    Raises:
        RunError: not of that form.
    """
    axes: dict[str, int] = {}
    for part in text.split(","):
        name, _, size = part.partition("=")
        name, size = name.strip(), size.strip()
        digits = size.isascii() and size.isdigit() and len(size) <= 9  # (not '²', not 10**100)
        if name not in ("data", "model") or name in axes or not digits or int(size) < 1:
            raise RunError(
                f"--mesh expects data=N or data=N,model=M with positive sizes, got {text[:80]!r}."
            )
        axes[name] = int(size)
    if "data" not in axes:
        raise RunError(f"--mesh needs a 'data' axis (e.g. data=8), got {text!r}.")
    return axes


def make_mesh(axes: Mapping[str, int]) -> Any:
    """A `jax.sharding.Mesh` with axes ``data``, ``model`` over ``prod(sizes)`` devices.

    One process: its first devices. Several processes (`jax.distributed`): the same number of
    devices from each process, so that every process takes part in every step.

    Raises:
        RunError: fewer devices than the mesh needs, or a mesh that cannot be split evenly over
            the processes.
    """

    sizes = {"data": axes.get("data", 1), "model": axes.get("model", 1)}
    needed = sizes["data"] * sizes["model"]
    text = f"--mesh data={sizes['data']},model={sizes['model']}"
    devices = jax.devices()
    if needed > len(devices):
        over = f" over {jax.process_count()} processes" if jax.process_count() > 1 else ""
        raise RunError(
            f"{text} needs {needed} devices but {len(devices)} {devices[0].platform.upper()} "
            f"device(s) are visible{over}. On CPU, simulate more with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={_per_process(needed)}."
        )
    grid = np.array(_spread(devices, needed, text)).reshape(sizes["data"], sizes["model"])
    return Mesh(grid, ("data", "model"))


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


def shard_over(node: Any, mesh: Any) -> None:
    """Place every Variable of ``node`` on ``mesh`` by its ``sharding_names``, in place.

    With one process this is `nnx_core.shard`; with several, every process places the blocks of
    its own devices from its copy of the values (`jax.device_put` cannot reach other processes'
    devices).
    """
    if jax.process_count() == 1:
        nnx.shard(node, mesh)
        return
    state = nnx.state(node)
    shardings = dict(nnx.get_named_sharding(state, mesh).flat_state())
    for path, variable in state.flat_state():
        variable.value = place(variable.value, shardings[path].value)


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


def batch_placer(mesh: Any, batch_size: int) -> Any:
    """A function placing a global batch (a dict of arrays) over the mesh's ``data`` axis.

    Every process computes the same global batch (a pure function of the seed and the step);
    with several processes each one transfers only the rows of its own devices.

    Raises:
        RunError: ``batch_size`` is not divisible by the ``data`` axis.
    """
    if mesh is None:
        return lambda batch: batch
    data_size = mesh.shape["data"]
    if batch_size % data_size:
        raise RunError(
            f"train.batch_size {batch_size} must be divisible by the mesh's data "
            f"axis ({data_size}) to shard each batch evenly."
        )
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    put = (
        (lambda a: jax.device_put(a, sharding))
        if jax.process_count() == 1
        else (lambda a: place(a, sharding))
    )
    return lambda batch: {key: put(value) for key, value in batch.items()}
