"""What each device of a mesh holds: the bytes of its blocks of the parameters and of the
optimizer state (from the shardings, before anything is allocated), and the peak of the
compiled train step (XLA's memory analysis of the per-device program); a run that does not
fit is refused before its first step.

Simulated CPU devices share the host's memory, so on CPU the figure for all of this
process's devices of the mesh is compared with the host's available memory; an accelerator's
figure is compared with its own limit.

Example:
    >>> import jax
    >>> from jax.sharding import NamedSharding, PartitionSpec
    >>> import nnx_core as nnx
    >>> from nnx_plugins.training._device_memory import per_device_bytes
    >>> from nnx_plugins.training._mesh import make_mesh
    >>> sharding = NamedSharding(make_mesh({"data": 1}), PartitionSpec())
    >>> state = nnx.State({"w": nnx.Param(jax.ShapeDtypeStruct((4, 8), "float32", sharding=sharding))})
    >>> per_device_bytes(state)
    128
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from ..config._errors import ConfigError
from ._memory import _host_available, human_bytes
from ._mesh import mesh_text

__all__ = [
    "DeviceMemory",
    "per_device_bytes",
    "device_memory",
    "step_peak",
    "device_limit",
    "check_device_memory",
    "memory_line",
    "memory_rows",
]


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
    """Bytes on each device of a mesh (the most any one device holds).

    Attributes:
        mesh: how the mesh is spelled (``--mesh fsdp=8``).
        devices: the devices of the mesh; ``local_devices`` those of this process.
        parameter_bytes: the model's Variables (parameters and statistics).
        optimizer_bytes: the optimizer's state.
        gradient_bytes: one gradient per trainable value (an estimate until the step is
            compiled).
        step_bytes: the compiled train step's peak (arguments + outputs - donated buffers +
            temporaries: activations, gradients, collectives' buffers), once known.
    """

    mesh: str
    devices: int
    local_devices: int
    parameter_bytes: int
    optimizer_bytes: int
    gradient_bytes: int
    step_bytes: int | None = None

    @property
    def total_bytes(self) -> int:
        """The step's peak when known, else parameters + optimizer state + gradients."""
        if self.step_bytes is not None:
            return max(self.step_bytes, self.parameter_bytes + self.optimizer_bytes)
        return self.parameter_bytes + self.optimizer_bytes + self.gradient_bytes


def _itemsize(dtype: Any) -> int:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))
        return math.prod(data.shape) * np.dtype(data.dtype).itemsize
    return np.dtype(dtype).itemsize


def per_device_bytes(state: Any, *, where: Any = None) -> int:
    """The bytes of one device's blocks of every array of ``state`` (abstract arrays that carry
    their sharding, or arrays), for the Variables ``where(variable)`` selects (all by default).
    A replicated array counts whole; one split in ``n`` counts ``1/n``."""
    total = 0
    for _, variable in state.flat_state():
        if where is not None and not where(variable):
            continue
        value = variable.get_raw_value()
        shape = tuple(getattr(value, "shape", ()))
        sharding = getattr(value, "sharding", None)
        block = sharding.shard_shape(shape) if sharding is not None else shape
        total += math.prod(block) * _itemsize(value.dtype) if hasattr(value, "dtype") else 0
    return total


def device_memory(
    model_state: Any, optimizer_state: Any, kinds: tuple[type, ...], mesh: Any
) -> DeviceMemory:
    """The `DeviceMemory` of a model and optimizer laid out on ``mesh`` (their abstract states,
    each array carrying its sharding), training the Variables of the classes ``kinds``."""
    local = sum(1 for d in mesh.devices.flat if d.process_index == jax.process_index())
    return DeviceMemory(
        mesh_text(dict(mesh.shape)),
        mesh.devices.size,
        local,
        per_device_bytes(model_state),
        per_device_bytes(optimizer_state),
        per_device_bytes(model_state, where=lambda v: isinstance(v, kinds)),
    )


def step_peak(compiled: Any) -> int | None:
    """The peak bytes on one device of a compiled step (``None`` if XLA does not say)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    return int(
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        - stats.alias_size_in_bytes
        + stats.temp_size_in_bytes
    )


def device_limit(local_devices: int) -> tuple[int, str]:
    """``(bytes, what)``: what one device may use, and that said in words: an accelerator's
    limit, or the host's available memory shared by the ``local_devices`` simulated CPU
    devices."""
    device = jax.local_devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and stats.get("bytes_limit"):
        limit = int(stats["bytes_limit"])
        return limit, f"each {device.platform.upper()} device has {human_bytes(limit)}"
    available = _host_available()
    share = available // max(local_devices, 1)
    if local_devices > 1:
        return share, (
            f"the {local_devices} CPU devices of this process share {human_bytes(available)} "
            f"of available host memory, {human_bytes(share)} each"
        )
    return share, f"the host has {human_bytes(available)} available"


def memory_line(memory: DeviceMemory) -> str:
    """One line: what each device holds."""
    step = (
        "" if memory.step_bytes is None else f", train step peak {human_bytes(memory.step_bytes)}"
    )
    return (
        f"memory per device ({memory.mesh}, {memory.devices} devices): parameters "
        f"{human_bytes(memory.parameter_bytes)}, optimizer state "
        f"{human_bytes(memory.optimizer_bytes)}{step}"
    )


def memory_rows(memory: DeviceMemory) -> list[tuple[str, str, str]]:
    """``(what, per device, all devices)`` rows of a table."""
    rows = [
        ("parameters", memory.parameter_bytes),
        ("optimizer state", memory.optimizer_bytes),
        ("gradients (estimate)" if memory.step_bytes is None else None, memory.gradient_bytes),
        ("train step peak", memory.step_bytes),
        ("total", memory.total_bytes),
    ]
    return [
        (what, human_bytes(size), human_bytes(size * memory.devices))
        for what, size in rows
        if what is not None and size is not None
    ]


def check_device_memory(memory: DeviceMemory, config: Any, *, allow_large: bool) -> DeviceMemory:
    """Return ``memory``, or refuse a run whose devices cannot hold it.

    Raises:
        ConfigError: at ``model`` (``mesh`` when the config has one), with each figure, unless
            ``allow_large``.
    """
    limit, what = device_limit(memory.local_devices)
    if allow_large or memory.total_bytes <= limit:
        return memory
    step = (
        f", the compiled train step's peak {human_bytes(memory.step_bytes)}"
        if memory.step_bytes is not None
        else f", gradients {human_bytes(memory.gradient_bytes)}"
    )
    where = ("mesh",) if "mesh" in getattr(config, "sections", {}) else ("model",)
    raise ConfigError(
        [
            config.problem(
                where,
                f"training over {memory.mesh} needs {human_bytes(memory.total_bytes)} on each of "
                f"its {memory.devices} devices (parameters {human_bytes(memory.parameter_bytes)}"
                f", optimizer state {human_bytes(memory.optimizer_bytes)}{step}) but {what}. "
                "Split the parameters over more devices (--mesh fsdp=N, "
                "model=M), make the model or the batch smaller, or pass --allow-large "
                "(allow_large=True) to try anyway.",
            )
        ]
    )
