"""Checks before a run allocates anything: the data against the task, the model against both,
the run against memory.

The model runs abstractly (`check_model`) on a batch of the data's inputs; the task says
whether the output fits (logits for the classes, one output per regression target, token
logits) and whether the data fits it (integer labels within the model's classes, the first bad
one named). Nothing is allocated and nothing is written.

Example:
    >>> from nnx_plugins.training._preflight import data_spec
    >>> from nnx_plugins.training.data._bundled import Digits
    >>> from nnx_plugins.training.tasks._classification import Classification
    >>> spec = data_spec(Digits(layout="flat").describe(), Classification())
    >>> spec.example, spec.origin
    (ShapeDtypeStruct(shape=(64,), dtype=float32), 'data (digits, layout flat)')
    >>> import jax
    >>> spec.check_output(jax.ShapeDtypeStruct((2, 5), "float32"))
    'the model returns float32[2,5] but the 10 classes of digits need logits of shape (batch, 10): end the model with a layer of 10 outputs.'
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import nnx_core as nnx

from ..config._shapes import DataSpec, ModelCheck, check_model
from ..registry._errors import PluginError
from ..registry._registry import default_registry
from ._device_memory import DeviceMemory, check_device_memory, device_memory, step_peak
from ._layout import Layout, LayoutError, layout_error
from ._memory import check_memory, estimate_memory, trainable_kinds
from ._part_calls import PartLabel
from ._sharded import abstract_sharded
from .data._base import DataInfo

__all__ = [
    "data_spec",
    "check_on_data",
    "preflight",
    "plan_layout",
    "measure_step",
    "batch_struct",
    "compile_step",
]


def data_spec(info: DataInfo, task: Any) -> DataSpec:
    """The `DataSpec` of data described by ``info`` for ``task``: its inputs, and the task's
    check of the model's output (what it raises named with the task: `RunPartError`)."""
    check = getattr(task, "check_output", None)

    def checked(output: Any) -> Any:
        with _label(task).calling("check_output(output, info)"):
            return check(output, info)

    return DataSpec(info.inputs, info.origin, checked if callable(check) else None, info.hint)


def _label(task: Any) -> PartLabel:
    try:
        name = default_registry().name_of(type(task), "task")
    except PluginError:
        name = type(task).__name__
    return PartLabel("task", name, ("task",))


def check_on_data(config: Any, info: DataInfo, task: Any) -> ModelCheck:
    """Check the model abstractly on the data: every problem at its layer's position, the
    output against the task.

    Raises:
        ConfigError: a layer cannot be built or cannot take its input, or the output does not
            fit the task.
    """
    return check_model(config, data=data_spec(info, task))


def preflight(config: Any, info: DataInfo, task: Any, *, allow_large: bool) -> ModelCheck:
    """Before a run on one device builds its model: `check_on_data`, and its memory against
    what is free (over a mesh, `plan_layout` checks each device's share instead).

    Raises:
        ConfigError: a layer cannot be built or cannot take its input, the output does not fit
            the task, or the run needs more memory than is free.
    """
    check = check_on_data(config, info, task)
    optimizer = config.sections["optimizer"]
    kinds = trainable_kinds(optimizer.trainable)
    estimate = estimate_memory(check.state, optimizer.make(), kinds)
    check_memory(estimate, config, allow_large=allow_large)
    return check


def plan_layout(
    config: Any, layout: Layout, make: Any, *, allow_large: bool
) -> tuple[Any, DeviceMemory]:
    """Before a run over a mesh allocates anything: lay out the model and the optimizer that
    ``make`` builds, abstractly (every dimension split as the rules say, or an error), warn
    about rules that name nothing, and refuse a run whose parameters and optimizer state do not
    fit the devices.

    Returns ``(abstract, memory)``: the abstract ``(model, optimizer)``, each array carrying its
    sharding, and what each device holds.

    Raises:
        ConfigError: a Variable that cannot be laid out (at its rule or layer), or a run that
            does not fit (unless ``allow_large``).
    """
    try:
        abstract, _ = abstract_sharded(make, layout)
    except LayoutError as error:
        raise layout_error(config, error) from None
    model_state, optimizer_state = (nnx.state(node) for node in abstract)
    layout.warn_unused(model_state)
    kinds = trainable_kinds(config.sections["optimizer"].trainable)
    memory = device_memory(model_state, optimizer_state, kinds, layout.mesh)
    return abstract, check_device_memory(memory, config, allow_large=allow_large)


def measure_step(
    config: Any, memory: DeviceMemory, compiled: Any, *, allow_large: bool
) -> DeviceMemory:
    """``memory`` with the compiled train step's peak, checked against the devices.

    Raises:
        ConfigError: the step does not fit (unless ``allow_large``).
    """
    measured = dataclasses.replace(memory, step_bytes=step_peak(compiled))
    return check_device_memory(measured, config, allow_large=allow_large)


def batch_struct(batch: Any, sharding: Any) -> dict[str, Any]:
    """Abstract arrays of a batch's shapes and dtypes, carrying the batch's sharding."""
    return {
        key: jax.ShapeDtypeStruct(np.shape(value), np.asarray(value).dtype, sharding=sharding)
        for key, value in batch.items()
    }


def compile_step(steps: Any, model: Any, optimizer: Any, batch: Any) -> Any:
    """The train step compiled for these (possibly abstract) arguments, without running it.

    ``model`` is put in training mode, as the run puts its model: the same structure, so the
    run's first step finds this compilation instead of compiling again.
    """
    model.train()
    mesh = next(iter(batch.values())).sharding.mesh
    bad = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, PartitionSpec()))
    return steps.train.lower(model, optimizer, batch, bad, np.int32(1)).compile()
