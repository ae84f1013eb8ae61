"""Devices for a run: the ``--mesh data=N[,model=M]`` grammar, the `jax.sharding.Mesh`, and
placing batches and state on it (each process contributing its own rows of a global batch).

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

from ._run_dir import RunError

__all__ = ["parse_mesh", "make_mesh", "replicate_unplaced", "batch_placer"]


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
        name = name.strip()
        if (
            name not in ("data", "model")
            or name in axes
            or not size.strip().isdigit()
            or int(size) < 1
        ):
            raise RunError(
                f"--mesh expects data=N or data=N,model=M with positive sizes, got {text!r}."
            )
        axes[name] = int(size)
    if "data" not in axes:
        raise RunError(f"--mesh needs a 'data' axis (e.g. data=8), got {text!r}.")
    return axes


def make_mesh(axes: Mapping[str, int]) -> Any:
    """A `jax.sharding.Mesh` over the first ``prod(sizes)`` devices with axes ``data``, ``model``.

    Raises:
        RunError: fewer devices than the mesh needs.
    """

    sizes = {"data": axes.get("data", 1), "model": axes.get("model", 1)}
    needed = sizes["data"] * sizes["model"]
    devices = jax.devices()
    if needed > len(devices):
        raise RunError(
            f"--mesh data={sizes['data']},model={sizes['model']} needs {needed} devices but "
            f"{len(devices)} {devices[0].platform.upper()} device(s) are visible. On CPU, simulate "
            f"more with XLA_FLAGS=--xla_force_host_platform_device_count={needed}."
        )
    grid = np.array(devices[:needed]).reshape(sizes["data"], sizes["model"])
    return Mesh(grid, ("data", "model"))


def replicate_unplaced(node: Any, mesh: Any) -> None:
    """Put every array of ``node`` not yet on ``mesh`` on it, replicated."""

    replicated = NamedSharding(mesh, PartitionSpec())
    for _, variable in nnx.state(node).flat_state():
        sharding = getattr(variable.value, "sharding", None)
        if not (isinstance(sharding, NamedSharding) and sharding.mesh == mesh):
            variable.value = jax.device_put(variable.value, replicated)


def batch_placer(mesh: Any, batch_size: int) -> Any:

    if mesh is None:
        return lambda x, y: (x, y)
    data_size = mesh.shape["data"]
    if batch_size % data_size:
        raise RunError(
            f"train.batch_size {batch_size} must be divisible by the mesh's data "
            f"axis ({data_size}) to shard each batch evenly."
        )
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    if jax.process_count() == 1:
        return lambda x, y: (jax.device_put(x, sharding), jax.device_put(y, sharding))
    # many hosts: every process computes the same global batch and contributes its own rows
    share = batch_size // jax.process_count()
    rows = slice(jax.process_index() * share, (jax.process_index() + 1) * share)

    def place(x: Any, y: Any) -> tuple[Any, Any]:
        return (
            jax.make_array_from_process_local_data(sharding, x[rows], x.shape),
            jax.make_array_from_process_local_data(sharding, y[rows], y.shape),
        )

    return place
